"""The programs ort-bundler runs but does not ship: each named once, with the Debian package that has it,
the oldest version that does the job, and the one sentence a user reads when it is missing (`tools`)."""
