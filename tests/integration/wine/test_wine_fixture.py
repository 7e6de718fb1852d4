"""The Wine fixture's one allowance: a process Wine could not start (0xC0000142, no output) is started once more.

The program here is a NAMED STAND-IN for Wine failing to start a process: it exits with that status itself, once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.wine import DLL_INIT_FAILED_LOW_BYTE, Wine, compile_windows_exe, mingw_gcc, wine  # noqa: F401

pytestmark = pytest.mark.wine

FAILS_ONCE = r"""
#include <windows.h>
#include <stdio.h>
int main(int argc, char **argv) {  /* the first start (no marker file yet) ends as Wine's failed start does */
    FILE *marker = fopen(argv[1], "rb");
    if (!marker) { fclose(fopen(argv[1], "wb")); ExitProcess(0xC0000142); }
    fclose(marker);
    if (argc > 2) { printf("ran\n"); ExitProcess(0xC0000142); }  /* with output: a real result, kept */
    printf("started again\n");
    return 0;
}
"""


@pytest.fixture(scope="module")
def fails_once(mingw_gcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fails-once")
    (folder / "fails_once.c").write_text(FAILS_ONCE)
    return compile_windows_exe(mingw_gcc, folder / "fails_once.c", folder / "fails_once.exe")


def test_a_start_that_failed_with_no_output_is_made_once_more(wine: Wine, fails_once: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started-once"
    done = wine.run([wine.to_windows(fails_once), wine.to_windows(marker)])
    assert marker.exists() and done.returncode == 0 and done.stdout.strip() == "started again"


def test_the_same_status_after_output_is_the_program_s_own_result(wine: Wine, fails_once: Path, tmp_path: Path) -> None:
    marker = tmp_path / "started-once"
    marker.touch()
    done = wine.run([wine.to_windows(fails_once), wine.to_windows(marker), "with-output"])
    assert done.returncode == DLL_INIT_FAILED_LOW_BYTE and done.stdout.strip() == "ran"
