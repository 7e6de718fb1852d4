"""The manifest's schema: every table, every key it may hold and what each key means, in one definition.

The parser refuses a key that is not listed here (`KEYS`), and the documentation's manifest reference is
generated from the same records (docs/hooks/reference.py), so a key cannot be accepted without being
documented, nor documented without being accepted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    """One table of the manifest (`[bundle]`) or an array of tables (`[[models]]`), and its keys' meanings."""

    name: str
    keys: dict[str, str]
    array: bool = False
    #: An input table's own keys (`url`, `path`, …) are accepted here too, as in [Inputs](#inputs).
    takes_input: bool = False


INPUT_DOC = "an input table (`url`, `path` or `requirement`, and `sha256`; see [Inputs](#inputs))"

#: The keys every input table has (`[ort] wheel`, `[vc_redist]`, `[[models]]`, …): one source and its hash.
INPUT = Table("input", {
    "url": "`https://…`, `http://…` or `file:…` (a relative `file:` URL is below the manifest's folder)",
    "path": "a file relative to the manifest's folder",
    "requirement": "`name==version`, fetched with `pip download` through your own pip configuration",
    "sha256": "the file's SHA-256, 64 lowercase hex digits (for a `requirement`, a list: one per acceptable wheel)",
    "size": "optional: the most bytes a download may bring",
    "allow_outside": "a `path` outside the manifest's folder is allowed",
})

TABLES: tuple[Table, ...] = (
    Table("bundle", {
        "name": "the bundle's name: letters, digits, `.`, `_`, `-`",
        "version": "the bundle's version",
        "platform": "the TARGET: `win_amd64` or `linux_x86_64`",
        "python": "the target's Python, such as `\"3.11\"`",
        "source_date_epoch": "optional: the zip's timestamps (default 1980-01-01)",
        "publisher": "optional: Add/Remove Programs' and the MSI's publisher (default `\"ort-bundler\"`)",
        "upgrade_code": "optional: a GUID the organisation owns, the MSI's UpgradeCode and the namespace of its "
                        "other GUIDs (`init` writes a fresh one; unset: from the name, and `package --msi` warns)",
    }),
    Table("ort", {
        "version": "the ONNX Runtime version, such as `\"1.23.1\"`",
        "capi": INPUT_DOC + ": a zip, wheel or folder with `onnxruntime/capi/`, from which the ORT wheel is rebuilt",
        "wheel": INPUT_DOC + ": an ORT wheel used as it is (instead of `capi`)",
        "archive": INPUT_DOC + ": the C/C++ release archive (zip or tgz); the bundle then carries `payload/sdk/`",
        "dependencies": "only for a `capi` tree without dist-info: its requirements, such as `[\"numpy>=1.21.6\"]`",
        "allow_unsigned": "a custom ORT build: its binaries need not carry Microsoft's signature",
        "allow_test_signed": "files signed with Microsoft's test certificate allowed by name and sha256: "
                             "`[{ file = \"onnxruntime_providers_cuda.dll\", sha256 = \"…\" }]`",
    }),
    Table("python", {
        "lock": "the lock file `ort-bundler lock` writes, such as `\"app.lock.toml\"`",
        "requirements": "extra wheels, locked together with ORT's own",
        "runtime": INPUT_DOC + ": bundle the interpreter (python.org's embeddable package or a "
                   "python-build-standalone `install_only` archive)",
    }),
    Table("vc_redist", {
        "min_version": "may raise, never lower, the VC++ minimum computed from the binaries",
        "allow_unsigned": "your organisation's repackaged redistributable, without Microsoft's signature",
    }, takes_input=True),
    Table("gpu", {
        "cuda": "the CUDA version, such as `\"11.8\"` (not with DirectML)",
        "cudnn": "the cuDNN version, such as `\"8.6\"` (not with DirectML)",
        "providers": "the execution providers the self-check must find running, default `[\"CUDAExecutionProvider\"]`; "
                     "`[\"DmlExecutionProvider\"]` alone for DirectML (Windows, no cuda, cudnn or sources)",
        "sources": "the `[[gpu.sources]]` tables: wheels or archives that supply the GPU DLLs",
    }),
    Table("gpu.sources", {
        "include": "glob patterns of the files to take, such as `[\"nvidia/*/bin/*.dll\"]`",
    }, array=True, takes_input=True),
    Table("models", {
        "name": "the model's name (unique in the bundle)",
        "shapes": "dynamic dimensions for the smoke run, such as `{ input = [1, 3, 224, 224] }` (at most "
                  "16,777,216 elements in all)",
        "license": "optional SPDX expression (`LicenseRef-<name>` for your own terms); the SBOM says \"unknown\" "
                   "without it",
        "data": "the `[[models.data]]` tables: a model's external data files, each pinned",
    }, array=True, takes_input=True),
    Table("models.data", {
        "location": "as the model's tensors name it, relative to the model's folder (default: the file's name)",
    }, array=True, takes_input=True),
    Table("launch", {
        "module": "the entry point as a module, such as `\"myapp.main\"`",
        "script": INPUT_DOC + ": the entry point as a script",
        "program": INPUT_DOC + ": the entry point as a native program, such as `app.exe`",
        "cache_dir": "the application's cache folder on the target",
        "env": "your application's environment variables, `{ NAME = \"value\" }`",
        "apply_tuning": "the entry point's sessions get the options `run --tune` chose (default false)",
    }),
)

INPUT_KEYS = frozenset(INPUT.keys)
#: The top-level tables a manifest may have.
SECTIONS = frozenset(table.name for table in TABLES if "." not in table.name)
#: Each table's accepted keys: its own, and an input table's where it is one.
KEYS: dict[str, frozenset[str]] = {
    table.name: frozenset(table.keys) | (INPUT_KEYS if table.takes_input else frozenset()) for table in TABLES
}
