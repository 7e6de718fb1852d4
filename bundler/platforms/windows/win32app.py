"""The Intune Win32 app settings for a bundle's packages: install and uninstall commands, return codes,
detection rules, requirements and dependencies, derived from `bundle.json` alone (pure).

The names in `to_json` are Microsoft Graph's (`win32LobAppRegistryDetection`, `win32LobAppReturnCode`), so an
administrator or a script (IntuneWin32App, Graph) can take them over as they are. What each value rests on:

- install.cmd's exit codes and the detection value `HKLM\\SOFTWARE\\ort-bundler\\<name>` (`Version`, and the MSI
  route's `CheckedVersion`, each written only once the self-check passed) are the install engine's
  (bundler/shipped/ort_bundle/records.py INSTALL_EXIT_CODES; engine/windows/windows_registration.py `register` and
  `write_checked`, engine/windows/msi_action.py `finish`);
- VC_redist's switches and exit codes, and the runtime's registry values, are docs/facts.md §2 and what
  bundler/shipped/ort_bundle/engine/windows/windows_host.py reads: `Installed` = 1 and Major.Minor.Bld. Intune compares one value per
  rule, and `Version` is a string with a leading "v" (v14.40.33810.00), so the rule compares the integer `Bld`,
  which has only grown across the 14.x runtimes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from bundler.shipped.ort_bundle.bundle_info import BundleInfo
from bundler.shipped.ort_bundle.records import INSTALL_EXIT_CODES

HKLM = "HKEY_LOCAL_MACHINE"
VC_RUNTIME_KEY = f"{HKLM}\\SOFTWARE\\Microsoft\\VisualStudio\\14.0\\VC\\Runtimes\\x64"
DETECTION_KEY = HKLM + "\\SOFTWARE\\ort-bundler\\{name}"
VC_REDIST_SWITCHES = "/quiet /norestart"
#: README-INSTALL's requirement: 64-bit Windows 10 / Server 2016 or later (1607 is Intune's oldest choice).
MINIMUM_OS = "Windows 10 1607"
#: msiexec's verbose logs (`/l*v`) of the Win32 app's commands: Intune's management extension's log folder.
MSI_LOG_FOLDER = "%ProgramData%\\Microsoft\\IntuneManagementExtension\\Logs"
#: README-INSTALL: free disk space of about three times the payload size.
DISK_FACTOR = 3

ReturnType = Literal["success", "softReboot", "hardReboot", "retry", "failed"]


@dataclass(frozen=True, kw_only=True)
class ReturnCode:
    code: int
    type: ReturnType

    def to_json(self) -> dict[str, object]:
        return {"returnCode": self.code, "type": self.type}


@dataclass(frozen=True, kw_only=True)
class RegistryRule:
    """One registry detection rule; a Win32 app is detected when all of its rules hold."""

    key_path: str
    value_name: str
    detection_type: Literal["exists", "string", "integer"]
    operator: Literal["notConfigured", "equal", "greaterThanOrEqual"]
    value: str | None

    def to_json(self) -> dict[str, object]:
        return {"type": "registry", "keyPath": self.key_path, "valueName": self.value_name,
                "detectionType": self.detection_type, "operator": self.operator, "detectionValue": self.value,
                "check32BitOn64System": False}


@dataclass(frozen=True, kw_only=True)
class Dependency:
    """Another Win32 app that must be installed first: one of our packages, or one the administrator makes."""

    name: str
    package: str | None  # the .intunewin file ort-bundler wrote for it, if any
    detection: tuple[RegistryRule, ...]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "package": self.package, "detection": [r.to_json() for r in self.detection]}


@dataclass(frozen=True, kw_only=True)
class Win32App:
    display_name: str
    setup_file: str
    install_command: str
    uninstall_command: str
    return_codes: tuple[ReturnCode, ...]
    detection: tuple[RegistryRule, ...]
    minimum_free_disk_mb: int | None = None
    dependencies: tuple[Dependency, ...] = field(default=())
    msi_product_code: str | None = None  # an MSI app: Intune detects it by its product code


    def to_json(self) -> dict[str, object]:
        return {"display_name": self.display_name, "setup_file": self.setup_file,
                "install_command": self.install_command, "uninstall_command": self.uninstall_command,
                "install_experience": "system", "device_restart_behavior": "basedOnReturnCode",
                "return_codes": [c.to_json() for c in self.return_codes],
                "detection": [r.to_json() for r in self.detection] + (
                    [{"type": "msi", "productCode": self.msi_product_code, "productVersionOperator": "notConfigured"}]
                    if self.msi_product_code else []),
                "requirements": {"architecture": "x64", "minimum_os": MINIMUM_OS,
                                 "minimum_free_disk_mb": self.minimum_free_disk_mb},
                "dependencies": [d.to_json() for d in self.dependencies]}


def bundle_app(info: BundleInfo, *, payload_bytes: int, vc_redist_package: str | None) -> Win32App:
    """The bundle unpacked, with install.cmd as the setup file. `payload_bytes`: the bundle's unpacked size;
    `vc_redist_package`: the `.intunewin` written for the bundle's VC_redist, if any."""
    codes = INSTALL_EXIT_CODES
    rule = RegistryRule(key_path=DETECTION_KEY.format(name=info.name), value_name="Version", detection_type="string",
                        operator="equal", value=info.version)
    return Win32App(display_name=f"{info.name} {info.version}", setup_file="install.cmd",
                    install_command="install.cmd", uninstall_command="uninstall.cmd",
                    return_codes=(ReturnCode(code=codes["ok"], type="success"),
                                  ReturnCode(code=codes["reboot"], type="softReboot"),
                                  ReturnCode(code=codes["retry"], type="retry"),
                                  ReturnCode(code=codes["in_use"], type="retry")),
                    detection=(rule,), minimum_free_disk_mb=-(-DISK_FACTOR * payload_bytes // 2**20),
                    dependencies=_dependencies(info, vc_redist_package))


def msi_app(info: BundleInfo, *, msi_file: str, product_code: str, payload_bytes: int,
            vc_redist_package: str | None) -> Win32App:
    """The bundle's MSI: msiexec's commands and codes, detected by its product code (Intune's MSI rule)."""
    codes = INSTALL_EXIT_CODES
    return Win32App(display_name=f"{info.name} {info.version}", setup_file=msi_file,
                    install_command=f'msiexec /i "{msi_file}" /qn /norestart /l*v "{msi_log(info, "install")}"',
                    uninstall_command=f'msiexec /x {product_code} /qn /norestart /l*v "{msi_log(info, "uninstall")}"',
                    return_codes=(ReturnCode(code=codes["ok"], type="success"),
                                  ReturnCode(code=1707, type="success"),
                                  ReturnCode(code=codes["reboot"], type="softReboot"),
                                  ReturnCode(code=1641, type="hardReboot"),
                                  ReturnCode(code=codes["retry"], type="retry")),
                    detection=(checked_rule(info),), msi_product_code=product_code,
                    minimum_free_disk_mb=-(-DISK_FACTOR * payload_bytes // 2**20),
                    dependencies=_dependencies(info, vc_redist_package))


def checked_rule(info: BundleInfo) -> RegistryRule:
    """The MSI's custom action writes `CheckedVersion` only once the installed tree's self-check passed (or was
    skipped with NOSELFCHECK=1), and removes it with the product: with the product-code rule, the app is detected
    only where its check passed, not merely where Windows Installer registered it."""
    return RegistryRule(key_path=DETECTION_KEY.format(name=info.name), value_name="CheckedVersion",
                        detection_type="string", operator="equal", value=info.version)


def msi_log(info: BundleInfo, action: str) -> str:
    """Where msiexec writes its verbose log for the Win32 app: Intune's own log folder, which exists on every
    machine that runs Win32 apps (msiexec does not create a missing folder) and which Intune's "collect
    diagnostics" gathers. The install engine's own log (`<name>-<version>-msi.log`) stays where the custom action
    writes it, %SystemRoot%\\Logs\\Software."""
    return f"{MSI_LOG_FOLDER}\\{info.name}-{info.version}-msiexec-{action}.log"


def _dependencies(info: BundleInfo, vc_redist_package: str | None) -> tuple[Dependency, ...]:
    found = []
    if info.vc_runtime_min:
        found.append(Dependency(name=f"Microsoft Visual C++ 2015-2022 Redistributable (x64) {info.vc_runtime_min} "
                                     "or newer", package=vc_redist_package,
                                detection=vc_runtime_rules(info.vc_runtime_min)))
    if info.python_runtime is None:
        key = f"{HKLM}\\SOFTWARE\\Python\\PythonCore\\{info.python}\\InstallPath"  # PEP 514, 64-bit, all users
        found.append(Dependency(name=f"Python {info.python} (64-bit, all users)", package=None,
                                detection=(RegistryRule(key_path=key, value_name="ExecutablePath",
                                                        detection_type="exists", operator="notConfigured",
                                                        value=None),)))
    return tuple(found)


def vc_runtime_rules(minimum: str) -> tuple[RegistryRule, ...]:
    """The VC++ x64 runtime is installed, at `minimum` (Major.Minor.Bld) or newer."""
    build = ([int(part) for part in minimum.replace(",", ".").split(".")[:3]] + [0, 0, 0])[2]
    return (RegistryRule(key_path=VC_RUNTIME_KEY, value_name="Installed", detection_type="integer", operator="equal",
                         value="1"),
            RegistryRule(key_path=VC_RUNTIME_KEY, value_name="Bld", detection_type="integer",
                         operator="greaterThanOrEqual", value=str(build)))


def vc_redist_app(*, setup_file: str, version: str, minimum: str) -> Win32App:
    """A VC_redist.x64.exe of `version` as an app of its own, for the bundle's app to depend on. Its rule asks
    for the bundle's `minimum`, not the redistributable's own version: a newer runtime already there is enough."""
    return Win32App(display_name=f"Microsoft Visual C++ 2015-2022 Redistributable (x64) {version}",
                    setup_file=setup_file, install_command=f"{setup_file} /install {VC_REDIST_SWITCHES}",
                    uninstall_command=f"{setup_file} /uninstall {VC_REDIST_SWITCHES}",
                    return_codes=(ReturnCode(code=0, type="success"), ReturnCode(code=1638, type="success"),
                                  ReturnCode(code=3010, type="softReboot"), ReturnCode(code=1641, type="hardReboot"),
                                  ReturnCode(code=1618, type="retry")),
                    detection=vc_runtime_rules(minimum))
