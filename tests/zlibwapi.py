"""zlibwapi.dll, the x64 zlib DLL NVIDIA's cuDNN 8 guide for Windows asks for, built here from Debian's static zlib
for mingw-w64 (package libz-mingw-w64-dev) and tests/native/zlibwapi.def, which exports zlib's public functions
by their plain names (x64 has one calling convention, so zlib's ZLIB_WINAPI build decorates nothing).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from wine import require_tool

ZLIB_A = Path("/usr/x86_64-w64-mingw32/lib/libz.a")
ZLIB_H = Path("/usr/x86_64-w64-mingw32/include/zlib.h")
DEF_FILE = Path(__file__).parent / "native" / "zlibwapi.def"


def def_exports() -> list[str]:
    """The names the .def exports, in its order."""
    lines = DEF_FILE.read_text(encoding="utf-8").split("EXPORTS", 1)[1].splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith(";")]


def zlib_h_functions() -> set[str]:
    """Every function zlib.h declares (`ZEXTERN <type> ZEXPORT[VA] <name> OF((`, `Z_ARG((` or `(`); the names it
    documents this way but defines as macros (inflateInit, deflateInit2, …) are in no library."""
    text = ZLIB_H.read_text(encoding="latin-1")
    return set(re.findall(r"ZEXTERN\s[^;()]*?\bZEXPORT(?:VA)?\s+(\w+)\s*(?:OF|Z_ARG)?\s*\(", text))


def libz_functions(nm: str) -> set[str]:
    """The functions the static library defines (`T` symbols), as x86_64-w64-mingw32-nm lists them."""
    listed = subprocess.run([nm, "-g", "--defined-only", str(ZLIB_A)], check=True, capture_output=True, text=True)
    return {parts[2] for parts in (line.split() for line in listed.stdout.splitlines())
            if len(parts) == 3 and parts[1] == "T"}


def build_zlibwapi(gcc: str, folder: Path) -> Path:
    """Link the static zlib into zlibwapi.dll with the .def's exports; stripped, libgcc linked in."""
    require_tool(str(ZLIB_A) if ZLIB_A.is_file() else None, f"{ZLIB_A} (Debian package libz-mingw-w64-dev)")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "zlibwapi.dll"
    subprocess.run([gcc, "-shared", "-s", "-o", str(out), str(DEF_FILE), "-Wl,--whole-archive", str(ZLIB_A),
                    "-Wl,--no-whole-archive", "-static-libgcc"], check=True, capture_output=True, text=True)
    return out
