"""Signing a finished bundle, and checking its signatures (issue 14).

A signed bundle carries two kinds of signature:

- an Authenticode signature block (`# SIG # Begin signature block`) at the end of every `.ps1`, which
  is what Windows PowerShell's `AllSigned` policy, Trusted Publishers and WDAC evaluate;
- `SHA256SUMS.p7s`, a detached CMS (PKCS#7) signature over `SHA256SUMS`, which pins every other file,
  so a payload file changed together with a rewritten `SHA256SUMS` is caught.

`signature.json` (listed in `SHA256SUMS`, so covered by the CMS signature) records what was signed and
the sha256 of the unsigned bundle it was made from. One module per concept: `credentials` (loading and
checking the certificate and key), `pkix` (certificate chains against a trust anchor), `cms` (building
and checking CMS SignedData), `timestamp` (RFC 3161 tokens), `authenticode` (PowerShell signature
blocks, osslsigncode), `external` (the `--signer` contract), `layout` (a bundle unpacked, and the
unsigned bundle rebuilt from a signed one), `bundle` (signing a bundle zip), `check` (verifying the
signatures of a signed bundle), `verify` (checking a finished bundle, signed or not: what `ort-bundler
verify`, `sign`, `publish` and `pull` run). The install-time checks are `bundler/shipped/ort_bundle/engine/trust.py` (Linux, openssl)
and `templates/_bundle_signature.ps1.j2` (Windows PowerShell 5.1).
"""
