"""`ort-bundler inspect PATH`: explain one artifact the way the build sees it.

The kind is decided by content (PE header, zip/tar, ONNX protobuf), not only by the name, and the findings
are plain data: `--json` prints them, `describe` turns them into a short human report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from bundler.errors import InputUnavailableError, UnsupportedError
from bundler.hashing import file_sha256
from bundler.readers.archives import SafeArchive, is_archive
from bundler.readers.onnx_limits import minimum_release, takes, too_new_sentence
from bundler.readers.pe import inspect_pe, is_pe
from bundler.readers.signatures import signature_evidence
from bundler.readers.wheels import wheel_metadata
from bundler.target_platform import named_by

ORT_ARCHIVE = re.compile(r"^onnxruntime-(win|linux)-x64(-gpu)?-\d+\.\d+\.\d+\.(zip|tgz)$", re.IGNORECASE)


def inspect_path(path: Path) -> dict[str, Any]:
    if not path.is_file():
        msg = f"{path}: no such file"
        raise InputUnavailableError(msg)
    base = {"path": str(path), "size": path.stat().st_size, "sha256": file_sha256(path)}
    if is_pe(path):
        return {**base, **_pe(path)}
    if path.name.endswith(".whl"):
        return {**base, **_wheel(path)}
    if ORT_ARCHIVE.match(path.name):
        return {**base, **_ort_archive(path)}
    if is_archive(path):
        return {**base, **_archive(path)}
    if path.suffix.lower() == ".onnx":
        return {**base, **_model(path)}
    msg = f"{path.name}: not an ORT archive, wheel, DLL/PYD/EXE or .onnx model; inspect explains only those"
    raise UnsupportedError(msg)


def _pe(path: Path) -> dict[str, Any]:
    info = inspect_pe(path)
    evidence = signature_evidence(path)
    return {"kind": "pe", "machine": info.machine_name, "dll": info.is_dll,
            "linker_version": ".".join(map(str, info.linker_version)), "file_version": info.file_version,
            "product_version": info.product_version, "imports": list(info.imports),
            "delay_imports": list(info.delay_imports), "runtime_names": list(info.runtime_names),
            "signature": evidence.to_json()}


def _wheel(path: Path) -> dict[str, Any]:
    try:
        name, version, _, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        msg = f"{path.name}: not a valid wheel file name ({exc})"
        raise UnsupportedError(msg) from None
    with SafeArchive.open(path, label=path.name) as archive:
        names = archive.names()
        _, metadata = wheel_metadata(archive, label=path.name)
    binaries = sorted(n for n in names if n.lower().endswith((".dll", ".pyd", ".so")) or ".so." in n)
    return {"kind": "wheel", "name": str(name), "version": str(version), "tags": sorted(str(t) for t in tags),
            "requires": metadata.get_all("Requires-Dist") or [], "binaries": binaries, "files": len(names)}


def _archive(path: Path) -> dict[str, Any]:
    with SafeArchive.open(path, label=path.name) as archive:
        entries = [e for e in archive.entries if not e.is_dir]
    return {"kind": "archive", "files": [e.name for e in entries], "total_size": sum(e.size for e in entries)}


def _ort_archive(path: Path) -> dict[str, Any]:
    from bundler.readers.ortarchive import inspect_ort_archive

    target = named_by(path.name)
    return {"kind": "ort_archive", **inspect_ort_archive(path, label=path.name, target=target).to_json()}


def _model(path: Path) -> dict[str, Any]:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and others from protobuf
        msg = f"{path.name}: not a readable ONNX model ({type(exc).__name__}: {exc})"
        raise UnsupportedError(msg) from None
    initializers = {i.name for i in model.graph.initializer}

    def io(values: Iterable[Any]) -> list[dict[str, Any]]:
        rows = []
        for value in values:
            tensor = value.type.tensor_type
            shape = [d.dim_param or d.dim_value if (d.dim_param or d.HasField("dim_value")) else None
                     for d in tensor.shape.dim]
            rows.append({"name": value.name, "type": onnx.TensorProto.DataType.Name(tensor.elem_type).lower(),
                         "shape": shape})
        return rows

    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    return {"kind": "model", "ir_version": model.ir_version, "producer": model.producer_name, "opsets": opsets,
            "inputs": io(v for v in model.graph.input if v.name not in initializers),
            "outputs": io(model.graph.output), "nodes": len(model.graph.node),
            "onnxruntime": _ort_fit(path, model.ir_version, opsets)}


def _ort_fit(path: Path, ir_version: int, opsets: dict[str, int]) -> dict[str, Any]:
    """Which ONNX Runtime loads the model: the oldest recorded release, and whether the version `init` pins by
    default does (a model saved with onnx's defaults is newer than it: issue 38, item 5)."""
    from bundler.operations.init import DEFAULT_ORT

    return {"oldest": minimum_release(ir_version, opsets), "default": DEFAULT_ORT, "takes": takes(DEFAULT_ORT),
            "too_new": too_new_sentence(path.name, ir_version, opsets, DEFAULT_ORT)}


def describe(findings: dict[str, Any]) -> str:
    """A short human report; every field is also in --json."""
    lines = [f"{findings['path']}  ({findings['size']:,} bytes, sha256 {findings['sha256']})"]
    kind = findings["kind"]
    if kind == "pe":
        sig = findings["signature"]
        signed = (f"signed by {sig['signer']}, {'verified' if sig['verified'] else 'NOT verified: ' + str(sig['reason'])}"
                  if sig["signed"] else "not signed")
        lines += [f"PE {'DLL' if findings['dll'] else 'executable'}, machine {findings['machine']}, "
                  f"linker {findings['linker_version']}, file version {findings['file_version']}",
                  f"signature: {signed}",
                  "imports: " + ", ".join(findings["imports"]),
                  "delay imports: " + (", ".join(findings["delay_imports"]) or "none"),
                  "loaded by name at run time: " + (", ".join(findings["runtime_names"]) or "none")]
    elif kind == "wheel":
        lines += [f"wheel {findings['name']} {findings['version']} tags {', '.join(findings['tags'])}",
                  "requires: " + (", ".join(findings["requires"]) or "nothing"),
                  f"binaries ({len(findings['binaries'])}): " + ", ".join(findings["binaries"][:20])]
    elif kind == "model":
        ort = findings["onnxruntime"]
        oldest = f"ONNX Runtime {ort['oldest']} and newer load it" if ort["oldest"] else \
            "no ONNX Runtime release ort-bundler records loads it"
        lines += [f"ONNX model, IR {findings['ir_version']}, opsets "
                  + ", ".join(f"{d} {v}" for d, v in sorted(findings["opsets"].items())),
                  *(f"input  {i['name']}: {i['type']} {i['shape']}" for i in findings["inputs"]),
                  *(f"output {o['name']}: {o['type']} {o['shape']}" for o in findings["outputs"]),
                  f"{oldest}; {ort['takes']} (the version `init` pins)",
                  *([f"warning: {ort['too_new']}"] if ort["too_new"] else [])]
    elif kind == "ort_archive":
        lines += [f"ONNX Runtime release archive {findings['version']} (commit {findings['commit']}), top folder {findings['top']}",
                  *(f"  {name}: file version {version}" for name, version in sorted(findings["binaries"].items()))]
    else:
        lines += [f"archive with {len(findings['files'])} files, {findings['total_size']:,} bytes uncompressed"]
    return "\n".join(lines)
