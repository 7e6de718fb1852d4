"""The launcher of an installation: run.sh, run.cmd and run.ps1 start this module and hand it every argument.

    <interpreter> -I -B -m ort_bundle.launcher <install root> [--self-check | --verify | --tune |
                                                               --support-bundle | --profile | --apply] [ARGS...]

The scripts only find the installation's interpreter (the venv's, or the bundled one); the rest is here,
once for every platform: the cache folder (ORT_BUNDLE_CACHE_DIR, else the install's cache_dir.txt, else the
bundle's [launch] cache_dir, else the per-user cache; relative is below the install) and its subfolders,
the environment ([launch] env first, then the launcher's own variables, which win), the DLL search path
(the GPU and ONNX Runtime folders first on LD_LIBRARY_PATH or PATH) and the dispatch to the self-check, the
file audit, the Python tools or the entry point. The bundle's own values come from launch.json
(launch_config.py).

On POSIX the environment is complete before the entry point's process starts, as glibc reads
LD_LIBRARY_PATH only then, and `os.execve` replaces this process, so signals and the exit code are the
program's own. On Windows os.exec* starts a new process and returns at once, so cmd.exe would read this
process's exit code, not the program's: the child runs to its end instead, this process waits through
Ctrl+C (the console sends it to both; the child decides) and exits with the child's code.
Standard library only, Python 3.8 syntax: it ships in every bundle as `ort_bundle.launcher`.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .cache_folder import PER_USER, choose
from .folder_trust import DescriptorError, parse_descriptor, posix_problem, windows_problem
from .launch_config import (
    ISOLATED,
    LAUNCH_FILE,
    PREREQUISITE_FALLBACK,
    EntryPointSpec,
    LaunchConfig,
    LaunchConfigError,
    python_command,
)

WINDOWS = os.name == "nt"
#: The switches, and the PowerShell-style names run.cmd and run.ps1 have always taken for them (Windows only).
SWITCHES = {"--self-check": "self-check", "--verify": "verify", "--tune": "tune", "--support-bundle": "support",
            "--profile": "profile", "--apply": "apply"}
WINDOWS_ALIASES = {"-selfcheck": "self-check", "-verify": "verify", "-tune": "tune", "-supportbundle": "support",
                   "-profile": "profile", "-apply": "apply"}
CACHE_FOLDERS = ("tmp", "cuda", "tensorrt", "profiles")
#: --self-check of an installation without the self-check script: does onnxruntime import, and from where.
IMPORT_CHECK = "import onnxruntime; print('onnxruntime', onnxruntime.__version__, 'from', onnxruntime.__file__)"


class LaunchError(Exception):
    """What stops the launcher before the entry point starts: one line on stderr, and this exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Command:
    """What to start: the file, its whole argv, and the environment it gets."""

    executable: str
    argv: Tuple[str, ...]
    env: Dict[str, str]


def installer_script() -> str:
    return "install.cmd" if WINDOWS else "install.sh"


