"""What a Windows install registers with Windows, and what the uninstall finds and removes again.

The detection value (HKLM per machine, HKCU per user) that Intune and ConfigMgr detection rules read, the
Add/Remove Programs entry, the MSI route's claim on a bundle name, and the one-shot startup task that runs
a self-check deferred until after a reboot. windows_setup calls these in the install's order of steps;
windows_host does the registry and schtasks calls. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import ntpath
import os
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Tuple

from ...bundle_info import BundleInfo
from ...records import SelfcheckOutcome
from ..engine_fs import EngineError, Log
from ..installed import detection_state
from . import windows_host as host

#: The values a detection rule reads, written only once the self-check passed (or was skipped on the administrator's
#: order): `Version` (the zip route's rule; the MSI writes its own from its Registry table), `CheckedVersion` (the
#: version whose check passed: the MSI app's rule) and `SelfCheck` (how: installed.detection_state).
CHECKED_VALUES = ("Version", "CheckedVersion", "SelfCheck")


def register(info: BundleInfo, target: Path, bundle_sha256: str, python: str, *, admin: bool, log: Log,
             selfcheck: SelfcheckOutcome) -> None:
    """The detection value (HKLM per machine, HKCU otherwise), written on every successful run, also when
    nothing else changed; per machine also the Add/Remove Programs entry. While the self-check is owed (deferred
    until after the reboot) the values a rule reads are removed, not written: Intune and ConfigMgr must not
    report "Installed" for a check that has not passed; the check after the reboot writes them."""
    label = "HKLM" if admin else "HKCU"
    key = host.DETECTION_KEY.format(name=info.name)
    host.write_values(host.hive(label), key, [("InstallDir", str(target)), ("InstallId", f"{info.name}-{info.version}"),
                                              ("BundleSha256", bundle_sha256), ("Route", "zip")])
    state = detection_state(selfcheck)
    if state is None:
        host.delete_values(host.hive(label), key, CHECKED_VALUES)
        log(f"detection value withheld: {label}\\{key}\\Version is written once the self-check after the reboot passes")
    else:
        write_checked(label, key, info.version, state, log, zip_route=True)
    if not admin:
        return
    size = sum(entry.stat().st_size for entry in target.rglob("*") if entry.is_file()) // 1024
    uninstall = f'"{target}\\uninstall.cmd"'
    arp = host.ARP_KEY.format(name=info.name)
    host.write_values(host.hive("HKLM"), arp, [
        ("DisplayName", f"{info.name} {info.version}"), ("DisplayVersion", info.version),
        ("Publisher", str(info.manifest.get("bundle", {}).get("publisher") or "ort-bundler")),
        ("InstallLocation", str(target)), ("UninstallString", uninstall), ("QuietUninstallString", uninstall),
        ("DisplayIcon", python), ("InstallDate", time.strftime("%Y%m%d")), ("NoModify", 1), ("NoRepair", 1),
        ("EstimatedSize", min(size, 0x7FFFFFFF))])
    log(f"Add/Remove Programs entry: HKLM\\{arp}")


def write_checked(label: str, key: str, version: str, state: str, log: Log, *, zip_route: bool) -> None:
    """The values a detection rule reads; `Version` only on the zip route (the MSI's is its Registry table's)."""
    values: List[Tuple[str, object]] = [("CheckedVersion", version), ("SelfCheck", state)]
    host.write_values(host.hive(label), key, ([("Version", version)] if zip_route else []) + values)
    log(f"detection value: {label}\\{key}\\{'Version' if zip_route else 'CheckedVersion'} = {version} "
        f"(self-check {state})")


def record_checked(name: str, version: str, root: Path, log: Log) -> None:
    """After the reboot the deferred self-check passed: the detection value of the install in `root` (per machine or
    per user, wherever it points at `root`) gets the values register() withheld."""
    key = host.DETECTION_KEY.format(name=name)
    for label in ("HKLM", "HKCU"):
        values = host.read_values(host.hive(label), key)
        if values and _same_folder(str(values.get("InstallDir", "")), root):
            write_checked(label, key, version, "passed after the reboot", log, zip_route=True)


def registrations(name: str, root: Path) -> List[Tuple[str, str]]:
    """The detection value and Add/Remove Programs keys that point at `root` (and only those), found while the
    folder still exists: one folder has several spellings (a drive letter or another path to it, a short
    name), so the recorded folder also counts when it is the same folder on disk."""
    found = []
    for label in ("HKLM", "HKCU"):
        for key, value in ((host.DETECTION_KEY.format(name=name), "InstallDir"),
                           (host.ARP_KEY.format(name=name), "InstallLocation")):
            values = host.read_values(host.hive(label), key)
            if values and _same_folder(str(values.get(value, "")), root):
                found.append((label, key))
    return found


def unregister(keys: List[Tuple[str, str]], log: Log) -> None:
    for label, key in keys:
        if host.delete_key(host.hive(label), key):
            log(f"removed {label}\\{key}")


def _same_folder(recorded: str, root: Path) -> bool:
    if not recorded:
        return False
    if ntpath.normcase(ntpath.normpath(recorded)) == ntpath.normcase(ntpath.normpath(str(root))):
        return True
    try:
        return os.path.samefile(recorded, root)
    except OSError:
        return False


def recorded_install_dir(name: str) -> Optional[str]:
    """Where the detection value says this bundle name is installed (per machine first)."""
    for label in ("HKLM", "HKCU"):
        values = host.read_values(host.hive(label), host.DETECTION_KEY.format(name=name))
        if values and values.get("InstallDir"):
            return str(values["InstallDir"])
    return None


def msi_product(name: str) -> Optional[str]:
    """The product code when the MSI route installed this bundle name (its detection value says Route=msi):
    then the folder and the registry are Windows Installer's, and the zip route's scripts leave them alone."""
    values = host.read_values(host.hive("HKLM"), host.DETECTION_KEY.format(name=name))
    if values and values.get("Route") == "msi":
        return str(values.get("ProductCode") or "")
    return None


def refuse_msi_route(name: str) -> None:
    product = msi_product(name)
    if product is not None:
        raise EngineError("usage", f"{name} is installed by its MSI (HKLM\\{host.DETECTION_KEY.format(name=name)} says "
                                   f"Route=msi): remove it with `msiexec /x {product or '<its product code>'}` or from "
                                   f"Apps & features first (nothing was changed)")


def task_name(name: str) -> str:
    return f"ort-bundler-{name}-selfcheck"


def task_xml(command: str, arguments: str) -> str:
    """A one-shot task at startup, run as SYSTEM (who can write the install and the log, and runs whether or
    not anyone logs on); the deferred self-check deletes it when done, and uninstall does too."""
    from xml.sax.saxutils import escape

    return ('<?xml version="1.0" encoding="UTF-16"?>\n'
            '<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">\n'
            '  <Triggers><BootTrigger><Enabled>true</Enabled></BootTrigger></Triggers>\n'
            '  <Principals><Principal id="Author"><UserId>S-1-5-18</UserId><RunLevel>HighestAvailable</RunLevel>'
            '</Principal></Principals>\n'
            '  <Settings><MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>'
            '<ExecutionTimeLimit>PT30M</ExecutionTimeLimit><StartWhenAvailable>true</StartWhenAvailable>'
            '<DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries></Settings>\n'
            f'  <Actions Context="Author"><Exec><Command>{escape(command)}</Command>'
            f'<Arguments>{escape(arguments)}</Arguments></Exec></Actions>\n'
            '</Task>\n')


def selfcheck_task_command(target: Path, python: str, name: str, log: Log) -> Tuple[str, str]:
    arguments = f'-I -B "{target}\\installer\\ort_bundle\\__main__.py" engine after-reboot --root "{target}" --task "{task_name(name)}"'
    if log.path is not None:
        arguments += f' --log-file "{log.path}"'
    return python, arguments


def register_selfcheck_task(target: Path, python: str, name: str, log: Log) -> None:
    command, arguments = selfcheck_task_command(target, python, name, log)
    with tempfile.TemporaryDirectory() as folder:
        xml = Path(folder) / "task.xml"
        xml.write_text(task_xml(command, arguments), encoding="utf-16")
        code, output = host.schtasks("/create", "/tn", task_name(name), "/xml", str(xml), "/f")
    if code != 0:
        raise EngineError("install", f"could not register the self-check after the reboot (schtasks /create: "
                                     f"{output}); the install is in place but unchecked")
    log(f"the self-check runs again at the next startup, as SYSTEM: scheduled task {task_name(name)}")


def delete_selfcheck_task(name: str, log: Log) -> None:
    """Remove a startup self-check task an earlier run left (schtasks /delete fails when there is none; Wine's
    /query says every task exists, so it cannot tell first)."""
    if host.schtasks("/delete", "/tn", task_name(name), "/f")[0] == 0:
        log(f"removed the scheduled task {task_name(name)}")
