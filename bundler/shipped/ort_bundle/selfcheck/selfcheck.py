"""ort-bundler self-check: proves on the target machine that this installation works, or says what to fix.

    <install>/venv/bin/python -I -B <install>/installer/ort_bundle/__main__.py selfcheck [--json]
        [--allow-cpu-fallback] [--root DIR]

It runs where only the installed environment exists: standard library only, started through the shipped
package's start file, which reads only the package's .py sources (the modules it imports are its siblings).
onnxruntime and numpy are imported inside the checks: a broken environment must become a failed check with
advice, not a traceback.
Exit 0 only when no check failed; warnings do not fail.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..cache_folder import choose
from ..records import Check, SelfcheckReport
from ..synth import SYNTH_VERSION, probe_model
from .check_context import Context, is_below
from .cuda_check import CUDA, DML, check_cuda, check_directml, failure_exit_code
from .interpreter import check_interpreter
from .libraries import check_libraries, check_native_runtime
from .model_check import CPU, check_identity, check_model, session_providers

MIN_FREE_BYTES = 1 << 30


# ---------------------------------------------------------------- checks without onnxruntime


def check_path(ctx: Context) -> Check:
    """Non-ASCII install paths break provider loading (onnxruntime #14063, #19062)."""
    text = str(ctx.root)
    if not text.isascii():
        return Check(id="path", status="fail", message=f"the install path {text} contains non-ASCII characters",
                     fix="Install into a path with only ASCII characters, e.g. C:\\ort\\<name>.")
    if sys.platform == "win32" and len(text) > 120:
        return Check(id="path", status="warn", message=f"the install path is {len(text)} characters long",
                     fix="Files deep below it may exceed MAX_PATH (260); install into a shorter path.")
    return Check(id="path", status="pass", message=f"install path {text} is ASCII")


def check_python(ctx: Context) -> Check:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    wanted = ctx.bundle.get("python", running)
    if running != wanted:
        return Check(id="python", status="fail",
                     message=f"{sys.executable} is Python {running}, the bundle targets {wanted}",
                     fix="Run the self-check through the installation's launcher (run --self-check).")
    return Check(id="python", status="pass", message=f"Python {running} at {sys.executable}")


def check_interpreter_origin(ctx: Context) -> Check:
    """Which interpreter runs the installed code; with a bundled one ([python] runtime), nothing else may."""
    report = check_interpreter(ctx.root, ctx.bundle.get("python_runtime"))
    details = report.to_json()
    if report.ok:
        return Check(id="interpreter", status="pass", details=details,
                     message=f"{report.origin} Python {report.version} at {report.executable}")
    return Check(id="interpreter", status="fail", details=details, message="; ".join(report.problems),
                 fix="Start the installed code with its launcher (run.sh / run.cmd / run.ps1), which runs the "
                     "bundled interpreter isolated; or reinstall the bundle.")


def check_cpu(ctx: Context) -> Check:
    """ORT runs without AVX2, but several times slower: worth knowing when latency disappoints."""
    if sys.platform == "win32":
        import ctypes

        has_avx2 = bool(ctypes.windll.kernel32.IsProcessorFeaturePresent(40))  # PF_AVX2_INSTRUCTIONS_AVAILABLE
    else:
        try:
            flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
        except OSError as exc:
            return Check(id="cpu", status="skip", message=f"cannot read /proc/cpuinfo: {exc}")
        has_avx2 = "avx2" in flags
    if not has_avx2:
        return Check(id="cpu", status="warn", message="this CPU does not offer AVX2",
                     fix="Expect slower inference: ORT falls back to its SSE kernels on this CPU.")
    return Check(id="cpu", status="pass", message="CPU offers AVX2")


def cache_dir(ctx: Context) -> Tuple[Optional[Path], str]:
    """Where the launchers put the cache and where that came from, by the launcher's own precedence
    (cache_folder.choose): None when nothing names one, as at install time each user's own cache is unknown."""
    launch = (ctx.bundle.get("manifest") or {}).get("launch") or {}
    choice = choose(str(ctx.root), os.environ, launch.get("cache_dir"), pending=ctx.pending_cache_dir)
    return (None, "") if choice is None else (Path(choice.path), choice.source)


def min_free_bytes() -> int:
    """The launchers' threshold (ORT_BUNDLE_CACHE_MIN_FREE_MB), so both warn about the same thing."""
    try:
        return int(os.environ["ORT_BUNDLE_CACHE_MIN_FREE_MB"]) << 20
    except (KeyError, ValueError):
        return MIN_FREE_BYTES


def check_cache_space(ctx: Context) -> Check:
    directory, source = cache_dir(ctx)
    if directory is None:
        directory = Path(tempfile.gettempdir())
        where = (f"in the temp folder {directory} (no cache folder is configured: each user's own cache, "
                 f"where the launchers put it then, is unknown at install time)")
    else:
        where = f"for the cache directory {directory} (from {source})"
    existing = next((path for path in (directory, *directory.parents) if path.exists()), directory.anchor)
    free = shutil.disk_usage(existing).free
    details = {"cache_dir": str(directory), "free_bytes": free, "source": source or "temp folder"}
    message = f"{free / (1 << 30):.1f} GB free {where}"
    if free < min_free_bytes():
        return Check(id="cache", status="warn", message=message, details=details,
                     fix="Free space there or point ORT_BUNDLE_CACHE_DIR at a larger drive: "
                         "CUDA's kernel cache and temporary files need room.")
    return Check(id="cache", status="pass", message=message, details=details)


# ---------------------------------------------------------------- onnxruntime itself


def import_onnxruntime(ctx: Context) -> Tuple[Check, Any]:
    """The import check and the imported module (None when the import failed)."""
    try:
        import onnxruntime
    except Exception as exc:  # ImportError, or OSError when a DLL fails to initialise
        reason = " ".join(str(exc).split())
        fix = ctx.reinstall()
        if "DLL" in reason:
            fix = (f"A library the binding needs did not load: install the VC++ x64 runtime "
                   f"{ctx.bundle.get('vc_runtime_min') or ''} or newer (payload/vc_redist in the bundle) and remove "
                   "older msvcp140.dll copies from folders on PATH; then re-run.")
        return Check(id="onnxruntime", status="fail", message=f"import onnxruntime failed: {reason}", fix=fix), None
    pinned = ctx.bundle["ort"]["version"]
    location = Path(onnxruntime.__file__).resolve().parent
    # The environment: the venv, or with a bundled interpreter ([python] runtime) its own folder.
    venv = (ctx.root / ("python" if ctx.bundle.get("python_runtime") else "venv")).resolve()
    details = {"version": onnxruntime.__version__, "location": str(location)}
    if not is_below(location, venv):
        return Check(id="onnxruntime", status="fail", details=details,
                     message=f"onnxruntime was imported from {location}, "
                             f"not from this installation's environment {venv}",
                     fix="Run the self-check through the installation's launcher (run --self-check) and remove "
                         "PYTHONPATH entries or other onnxruntime copies that shadow it."), onnxruntime
    if onnxruntime.__version__ != pinned:
        return Check(id="onnxruntime", status="fail", details=details,
                     message=f"onnxruntime {onnxruntime.__version__} is installed in {location}, "
                             f"the bundle pins {pinned}",
                     fix=ctx.reinstall()), onnxruntime
    return Check(id="onnxruntime", status="pass", details=details,
                 message=f"onnxruntime {onnxruntime.__version__} from {location}"), onnxruntime


def check_providers(ctx: Context, ort: Any) -> Check:
    """CUDA has its own check with a diagnosis; every other expected provider must simply be there."""
    available = ort.get_available_providers()
    missing = [name for name in ctx.bundle.get("expected_providers", [CPU]) if name != CUDA and name not in available]
    details = {"available": available}
    if missing:
        return Check(id="providers", status="fail", details=details,
                     message=f"expected providers {missing} are not available; onnxruntime offers {available}",
                     fix=ctx.reinstall())
    return Check(id="providers", status="pass", details=details, message=f"available providers: {', '.join(available)}")


# ---------------------------------------------------------------- driver


def load_bundle(root: Path) -> tuple[Dict[str, Any] | None, Check | None]:
    path = root / "bundle.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError) as exc:
        return None, Check(id="bundle", status="fail", message=f"cannot read {path}: {exc}",
                           fix="Point --root at the installation folder that holds bundle.json, or reinstall.")


def onnxruntime_checks(ctx: Context, ort: Any) -> list[Check]:
    checks = [check_providers(ctx, ort)]
    cuda_ok = dml_ok = False
    if CUDA in ctx.bundle.get("expected_providers", []):
        checks.append(check_cuda(ctx, ort))
        cuda_ok = checks[-1].status == "pass"
    if DML in ctx.bundle.get("expected_providers", []):
        checks.append(check_directml(ctx, ort))
        dml_ok = checks[-1].status == "pass"
    checks.append(check_identity(ctx, ort))
    providers = session_providers(ctx, ort, cuda_ok=cuda_ok, dml_ok=dml_ok)
    checks.extend(check_model(ctx, ort, record, providers) for record in ctx.bundle.get("models", []))
    return checks


def run_checks(ctx: Context) -> list[Check]:
    checks = [check_path(ctx), check_python(ctx), check_interpreter_origin(ctx)]
    imported, ort = import_onnxruntime(ctx)
    checks.append(imported)
    if ort is None or imported.status == "fail":
        # A missing or foreign onnxruntime makes every later answer meaningless: report, don't guess.
        skipped = ["providers", "identity", *(f"model:{record['name']}" for record in ctx.bundle.get("models", []))]
        checks.extend(Check(id=name, status="skip", message="skipped: the onnxruntime check failed")
                      for name in skipped)
    else:
        checks.extend(guarded("onnxruntime", lambda: onnxruntime_checks(ctx, ort)))
    checks.extend([check_libraries(ctx), check_native_runtime(ctx), check_cpu(ctx), check_cache_space(ctx),
                   check_files(ctx), check_tuning(ctx)])
    return checks


def check_files(ctx: Context) -> Check:
    """Every installed file against receipt.json, by the install engine copied into the install."""
    engine = ctx.root / "installer" / "ort_bundle" / "__main__.py"
    if not engine.is_file():
        return Check(id="files", status="skip", message=f"{engine} is missing: no receipt audit in this folder")
    proc = subprocess.run([sys.executable, "-I", "-B", str(engine), "engine", "verify", "--root", str(ctx.root), "--json"],
                          capture_output=True, text=True, check=False)
    try:
        audit = json.loads(proc.stdout)
    except ValueError:
        return Check(id="files", status="fail", message=f"the receipt audit failed: {proc.stderr.strip()[-300:]}",
                     fix=ctx.reinstall())
    details = {key: audit[key] for key in ("changed", "missing", "extra")}
    if audit["ok"]:
        return Check(id="files", status="pass", details={"not_ours": len(audit["not_ours"])},
                     message="every installed file matches receipt.json")
    counts = ", ".join(f"{len(audit[key])} {key}" for key in ("changed", "missing", "extra") if audit[key])
    first = next(audit[key][0] for key in ("changed", "missing", "extra") if audit[key])
    return Check(id="files", status="fail", details=details, fix=ctx.reinstall(),
                 message=f"installed files differ from receipt.json: {counts} (first: {first})")


def check_tuning(ctx: Context) -> Check:
    """The values run --tune chose and whether they are in force (ort_bundle.sessions decides both)."""
    import importlib

    try:
        sessions = importlib.import_module("ort_bundle.sessions")
    except ImportError as exc:
        return Check(id="tuning", status="skip", message=f"no tuning support in this environment ({exc})")
    launch = (ctx.bundle.get("manifest") or {}).get("launch") or {}
    verdict = sessions.tuning_verdict(ctx.root, applied_by_hook=launch.get("apply_tuning") is True)
    return Check(id="tuning", status=verdict.status, message=verdict.message, fix=verdict.fix, details=verdict.details)


def guarded(check_id: str, run: Callable[[], List[Check]]) -> list[Check]:
    """An unexpected exception in a check is a failed check with its reason, never a traceback."""
    try:
        return run()
    except Exception as exc:  # the target's environment can be broken in any way: that is what we report
        return [Check(id=check_id, status="fail", message=f"the {check_id} checks crashed: {type(exc).__name__}: {exc}",
                      fix="reinstall the bundle with install --force; if it persists, send this report to the vendor")]


def render_human(root: Path, bundle: Dict[str, Any], checks: list[Check]) -> str:
    lines = [f"ort-bundler self-check: {bundle.get('name', '?')} {bundle.get('version', '?')} "
             f"({bundle.get('platform', '?')}) in {root}"]
    for check in checks:
        lines.append(f"{check.status.upper():5} {check.id}: {check.message}")
        if check.status in ("fail", "warn") and check.fix:
            lines.append(f"      fix: {check.fix}")
        lines.extend(f"      {lib['path']} ({lib['version'] or 'version unknown'})"
                     for lib in check.details.get("libraries", []))
    failed = sum(check.status == "fail" for check in checks)
    warned = sum(check.status == "warn" for check in checks)
    lines.append(f"Result: {'FAILED' if failed else 'PASSED'} ({failed} failed, {warned} warnings)")
    return "\n".join(lines)


def reference_report(request_path: Path) -> Dict[str, Any]:
    """The build's model gate: the same probe the build would run in-process, in this interpreter's ORT."""
    import onnxruntime

    request = json.loads(request_path.read_text(encoding="utf-8"))
    return {"ort_version": onnxruntime.__version__,
            "models": {item["name"]: probe_model(onnxruntime, item["path"], item.get("shapes"),
                                                 item.get("synth", SYNTH_VERSION))
                       for item in request}}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Check that this ONNX Runtime installation works.")
    parser.add_argument("--json", action="store_true", help="print a machine-readable report")
    parser.add_argument("--allow-cpu-fallback", action="store_true",
                        help="report an unusable CUDA provider as a warning instead of a failure")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[3],
                        help="the installation folder holding bundle.json (default: the folder above "
                             "installer/ort_bundle/)")
    parser.add_argument("--cache-dir", metavar="DIR", help=argparse.SUPPRESS)  # msi-finish: CACHEDIR, before cache_dir.txt
    parser.add_argument("--reference", type=Path, metavar="REQUEST",
                        help="(used by ort-bundler's build) record reference outputs for the models in REQUEST")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reference:
        print(json.dumps(reference_report(args.reference)))
        return 0
    root = args.root.resolve()
    bundle, problem = load_bundle(root)
    checks: list[Check]
    if bundle is None:
        checks = [problem] if problem is not None else []
    else:
        checks = run_checks(Context(root=root, bundle=bundle, allow_cpu_fallback=args.allow_cpu_fallback,
                                    pending_cache_dir=args.cache_dir or None))
    ok = not any(check.status == "fail" for check in checks)
    if args.json:
        print(json.dumps(SelfcheckReport(ok=ok, root=str(root), checks=tuple(checks)).to_json(), indent=2))
    else:
        print(render_human(root, bundle or {}, checks))
    return 0 if ok else failure_exit_code(checks)


if __name__ == "__main__":
    sys.exit(main())