def read_config(root: str) -> LaunchConfig:
    path = os.path.join(root, LAUNCH_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            return LaunchConfig.loads(handle.read())
    except OSError as exc:
        problem = f"cannot read {path} ({exc.strerror or exc})"
    except LaunchConfigError as exc:
        problem = f"{path}: {exc}"
    raise LaunchError(PREREQUISITE_FALLBACK, f"{problem}; install the bundle again with {installer_script()}")


def switch(args: Sequence[str]) -> Optional[str]:
    """The launcher's own action named by the first argument, if any (case-insensitive on Windows, as cmd.exe's)."""
    if not args:
        return None
    if WINDOWS:
        first = args[0].lower()
        return SWITCHES.get(first) or WINDOWS_ALIASES.get(first)
    return SWITCHES.get(args[0])


def make_cache(cache: str, code: int, *, source: str = "") -> str:
    """Create the cache folder and its subfolders, and return the folder to use: only one that no other user can
    write (issue 34: TEMP, CUDA's and TensorRT's caches live there, and what they hold is loaded as code or read as
    compiled kernels). On POSIX a folder shared on purpose must be sticky (mode 1777, as /tmp): each user then
    gets a private `user-<uid>` folder in it. On Windows the folder and its subfolders must be owned by this
    account, SYSTEM or Administrators, and no one else may write them (their DACL, as folder_trust judges an
    install's folder); in a folder that fails this (a machine-wide CACHEDIR that users may modify) each account
    works in a `user-<SID>` folder made for it alone, which is then held to the same rule. Anything else is refused."""
    try:
        cache = _windows_private_cache(cache, source, code) if WINDOWS else _private_cache(cache, source, code)
        for sub in CACHE_FOLDERS:
            _make_private(os.path.join(cache, sub))
    except OSError as exc:
        raise LaunchError(code, f"cannot create the cache directory {cache} ({exc.strerror or exc}); set "
                                f"ORT_BUNDLE_CACHE_DIR to a writable folder") from None
    for sub in CACHE_FOLDERS:
        _refuse_unsafe(os.path.join(cache, sub), source, code)
    return cache


def _make_private(path: str) -> None:
    """Every missing folder on the way, each made for this user only (0700), whatever the umask."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass  # another launcher of the same user made it meanwhile; it is checked below


def _private_cache(cache: str, source: str, code: int) -> str:
    _check_ancestors(cache, source, code)
    _make_private(cache)
    info = os.lstat(cache)
    problem = _cache_problem(info)
    if problem and source == PER_USER and info.st_uid == os.geteuid() and stat.S_ISDIR(info.st_mode):
        os.chmod(cache, stat.S_IMODE(info.st_mode) & ~0o022)  # the user's own cache, made under a 002 umask
        problem = _cache_problem(os.lstat(cache))
    if problem and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX and info.st_uid in (0, os.geteuid()):
        cache = os.path.join(cache, f"user-{os.geteuid()}")  # a shared, sticky folder: a private one inside
        _make_private(cache)
        problem = _cache_problem(os.lstat(cache))
    if problem:
        raise LaunchError(code, _unsafe(cache, source, problem))
    return cache


def _check_ancestors(cache: str, source: str, code: int) -> None:
    """Every existing folder above the cache: owned by root or this user, and not writable by others unless
    sticky (as /tmp): else someone else could move the cache folder away and put theirs in its place."""
    folder = os.path.dirname(cache)
    while True:
        if os.path.isdir(folder):
            info = os.stat(folder)
            if info.st_uid not in (0, os.geteuid()):
                raise LaunchError(code, _unsafe(cache, source, f"{folder} above it is owned by uid {info.st_uid}"))
            if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
                raise LaunchError(code, _unsafe(cache, source, f"everyone may write {folder} above it"))
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent


def _refuse_unsafe(path: str, source: str, code: int) -> None:
    problem = _windows_cache_problem(path) if WINDOWS else _cache_problem(os.lstat(path))
    if problem:
        raise LaunchError(code, _unsafe(path, source, problem))


def _windows_private_cache(cache: str, source: str, code: int) -> str:
    from .windows_acl import current_user_sid, make_private_folder

    _make_private(cache)
    problem = _windows_cache_problem(cache)
    if problem is None:
        return cache
    user = current_user_sid()
    if user is None:
        raise LaunchError(code, _unsafe(cache, source, problem))
    own = os.path.join(cache, f"user-{user}")
    if not os.path.lexists(own):
        try:
            make_private_folder(own, user)
        except FileExistsError:
            pass  # another launcher of the same account made it meanwhile; it is checked below
    _refuse_unsafe(own, source, code)
    return own


def _windows_cache_problem(path: str) -> Optional[str]:
    from .windows_acl import current_user_sid, security_descriptor

    if os.path.islink(path) or not os.path.isdir(path):
        return "it is not a folder (a link or a file stands in its place)"
    try:
        descriptor = parse_descriptor(security_descriptor(path))
    except (OSError, DescriptorError) as exc:
        return f"who may write it cannot be read ({exc})"
    return windows_problem(descriptor, current_user=current_user_sid())


def _cache_problem(info: os.stat_result) -> Optional[str]:
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder (a link or a file stands in its place)"
    return posix_problem(info, euid=os.geteuid())


def _unsafe(cache: str, source: str, problem: str) -> str:
    if WINDOWS:
        return (f"the cache directory {cache} (from {source}) is not safe to use: {problem}; use a folder only you "
                f"(or administrators) can write, such as the default under %LOCALAPPDATA%")
    return (f"the cache directory {cache} (from {source}) is not safe to use: {problem}; use a folder only you (or "
            f"root) can write, or a shared one with mode 1777 (each user then gets a private folder in it)")


def environment(root: str, config: LaunchConfig, caller: Mapping[str, str]) -> Dict[str, str]:
    """The caller's environment, then [launch] env, then everything the launcher sets (which no manifest value
    can replace). The cache folder is created here."""
    env = {_name(key): value for key, value in caller.items()}
    env.update({_name(key): value for key, value in config.env.items()})
    variable = "PATH" if WINDOWS else "LD_LIBRARY_PATH"
    folders = [_below(root, relative) for relative in config.dll_dirs]
    # The caller's entries after ours, without ours again (the start-up hook of this very interpreter may have
    # put them on PATH already) and without empty ones (an empty LD_LIBRARY_PATH entry is the current folder).
    theirs = [item for item in env.get(variable, "").split(os.pathsep) if item and item not in folders]
    env[variable] = os.pathsep.join(folders + theirs)
    choice = choose(root, env, config.cache_dir, name=config.name)
    assert choice is not None  # a name is given: the per-user cache always answers
    cache = make_cache(choice.path, config.exit_prerequisite, source=choice.source)
    temp = os.path.join(cache, "tmp")
    env.update({"ORT_BUNDLE_CACHE_DIR": cache, "ORT_BUNDLE_CACHE_MIN_FREE_MB": str(config.cache_min_free_mb),
                "TEMP": temp, "TMP": temp, "TMPDIR": temp, "CUDA_CACHE_PATH": os.path.join(cache, "cuda"),
                "ORT_TENSORRT_CACHE_PATH": os.path.join(cache, "tensorrt"),
                "ORT_BUNDLE_PROFILE_DIR": os.path.join(cache, "profiles"),
                "PIP_NO_INDEX": "1", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    # No bytecode folder is named (issue 27 §5: a cache folder others can write held bytecode that ran): Python
    # reads only the bytecode the install compiled beside the sources (in the receipt, checked by --verify).
    env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def _name(key: str) -> str:
    """Windows names are case-insensitive: one spelling each, so no variable appears twice in the child's block."""
    return key.upper() if WINDOWS else key


