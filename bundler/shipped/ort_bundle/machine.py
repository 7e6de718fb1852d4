"""What the target machine offers: logical and physical cores, the CPU's name, its GPUs.

Thread tuning starts from the physical core count (hyper-threads share a core's execution units, so
ORT's intra-op pool rarely gains from them), and the support bundle reports the same facts. Counts
are those this process may use: a container's or a job object's CPU limit (sched_getaffinity) is
what ORT's threads will compete for, not the host's socket count. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

SYSFS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class Cores:
    """`physical` is a best effort: where the topology cannot be read it equals `logical` (`source` says so)."""

    logical: int
    physical: int
    source: str  # sysfs | cpuinfo | windows | assumed


def usable_cpus() -> Optional[FrozenSet[int]]:
    """The CPU numbers this process may run on (Linux), None where the platform does not say."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return None
    try:
        return frozenset(getter(0))
    except OSError:
        return None


def logical_cores() -> int:
    usable = usable_cpus()
    return len(usable) if usable else (os.cpu_count() or 1)


def _sysfs_cores(usable: FrozenSet[int]) -> Optional[int]:
    """Distinct (package, core) pairs among the usable CPUs, from sysfs topology."""
    pairs: Set[Tuple[str, str]] = set()
    for cpu in usable:
        topology = SYSFS_CPU / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text(encoding="ascii").strip()
            core = (topology / "core_id").read_text(encoding="ascii").strip()
        except OSError:
            return None
        pairs.add((package, core))
    return len(pairs) or None


def _cpuinfo_cores(usable: FrozenSet[int]) -> Optional[int]:
    """The same pairs from /proc/cpuinfo's "physical id" and "core id", where sysfs is not mounted."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    pairs = set()
    for block in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {key.strip(): value.strip() for key, value in fields.items()}
        if "processor" in fields and "core id" in fields and int(fields["processor"]) in usable:
            pairs.add((fields.get("physical id", "0"), fields["core id"]))
    return len(pairs) or None


def _windows_cores() -> Optional[int]:
    """RelationProcessorCore records from GetLogicalProcessorInformationEx: one per physical core."""
    import ctypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    size = ctypes.c_ulong(0)
    kernel32.GetLogicalProcessorInformationEx(0, None, ctypes.byref(size))
    if not size.value:
        return None
    buffer = ctypes.create_string_buffer(size.value)
    if not kernel32.GetLogicalProcessorInformationEx(0, buffer, ctypes.byref(size)):
        return None
    count, offset = 0, 0
    while offset < size.value:
        # SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX: DWORD Relationship, DWORD Size, then the union.
        relationship = int.from_bytes(buffer.raw[offset:offset + 4], "little")
        record_size = int.from_bytes(buffer.raw[offset + 4:offset + 8], "little")
        count += relationship == 0  # RelationProcessorCore
        offset += record_size or size.value
    return count or None


def cores() -> Cores:
    logical = logical_cores()
    if sys.platform == "win32":
        found = _windows_cores()
        return Cores(logical=logical, physical=min(found, logical), source="windows") if found else \
            Cores(logical=logical, physical=logical, source="assumed")
    usable = usable_cpus() or frozenset(range(logical))
    for source, probe in (("sysfs", _sysfs_cores), ("cpuinfo", _cpuinfo_cores)):
        found = probe(usable)
        if found:
            return Cores(logical=logical, physical=min(found, logical), source=source)
    return Cores(logical=logical, physical=logical, source="assumed")


def cpu_name() -> str:
    """The marketing name (/proc/cpuinfo "model name"; on Windows the registry's ProcessorNameString)."""
    if sys.platform == "win32":
        try:
            import winreg

            key = winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE,  # type: ignore[attr-defined]
                                 r"HARDWARE\DESCRIPTION\System\CentralProcessor\0")
            return str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip()  # type: ignore[attr-defined]
        except OSError:
            return platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> List[str]:
    """The instruction-set flags ORT's kernels choose between (Linux; empty where unknown)."""
    wanted = ("avx", "avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile", "fma", "f16c")
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return [flag for flag in wanted if flag in flags]


def gpus() -> List[Dict[str, str]]:
    """NVIDIA GPUs as nvidia-smi names them (name, driver, memory); empty without a driver or the tool."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        proc = subprocess.run([tool, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in proc.stdout.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3:
            found.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return found


def thread_candidates(found: Cores) -> Tuple[int, ...]:
    """1, the physical cores and their neighbours, and the logical cores, within 1..logical.

    More threads than the process may use only oversubscribe: that is why the neighbour above is
    dropped on a machine without hyper-threading.
    """
    wanted = {1, found.physical - 1, found.physical, found.physical + 1, found.logical}
    return tuple(sorted(count for count in wanted if 1 <= count <= found.logical))
