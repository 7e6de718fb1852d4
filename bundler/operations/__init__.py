"""What the commands do, without the command line: one module per operation, named after its command (`build`,
`lock`, `fetch`, `reproduce`, `diff`, `inspect`, `init`).

`bundler/commands/<name>.py` parses the arguments and prints the answer; `bundler/operations/<name>.py` does the
work and is what tests and other code call (`build(manifest, cache=…, out_dir=…)`). The split keeps the
parser cheap to build: a command module imports its operation inside `run`, so `ort-bundler verify` never
imports the lock resolver. An operation imports no command.
"""