def command(root: str, config: LaunchConfig, args: Sequence[str], env: Dict[str, str]) -> Command:
    """The process this invocation starts."""
    action, rest = switch(args), list(args[1:])
    python = sys.executable
    own = [python, *ISOLATED]  # every Python started here runs isolated, the entry point included (issue 34 §3)
    if action == "verify":
        return Command(python, (*own, os.path.join(root, "installer", "ort_bundle", "__main__.py"), "engine", "verify", "--root", root, *rest), env)
    if action == "self-check":
        script = os.path.join(root, "installer", "ort_bundle", "__main__.py")
        check = [script, "selfcheck"] if os.path.isfile(script) else ["-c", IMPORT_CHECK]
        return Command(python, (*own, *check, *rest), env)
    if action == "apply":  # a delta bundle, applied by this installation's own applier (ort_bundle/delta_apply.py)
        return Command(python, (*own, "-m", "ort_bundle.delta_apply", *rest), env)
    if action in ("tune", "support"):
        module = "ort_bundle.tuning" if action == "tune" else "ort_bundle.support"
        return Command(python, (*own, "-m", module, "--root", root, *rest), env)
    if config.apply_tuning:  # the start-up hook gives the entry point's sessions the options --tune chose
        env = {**env, "ORT_BUNDLE_APPLY_TUNING": "1"}
    entry = config.entry_point
    if action == "profile":
        return Command(python, (*own, "-m", "ort_bundle.profile", *_profile_entry(root, entry), "--", *rest), env)
    if entry is None:
        return Command(python, tuple(python_command(python, None, None, args)), env)
    if entry.kind == "module":
        return Command(python, tuple(python_command(python, "module", entry.value, args)), env)
    path = _below(root, entry.value)
    if entry.kind == "script":
        return Command(python, tuple(python_command(python, "script", path, args)), env)
    return Command(path, (path, *args), env)


def _profile_entry(root: str, entry: Optional[EntryPointSpec]) -> List[str]:
    if entry is None:
        return ["--entry-kind", "none"]
    return ["--entry-kind", entry.kind, "--entry", entry.value if entry.kind == "module" else _below(root, entry.value)]


def _below(root: str, relative: str) -> str:
    return os.path.join(root, *relative.split("/"))


def start(cmd: Command, code_if_missing: int) -> int:
    """Replace this process (POSIX) or run the child to its end and return its exit code (Windows)."""
    if not os.path.isfile(cmd.executable):
        raise LaunchError(code_if_missing, f'"{cmd.executable}" was not found; install the bundle again with '
                                           f"{installer_script()}")
    try:
        if not WINDOWS:
            os.execve(cmd.executable, list(cmd.argv), cmd.env)
        child = subprocess.Popen(list(cmd.argv), executable=cmd.executable, env=cmd.env)
    except OSError as exc:
        raise LaunchError(code_if_missing, f'cannot start "{cmd.executable}" ({exc.strerror or exc})') from None
    with child:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:
                continue  # Ctrl+C reached the child too: it decides whether to stop, and its code is the answer
    return code - (1 << 32) if code >= 1 << 31 else code  # an NTSTATUS such as 0xC000013A, as the signed int exit takes


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m ort_bundle.launcher INSTALL_ROOT [ARGS...] (run.sh, run.cmd and run.ps1 start it)",
              file=sys.stderr)
        return PREREQUISITE_FALLBACK
    root = os.path.abspath(args[0])
    try:
        config = read_config(root)
        env = environment(root, config, os.environ)
        return start(command(root, config, args[1:], env), config.exit_prerequisite)
    except LaunchError as exc:
        print(f"run: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
