"""Install time of a real bundle against a bare `python -m venv` + `pip install` of the same wheels, in one run.

PRODUCT.md "Performance" / issue 11: `install.sh` (verification of every file, a venv without pip, the
wheels unpacked by the bundle's pinned pypa installer, bytecode compiled in parallel, the receipt, the
swap) should take at most 0.6 of the baseline: `python -m venv DIR` followed by
`DIR/bin/pip install --no-index --require-hashes --find-links payload/wheels -r requirements.txt`
of the same wheels (which pip also compiles to bytecode). The self-check is left out of both (it
loads the models, which the baseline does not); `--with-self-check` adds it to install.sh for reference.

The bundle is the quickstart (manifests/quickstart-linux.toml), built with the given cache (the test
suite's shared cache by default, so nothing is downloaded when it is warm). The two installs alternate,
`--repeat` rounds each (default 3), into fresh folders; the fastest of each counts.
Run: python bench/install_throughput.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path(os.environ.get("ORT_BUNDLER_TEST_CACHE", Path.home() / ".cache" / "ort-bundler-tests")) / "bundler-cache"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manifest", type=Path, default=REPO / "manifests" / "quickstart-linux.toml")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="ort-bundler cache (default: the tests')")
    parser.add_argument("--workdir", type=Path, default=None, help="where to work (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of each install, alternated; the fastest counts")
    parser.add_argument("--python", default=None, help="the target Python (default: python3.<bundle python>)")
    parser.add_argument("--with-self-check", action="store_true", help="let install.sh run its self-check too")
    return parser.parse_args()


def build_bundle(manifest: Path, cache: Path, work: Path) -> Path:
    """The bundle, built and extracted as a user receives it."""
    proc = subprocess.run([sys.executable, "-m", "bundler", "build", "--json", "-q", "--cache", str(cache), "-o",
                           str(work / "dist"), str(manifest)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"build failed ({proc.returncode}): {proc.stderr.strip()}")
    archive = Path(json.loads(proc.stdout)["zip"])
    with zipfile.ZipFile(archive) as bundle:
        bundle.extractall(work / "extracted")
    [root] = (work / "extracted").iterdir()
    return root


def timed(command: list[str], *, env: dict[str, str] | None = None) -> float:
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command[:3])}... failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return elapsed


def engine_install(bundle: Path, target: Path, python: str, *, self_check: bool) -> float:
    command = ["sh", str(bundle / "install.sh"), "--install-dir", str(target), "--python", python,
               "--log-path", str(target.parent / f"{target.name}.log")]
    return timed(command if self_check else [*command, "--no-self-check"])


def baseline_install(bundle: Path, target: Path, python: str) -> float:
    """`python -m venv` + `pip install --no-index --require-hashes` of the bundle's wheels, timed as one."""
    wheels = bundle / "payload" / "wheels"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    start = timed([python, "-m", "venv", str(target)])
    return start + timed([str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-cache-dir",
                          "--require-hashes", "--only-binary=:all:", "--find-links", str(wheels),
                          "-r", str(wheels / "requirements.txt")], env=env)


def uv_install(bundle: Path, target: Path, python: str, uv: str) -> float:
    """`uv venv` + `uv pip install --offline --no-index --require-hashes --compile-bytecode --no-cache` of the bundle's
    wheels, timed as one: issue 37's baseline, the fastest installer of the same wheels with bytecode compiled.
    uv reads no configuration file and may not download a Python."""
    wheels = bundle / "payload" / "wheels"
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    start = timed([uv, "venv", "--quiet", "--no-cache", "--python", python, str(target)], env=env)
    return start + timed([uv, "pip", "install", "--quiet", "--python", str(target / "bin" / "python"), "--offline",
                          "--no-index", "--require-hashes", "--compile-bytecode", "--no-cache", "--find-links",
                          str(wheels), "-r", str(wheels / "requirements.txt")], env=env)


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-install-", dir=args.workdir))
    try:
        bundle = build_bundle(args.manifest.resolve(), args.cache, work)
        python = args.python or shutil.which(f"python{json.loads((bundle / 'bundle.json').read_text())['python']}")
        if python is None:
            sys.exit("no python3.<target> on PATH; pass --python")
        wheels = bundle / "payload" / "wheels"
        size = sum(p.stat().st_size for p in wheels.glob("*.whl")) >> 20
        print(f"bundle {bundle.name}: {len(list(wheels.glob('*.whl')))} wheels, {size} MiB; python {python}; "
              f"{os.cpu_count()} CPUs")
        ours, theirs = [], []
        for round_number in range(args.repeat):
            ours.append(engine_install(bundle, work / f"engine-{round_number}" / "app", python,
                                       self_check=args.with_self_check))
            theirs.append(baseline_install(bundle, work / f"baseline-{round_number}", python))
            print(f"round {round_number + 1}: install.sh {ours[-1]:.2f} s, venv + pip install {theirs[-1]:.2f} s, "
                  f"ratio {ours[-1] / theirs[-1]:.2f}")
        ratio = min(ours) / min(theirs)
        rounds = sorted(a / b for a, b in zip(ours, theirs))
        print(f"install.sh {min(ours):.2f} s / venv + pip {min(theirs):.2f} s = {ratio:.2f} (target <= 0.6); "
              f"median of the rounds' ratios {rounds[len(rounds) // 2]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
