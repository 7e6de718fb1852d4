"""The WiX source of a bundle's MSI, from its install image: pure, so every rule here is testable alone.

Written for what Debian's wixl 0.101 supports (GNOME msitools `tools/wixl/wix.vala`, `builder.vala`):
WiX v3 syntax, custom actions of type 18 (an installed exe with arguments) only, `Execute="deferred"`
honoured and rollback/commit actions ignored, no util extension, random GUIDs for `Id="*"` (so every
GUID is given). Choices:

- Identity. ProductCode from name, version and the image's receipt digest (so from every file: a rebuilt 1.0.0
  with other content is another product, not Windows Installer's 1638 "another version is installed"),
  UpgradeCode the manifest's `[bundle] upgrade_code` (else, as before it existed, from the name), one component
  per file with a GUID from name and path (UUIDv5 in the namespace of `upgrade_code`, else ort-bundler's): the
  same bundle gives the same MSI, and a file keeps its component across versions (what Windows Installer's
  component rules ask).
- Upgrade. The Upgrade table is written out (not `MajorUpgrade`, which wixl schedules after
  InstallValidate, outside the transaction) and RemoveExistingProducts runs after InstallInitialize,
  inside it: an upgrade whose self-check fails rolls back to the version that was installed. Its range
  includes the same version, so a rebuild of one version with other content replaces the installed one.
- The install folder. INSTALLDIR is read back from the detection value by AppSearch, and a command-line
  INSTALLDIR is saved before it and put back after it (type-51 actions) in both InstallUISequence and
  InstallExecuteSequence, so a full-UI install keeps it too. wixl writes every type-51 action as 2099 (with
  NoImpersonate, a bit only deferred actions take, and without FirstSequence whatever `Execute` says); msibuild
  sets 51.
- Path checks. INSTALLDIR is refused before anything changes when it is too long for the image's deepest file or
  holds non-ASCII, control characters or ';' (the zip route's rules): an inline JScript action measures it, as
  conditions cannot (installdir_checks).
  The check fails closed where it guards against code run as SYSTEM: a first install whose INSTALLDIR already
  holds anything is refused the same way (planted_file_check), and its measure has no continue-on-failure bit.
- Add/Remove Programs. InstallLocation is set from INSTALLDIR (ARPINSTALLLOCATION, a type-51 action after
  CostFinalize), EstimatedSize from the image's files (ARPSIZE, in KB), and repair is offered (no ARPNOREPAIR).
- Files in use. Restart Manager is on (no MSIRESTARTMANAGERCONTROL, Windows Installer's default): an upgrade
  or repair while run.cmd's python.exe holds onnxruntime.dll has Windows Installer close that process first
  (a silent install always does, MSIRMSHUTDOWN's default 0), rather than schedule the replacement for the next
  reboot, which left the self-check to run on old and new files together. What Restart Manager cannot close
  is still replaced at the reboot (3010); `MSIRMSHUTDOWN=1` on the command line forces such processes to end.
- Repair. The File table carries each PE file's own version (wixl writes none; msibuild sets it) and
  MsiFileHash (wixl's MD5 rows) keeps only unversioned files, as Windows Installer's file rules want.
- Proof. The self-check runs as a deferred, no-impersonate custom action on the installed python.exe
  (`engine.py msi-finish`) before InstallFinalize; its non-zero exit rolls the install back. Briefcase's
  immediate action after InstallFinalize runs unelevated for per-machine installs (beeware/briefcase#2722).
- Routes. The detection value is the zip route's (HKLM\\SOFTWARE\\ort-bundler\\<name>, Route=msi); a
  launch condition refuses while the zip route's install (Route=zip) is there, as install.cmd refuses
  the MSI's.
- Prerequisite. VC_redist is a Burn bundle that cannot run inside an MSI transaction (1618), so the
  VC++ runtime is a launch condition on the registry values install.cmd reads, not a nested install.
- Permissions. INSTALLDIR is a created folder (a CreateFolder row of the detection component) locked by one
  MsiLockPermissionsEx row with the zip route's ACL (`icacls /inheritance:r`, Administrators and SYSTEM full,
  Users read and run) and Administrators as owner: a protected SDDL, so a folder on a data volume does not inherit
  "Authenticated Users: Modify". CreateFolders runs before InstallFiles, so every file is written under it. A
  first install refuses a folder that already holds anything (planted_file_check), from the script host, before
  any of its files runs. wixl 0.101 has no
  PermissionEx, so the row is added by msibuild (bundler/platforms/windows/msi.py); only MsiLockPermissionsEx is
  written, as a package with both it and LockPermissions fails (Windows Installer error 1941), and only it
  can drop inheritance.
- Short names. Windows Installer's Filename data type is `short|long`, the short part an 8.3 name (ICE03); wixl
  0.101 has no ShortName and writes a File's or Directory's Name as it is, so the Name given it is already
  `SHORT~N.EXT|long name` where the long name is no valid 8.3 name: upper case, letters, digits and
  `!#$%&'()-@^_`{}~` only, N the lowest number that no other name of the same folder (files and folders alike,
  compared without case) takes, the folder's names taken in sorted order, so the same image gives the same names.
  A name that is a valid 8.3 name in any case (`python.exe`) is its own short name, as WiX writes it.
- Text. libmsi (under wixl) stores table strings in one ANSI code page: a character outside Windows-1252 is
  stored as nothing or crashes wixl (exit -11), so such text is refused up front, and the database's code
  page is set to 1252 so that Latin-1 text reads the same on every machine.
"""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from packaging.version import InvalidVersion, Version

from bundler.errors import UnsupportedError
from bundler.shipped.ort_bundle.engine.windows.windows_install_dir import MAX_PATH

#: ort-bundler's UUIDv5 namespace for MSI GUIDs (itself uuid5 of the URL namespace and the tool's name).
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "ort-bundler/msi")
VC_RUNTIME_KEY = r"SOFTWARE\Microsoft\VisualStudio\14.0\VC\Runtimes\x64"
DETECTION_KEY = "SOFTWARE\\ort-bundler\\{name}"
#: Where our actions go in InstallExecuteSequence, by number: wixl 0.101 places Before=/After= actions wrongly
#: (a custom action "Before InstallFinalize" lands at 1, ahead of the files). The standard actions' numbers:
#: AppSearch 50, CostFinalize 1000, InstallValidate 1400, InstallInitialize 1500, RemoveFiles 3500, InstallFiles 4000, InstallFinalize 6600.
SEQUENCE = {"app_search": 50, "arp_location": 1001, "filled_check": 1005, "installdir_check": 1010,
            "remove_existing": 1510, "forget": 3490, "empty_check": 3710, "finish": 6500}
#: The install folder's ACL, as the zip route's `icacls /inheritance:r /grant:r *S-1-5-32-544:(OI)(CI)F
#: *S-1-5-18:(OI)(CI)F *S-1-5-32-545:(OI)(CI)RX`: "P" protects it from inheritance; FA is full control and
#: 0x1200a9 read and execute (FILE_GENERIC_READ | FILE_GENERIC_EXECUTE), each inherited by files and folders.
#: "O:BA" makes Administrators its owner: an account that made the folder before the install would otherwise keep
#: the owner's right to rewrite this DACL and plant a DLL after the lock.
INSTALLDIR_SDDL = "O:BAD:P(A;OICI;FA;;;BA)(A;OICI;FA;;;SY)(A;OICI;0x1200a9;;;BU)"
#: The MsiLockPermissionsEx table (Windows Installer 5.0; the Package's InstallerVersion is 500), as an .idt
#: file for `msibuild -i`: column names, their types, the table and its key, then the one row locking INSTALLDIR.
LOCK_TABLE = ("MsiLockPermissionsEx\tLockObject\tTable\tSDDLText\tCondition\r\n"
              "s72\ts72\ts32\tl0\tS255\r\n"
              "MsiLockPermissionsEx\tMsiLockPermissionsEx\r\n"
              f"LockInstallDir\tINSTALLDIR\tCreateFolder\t{INSTALLDIR_SDDL}\t\r\n")
#: The code page of the database's strings (libmsi writes Windows-1252 bytes but records code page 0, "the
#: installing machine's", which misreads them on a machine whose ANSI code page is not 1252).
CODEPAGE = 1252
CODEPAGE_TABLE = f"\r\n\r\n{CODEPAGE}\t_ForceCodepage\r\n"
#: The custom action type that sets a property from formatted text.
SET_PROPERTY = 51
#: Custom action types (msidbCustomActionType*): inline JScript, an error message that ends the install, the bit
#: that lets the install go on when an action fails, and the bits of a deferred action that runs as SYSTEM.
JSCRIPT_INLINE, ERROR_MESSAGE, CONTINUE = 37, 19, 0x40
IN_SCRIPT, NO_IMPERSONATE = 0x400, 0x800
#: The INSTALLDIR check's measure: its length, and whether it holds a character outside printable ASCII or a ';'
#: (the zip route's rule, windows_install_dir.install_dir_problem). No '[' or '{', which formatted text would read.
MEASURE_SCRIPT = ('var d=Session.Property("INSTALLDIR"),b=0,c;for(var i=0;i<d.length;i++)c=d.charCodeAt(i),'
                  'b|=c<32||c>126||c==59;Session.Property("OrtInstallDirLength")=""+d.length;'
                  'if(b)Session.Property("OrtInstallDirChars")="1";')
#: The planted-file check's measure: what INSTALLDIR already holds, as "N file(s) and M folder(s)" in a property
#: (immediate: before the lock, where a type-19 action can refuse with the text), or as a script error (deferred,
#: after the lock, with INSTALLDIR as CustomActionData: Windows Installer fails the action with error 1720). Counts,
#: not names: Wine's JScript cannot enumerate a folder's collections. No '[' or '{', which formatted text would read.
FILLED_MEASURE = ('var d=Session.Property("{source}"),s=new ActiveXObject("Scripting.FileSystemObject"),o,n="";'
                  'if(s.FolderExists(d))o=s.GetFolder(d),n=o.Files.Count+o.SubFolders.Count?o.Files.Count+" file(s) '
                  'and "+o.SubFolders.Count+" folder(s)":"";')
FILLED_SCRIPT = FILLED_MEASURE.format(source="INSTALLDIR") + 'if(n)Session.Property("OrtInstallDirFilled")=n;'
EMPTY_SCRIPT = (FILLED_MEASURE.format(source="CustomActionData") + 'if(n)throw new Error("INSTALLDIR "+d+" held "+n+'
                '" once locked: refused, as files another account put there would run as SYSTEM");')
FILLED_PROBLEM = ("INSTALLDIR [INSTALLDIR] already holds [OrtInstallDirFilled] before this first install: a folder made "
                  "before the install may hold files another account put there, which the install would run as SYSTEM; "
                  "remove the folder or choose a new one")
#: The Upgrade table's attribute bits (msidbUpgradeAttributes*).
ONLY_DETECT, MIN_INCLUSIVE, MAX_INCLUSIVE = 2, 256, 512
#: What an 8.3 name may hold besides ASCII letters and digits (the Filename data type forbids spaces and
#: `\ ? | > < : / * " + , ; = [ ]` in a short name; other characters are left out so it reads the same in every
#: code page).
SHORT_NAME_EXTRA = frozenset("!#$%&'()-@^_`{}~")
#: The most short names `~N` tells apart with one stem: ~1 .. ~999999 (the stem keeps at least one character).
SHORT_NAME_TAILS = 999_999
#: MSI's ProductVersion limits: major.minor.build (Windows Installer ignores a fourth field).
VERSION_LIMITS = (255, 255, 65535)


@dataclass(frozen=True)
class MsiProduct:
    """What the MSI says about the product, all derived from the bundle. `namespace`: the UUIDv5 namespace of
    the component GUIDs (the manifest's upgrade_code when it has one)."""

    name: str
    version: str  # the bundle's version
    product_version: str  # MSI's three-part form of it
    publisher: str
    product_code: str  # {GUID}, upper case, as Windows Installer writes it
    upgrade_code: str
    bundle_sha256: str
    interpreter: str  # image-relative, '/'-separated: python/python.exe
    vc_runtime_min: tuple[int, int, int] | None
    namespace: uuid.UUID = NAMESPACE


def guid(*parts: str, namespace: uuid.UUID = NAMESPACE) -> str:
    return "{" + str(uuid.uuid5(namespace, "/".join(parts))).upper() + "}"


def braced(value: uuid.UUID) -> str:
    """A GUID as Windows Installer writes it: upper case in braces."""
    return "{" + str(value).upper() + "}"


def product_version(version: str, *, source: str) -> str:
    """The bundle version as MSI's major.minor.build. Only plain releases of at most three numbers map one to
    one: 1.0.0rc1, 1.0.0.post1 or 1.0.0.4 would install as 1.0.0 and upgrade nothing, so they are refused."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        parsed = None
    if parsed is None or parsed.is_prerelease or parsed.is_postrelease or parsed.local or parsed.epoch \
            or len(parsed.release) > 3:
        msg = (f"{source}: version {version!r} has no MSI form: an MSI needs a plain release of at most three "
               f"numbers (major.minor.build), as a pre-, post-, dev-, local or four-part version would map to the "
               f"same MSI version as another release")
        raise UnsupportedError(msg)
    numbers = (*parsed.release, 0, 0)[:3]
    if any(number > limit for number, limit in zip(numbers, VERSION_LIMITS)):
        msg = (f"{source}: version {version!r} is beyond MSI's limits {'.'.join(map(str, VERSION_LIMITS))} "
               f"(major.minor.build)")
        raise UnsupportedError(msg)
    return ".".join(map(str, numbers))


def identifier(prefix: str, path: str) -> str:
    """An MSI identifier for a path (letters, digits, '_' and '.', at most 72 characters), stable across builds."""
    return prefix + uuid.uuid5(NAMESPACE, path).hex


def check_text(product: MsiProduct, files: Sequence[str]) -> None:
    """Refuse, in one sentence, text the MSI's tables cannot hold: wixl crashes (exit -11, no reason given) or
    stores an empty string for characters outside Windows-1252 (see Text in the module docstring)."""
    fields = [("bundle.json: [bundle] publisher", product.publisher), ("bundle.json: name", product.name),
              ("bundle.json: version", product.version), *(("the install image's file", path) for path in files)]
    for where, text in fields:
        bad = list(dict.fromkeys(char for char in text if not _in_codepage(char)))
        if bad:
            msg = (f"{where} {text!r} holds {', '.join(repr(c) for c in bad)}, which an MSI cannot store (wixl keeps "
                   f"table text in Windows-1252 and crashes or drops other characters): write it with Latin letters, "
                   f"or package without --msi")
            raise UnsupportedError(msg)


def _in_codepage(char: str) -> bool:
    try:
        char.encode(f"cp{CODEPAGE}")
    except UnicodeEncodeError:
        return False
    return ord(char) >= 0x20


def _vc_condition(minimum: tuple[int, int, int]) -> str:
    """Windows Installer compares the "#N" strings a DWORD RegistrySearch yields as text: equal widths make that
    numeric (the runtime's minor has two digits and its build five since VS 2017; the major is always 14)."""
    _, minor, build = minimum
    return (f'Installed OR (VCRT_INSTALLED = "#1" AND (VCRT_MINOR > "#{minor:02d}" OR '
            f'(VCRT_MINOR = "#{minor:02d}" AND VCRT_BLD >= "#{build:05d}")))')


def wxs(product: MsiProduct, files: Sequence[str], *, estimated_kb: int | None = None) -> str:
    """The .wxs for the image's `files` ('/'-separated, the receipt included), named relative to the image's
    folder, where wixl runs (it refuses absolute source paths). `estimated_kb`: their size, for Add/Remove
    Programs' EstimatedSize."""
    if product.interpreter not in files:
        msg = f"the install image has no {product.interpreter}, which the MSI's self-check action runs"
        raise UnsupportedError(msg)
    check_text(product, files)
    root = ET.Element("Wix", xmlns="http://schemas.microsoft.com/wix/2006/wi")
    node = ET.SubElement(root, "Product", Id=product.product_code, Name=product.name, Language="1033",
                         Version=product.product_version, Manufacturer=product.publisher,
                         UpgradeCode=product.upgrade_code, Codepage="65001")
    ET.SubElement(node, "Package", InstallerVersion="500", Compressed="yes", InstallScope="perMachine",
                  Description=f"{product.name} {product.version}", Manufacturer=product.publisher)
    ET.SubElement(node, "Media", Id="1", Cabinet="payload.cab", EmbedCab="yes")
    _properties(node, product, estimated_kb)
    _conditions(node, product)
    _upgrade(node, product)
    components = _tree(node, product, files)
    feature = ET.SubElement(node, "Feature", Id="Main", Level="1", Title=product.name, Absent="disallow")
    for component in components:
        ET.SubElement(feature, "ComponentRef", Id=component)
    _actions(node, product, identifier("f", product.interpreter))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _properties(node: ET.Element, product: MsiProduct, estimated_kb: int | None) -> None:
    fixed = [("ARPNOMODIFY", "1")]  # no MSIRESTARTMANAGERCONTROL: Restart Manager on (module docstring)
    if estimated_kb is not None:
        fixed.append(("ARPSIZE", str(estimated_kb)))
    for name, value in fixed:
        ET.SubElement(node, "Property", Id=name, Value=value)
    searches = [("ORT_ROUTE", DETECTION_KEY.format(name=product.name), "Route"),
                ("INSTALLDIR", DETECTION_KEY.format(name=product.name), "InstallDir")]
    if product.vc_runtime_min:
        searches += [(f"VCRT_{part.upper()}", VC_RUNTIME_KEY, part) for part in ("Installed", "Minor", "Bld")]
    for prop, key, name in searches:
        holder = ET.SubElement(node, "Property", Id=prop)
        ET.SubElement(holder, "RegistrySearch", Id=f"Search{prop}", Root="HKLM", Key=key, Name=name, Type="raw",
                      Win64="yes")


def _conditions(node: ET.Element, product: MsiProduct) -> None:
    zip_route = (f"{product.name} is installed by its zip route (install.cmd); run its uninstall.cmd before "
                 f"installing the MSI")
    ET.SubElement(node, "Condition", Message=zip_route).text = 'Installed OR ORT_ROUTE <> "zip"'
    if product.vc_runtime_min:
        wanted = ".".join(map(str, product.vc_runtime_min))
        message = (f"{product.name} needs the Microsoft Visual C++ 2015-2022 x64 runtime {wanted} or newer: install "
                   f"VC_redist.x64.exe first (it cannot run inside this MSI; in Intune, make it a dependency)")
        ET.SubElement(node, "Condition", Message=message).text = _vc_condition(product.vc_runtime_min)


def _upgrade(node: ET.Element, product: MsiProduct) -> None:
    upgrade = ET.SubElement(node, "Upgrade", Id=product.upgrade_code)
    ET.SubElement(upgrade, "UpgradeVersion", Minimum=product.product_version, IncludeMinimum="no",
                  OnlyDetect="yes", Property="NEWER_VERSION_FOUND")
    ET.SubElement(upgrade, "UpgradeVersion", Minimum="0.0.0", Maximum=product.product_version, IncludeMinimum="yes",
                  IncludeMaximum="yes", Property="OLDER_VERSION_FOUND")  # wixl drops IncludeMaximum: see upgrade_table
    ET.SubElement(node, "Condition", Message=f"a newer version of {product.name} is already installed").text = \
        "Installed OR NOT NEWER_VERSION_FOUND"


def _tree(node: ET.Element, product: MsiProduct, files: Sequence[str]) -> list[str]:
    """Directories and one component per file; returns every component id."""
    top = ET.SubElement(node, "Directory", Id="TARGETDIR", Name="SourceDir")
    programs = ET.SubElement(top, "Directory", Id="ProgramFiles64Folder")
    names = filename_columns(product.name, files)
    folders = {"": ET.SubElement(programs, "Directory", Id="INSTALLDIR", Name=names[""])}
    components = []
    for path in sorted(files):
        parent = _folder(folders, path.rpartition("/")[0], names)
        component = identifier("c", path)
        element = ET.SubElement(parent, "Component", Id=component, Guid=guid(product.name, "file", path, namespace=product.namespace),
                                 Win64="yes")
        ET.SubElement(element, "File", Id=identifier("f", path), Name=names[path], KeyPath="yes", Source=path)
        components.append(component)
    registry = ET.SubElement(folders[""], "Component", Id="Detection", Guid=guid(product.name, "detection", namespace=product.namespace),
                             Win64="yes")
    ET.SubElement(registry, "CreateFolder")  # INSTALLDIR's CreateFolder row, which its MsiLockPermissionsEx row names
    key = DETECTION_KEY.format(name=product.name)
    for name, value in (("Version", product.version), ("InstallDir", "[INSTALLDIR]"), ("Route", "msi"),
                        ("InstallId", f"{product.name}-{product.version}"), ("BundleSha256", product.bundle_sha256),
                        ("ProductCode", product.product_code)):
        ET.SubElement(registry, "RegistryValue", Root="HKLM", Key=key, Name=name, Value=value, Type="string",
                      KeyPath="yes" if name == "Version" else "no")
    return [*components, "Detection"]


@dataclass(frozen=True)
class CheckAction:
    """One action of the INSTALLDIR check, with its InstallExecuteSequence row: wixl 0.101 authors neither a script
    nor an error action ("Unsupported CustomAction"), so msibuild inserts them (bundler/platforms/windows/msi.py)."""

    action: str
    type: int
    source: str
    target: str
    sequence: int
    condition: str

    def queries(self) -> tuple[str, str]:
        """The two INSERTs; no value holds a single quote, which ends a string in msibuild's SQL."""
        return (f"INSERT INTO `CustomAction` (`Action`, `Type`, `Source`, `Target`) "
                f"VALUES ('{self.action}', {self.type}, '{self.source}', '{self.target}')",
                f"INSERT INTO `InstallExecuteSequence` (`Action`, `Condition`, `Sequence`) "
                f"VALUES ('{self.action}', '{self.condition}', {self.sequence})")


def installdir_checks(files: Sequence[str]) -> tuple[CheckAction, ...]:
    """INSTALLDIR refused before anything changes, as the zip route refuses -InstallDir: too long for the image's
    deepest file to stay under MAX_PATH, or non-ASCII, control characters or ';'. MSI's conditions have no length
    and no character class, so an inline JScript action measures INSTALLDIR once CostFinalize has resolved it
    (with its closing backslash); conditions on what it found name the problem; an error action (type 19) ends the
    install with it (exit 1603) before InstallValidate. Where no script engine runs, the measure fails, is
    ignored (CONTINUE) and nothing is refused: Windows Installer's own file copy then fails on a path too long."""
    deepest = max(len(path) for path in files)
    limit = MAX_PATH - deepest
    start = SEQUENCE["installdir_check"]
    too_long = (f"INSTALLDIR [INSTALLDIR] is [OrtInstallDirLength] characters long: the deepest file of this product "
                f"adds {deepest} and a path holds at most {MAX_PATH} (MAX_PATH); choose a folder of at most {limit} "
                f"characters, its closing backslash included")
    not_ascii = ("INSTALLDIR [INSTALLDIR] contains non-ASCII or control characters or a semicolon: ONNX Runtime "
                 "cannot load its providers from such a path, and a semicolon splits PATH")
    return (
        CheckAction("OrtMeasureInstallDir", JSCRIPT_INLINE | CONTINUE, "", MEASURE_SCRIPT, start, 'NOT REMOVE~="ALL"'),
        CheckAction("OrtInstallDirTooLong", SET_PROPERTY, "OrtInstallDirProblem", too_long, start + 1,
                    f"OrtInstallDirLength > {limit}"),
        CheckAction("OrtInstallDirNotAscii", SET_PROPERTY, "OrtInstallDirProblem", not_ascii, start + 2,
                    "OrtInstallDirChars"),
        CheckAction("OrtRefuseInstallDir", ERROR_MESSAGE, "", "[OrtInstallDirProblem]; nothing was changed",
                    start + 3, "OrtInstallDirProblem"),
    )


def planted_file_check() -> tuple[CheckAction, ...]:
    """A first install refuses an INSTALLDIR that already holds anything, before any file is copied and so before
    anything in it runs (issue 34, severe 7): python.exe loads DLLs from its own folder (VERSION.dll, which
    python311.dll imports, is no KnownDLL), so a file another account put in a folder made before the install would
    run as SYSTEM in msi-finish. It looks twice, each time from the installer's own script host (System32):

    - before anything changes (immediate, beside the other INSTALLDIR checks): the refusal, with its text, through
      the type-19 action they share (OrtRefuseInstallDir, exit 1603);
    - again just after CreateFolders has locked the folder (deferred, as SYSTEM), for what was put there in the
      seconds between: from then on only Administrators and SYSTEM can add to it (INSTALLDIR_SDDL, whose owner
      part also takes the folder from whoever made it, where Windows Installer applies it). A script error fails
      the action on Windows (1720); Wine 8 ignores a deferred script's error (measured), so only the first look
      refuses under Wine.

    An upgrade or a repair writes into the folder an earlier install made and locked, so only a first install is
    checked."""
    condition = "NOT Installed AND NOT OLDER_VERSION_FOUND"
    start = SEQUENCE["filled_check"]
    return (
        CheckAction("OrtMeasureInstallDirFilled", JSCRIPT_INLINE, "", FILLED_SCRIPT, start, condition),
        CheckAction("OrtInstallDirFilled", SET_PROPERTY, "OrtInstallDirProblem", FILLED_PROBLEM, start + 1,
                    f"OrtInstallDirFilled AND {condition}"),
        CheckAction("OrtSetEmptyCheck", SET_PROPERTY, "OrtCheckInstallDirEmpty", "[INSTALLDIR]", start + 2, condition),
        CheckAction("OrtCheckInstallDirEmpty", JSCRIPT_INLINE | IN_SCRIPT | NO_IMPERSONATE, "", EMPTY_SCRIPT,
                    SEQUENCE["empty_check"], condition),
    )


def upgrade_table(product: MsiProduct) -> str:
    """The Upgrade table as an .idt for `msibuild -i`, replacing wixl's: wixl 0.101 ignores IncludeMaximum, and the
    older-version row must include this version (a same-version rebuild with other content, which has another
    ProductCode, replaces the installed one). The key columns cannot be UPDATEd, so the table is written whole."""
    version = product.product_version
    return ("UpgradeCode\tVersionMin\tVersionMax\tLanguage\tAttributes\tRemove\tActionProperty\r\n"
            "s38\tS20\tS20\tS255\ti4\tS255\ts72\r\n"
            "Upgrade\tUpgradeCode\tVersionMin\tVersionMax\tLanguage\tAttributes\r\n"
            f"{product.upgrade_code}\t{version}\t\t\t{ONLY_DETECT}\t\tNEWER_VERSION_FOUND\r\n"
            f"{product.upgrade_code}\t0.0.0\t{version}\t\t{MIN_INCLUSIVE | MAX_INCLUSIVE}\t\tOLDER_VERSION_FOUND\r\n")


def _folder(folders: dict[str, ET.Element], relative: str, names: dict[str, str]) -> ET.Element:
    if relative in folders:
        return folders[relative]
    parent = _folder(folders, relative.rpartition("/")[0], names)
    folders[relative] = ET.SubElement(parent, "Directory", Id=identifier("d", relative), Name=names[relative])
    return folders[relative]


def is_short_name(name: str) -> bool:
    """Whether `name` is a valid 8.3 name as it is: a stem of 1 to 8 characters and at most one dot with 1 to 3
    after it, each an ASCII letter or digit or one of SHORT_NAME_EXTRA (either case, as WiX accepts it)."""
    stem, dot, ext = name.partition(".")
    return (1 <= len(stem) <= 8 and len(ext) <= 3 and bool(ext) == bool(dot)
            and all(_short_char(char) for char in stem + ext))


def _short_char(char: str) -> bool:
    return (char.isascii() and char.isalnum()) or char in SHORT_NAME_EXTRA


def _short_part(text: str) -> str:
    """`text` upper-cased for a short name: spaces and dots dropped, any other character a short name cannot
    hold made "_" (as Windows makes its own short names)."""
    return "".join(char if _short_char(char) else "_" for char in text.upper() if char not in " .")


def short_names(names: Sequence[str]) -> dict[str, str]:
    """Every name of one folder (its files and folders) as the Filename column writes it: itself when it is a
    valid 8.3 name, else `SHORT~N.EXT|name` with N the lowest number no other name of the folder takes."""
    taken = {name.upper() for name in names if is_short_name(name)}
    written = {name: name for name in names if is_short_name(name)}
    for name in sorted(set(names) - written.keys()):
        short = _short_name(name, taken)
        taken.add(short)
        written[name] = f"{short}|{name}"
    return written


def _short_name(name: str, taken: set[str]) -> str:
    """`name`'s stem (its first characters, before `~N`) and extension (three characters) in 8.3 form, with the
    lowest N not `taken`."""
    stem, _, ext = name.rpartition(".")
    if not stem:  # no dot, or only a leading one (".gitignore")
        stem, ext = name, ""
    base, suffix = _short_part(stem) or "_", _short_part(ext)[:3]
    for number in range(1, SHORT_NAME_TAILS + 1):
        tail = f"~{number}"
        candidate = base[:8 - len(tail)] + tail + (f".{suffix}" if suffix else "")
        if candidate not in taken:
            return candidate
    msg = (f"the install image has more than {SHORT_NAME_TAILS:,} names in one folder that share the short name "
           f"stem of {name!r}, more than 8.3 names can tell apart")
    raise UnsupportedError(msg)


def filename_columns(top: str, files: Sequence[str]) -> dict[str, str]:
    """The Filename column of every file and folder below INSTALLDIR (image-relative, '/'-separated; "" is
    INSTALLDIR itself, named `top` in its parent): the short and long names, unique per folder."""
    children: dict[str, set[str]] = {}
    for path in files:
        parts = PurePosixPath(path).parts
        for depth in range(len(parts)):
            children.setdefault("/".join(parts[:depth]), set()).add(parts[depth])
    columns = {"": short_names([top])[top]}
    for parent, names in children.items():
        for name, column in short_names(sorted(names)).items():
            columns[f"{parent}/{name}" if parent else name] = column
    return columns


def _actions(node: ET.Element, product: MsiProduct, python: str) -> None:
    """`msi-finish` as SYSTEM before InstallFinalize, with or without the self-check, and on removal (before the
    files go) to delete cache_dir.txt, which it wrote outside the file table. "[INSTALLDIR]." because INSTALLDIR
    ends in a backslash, which would escape a closing quote on the command line."""
    engine = '-I -B "[INSTALLDIR]installer\\ort_bundle\\__main__.py" engine msi-finish --root "[INSTALLDIR]." --cache-dir "[CACHEDIR]" ' \
             f'--log-file "[WindowsFolder]Logs\\Software\\{product.name}-{product.version}-msi.log"'
    actions = (("OrtFinish", "", 'NOT REMOVE~="ALL" AND NOT NOSELFCHECK', "check", SEQUENCE["finish"]),
               ("OrtFinishNoCheck", " --no-self-check", 'NOT REMOVE~="ALL" AND NOSELFCHECK', "check", SEQUENCE["finish"] + 1),
               # Not while a newer version removes this one (UPGRADINGPRODUCTCODE): the detection values it deletes
               # are no part of the transaction, so an upgrade that fails and is rolled back would leave the restored
               # version undetected; the newer version's msi-finish writes its own values and cache_dir.txt.
               ("OrtForget", " --remove", 'REMOVE~="ALL" AND NOT UPGRADINGPRODUCTCODE', "ignore", SEQUENCE["forget"]))
    for action, extra, _, outcome, _ in actions:
        ET.SubElement(node, "CustomAction", Id=action, FileKey=python, ExeCommand=engine + extra, Execute="deferred",
                      Impersonate="no", Return=outcome)
    # The remembered folder: AppSearch reads INSTALLDIR back from the detection value (a repair or an upgrade
    # goes where the install went; Windows Installer keeps no directory property), unless the command line
    # gave one, which is saved before AppSearch and put back after it. AppSearch runs in both sequences (the
    # UI sequence's, in the client, only in a full or reduced UI), so both pairs run too, and in every sequence
    # (not FirstSequence): in the execute sequence of a full-UI install, INSTALLDIR is the value the client
    # chose, which the server's AppSearch would otherwise replace.
    ET.SubElement(node, "CustomAction", Id="OrtSaveInstallDir", Property="ORT_CMDLINE_INSTALLDIR",
                  Value="[INSTALLDIR]")
    ET.SubElement(node, "CustomAction", Id="OrtRestoreInstallDir", Property="INSTALLDIR",
                  Value="[ORT_CMDLINE_INSTALLDIR]")
    # Add/Remove Programs' InstallLocation: INSTALLDIR once costing has resolved it (a type-51 action).
    ET.SubElement(node, "CustomAction", Id="OrtArpInstallLocation", Property="ARPINSTALLLOCATION", Value="[INSTALLDIR]")
    sequence = ET.SubElement(node, "InstallExecuteSequence")
    ET.SubElement(sequence, "Custom", Action="OrtArpInstallLocation", Sequence=str(SEQUENCE["arp_location"]))
    for table in (sequence, ET.SubElement(node, "InstallUISequence")):
        ET.SubElement(table, "Custom", Action="OrtSaveInstallDir", Sequence=str(SEQUENCE["app_search"] - 1))
        ET.SubElement(table, "Custom", Action="OrtRestoreInstallDir",
                      Sequence=str(SEQUENCE["app_search"] + 1)).text = "ORT_CMDLINE_INSTALLDIR"
    ET.SubElement(sequence, "RemoveExistingProducts", Sequence=str(SEQUENCE["remove_existing"]))
    for action, _, condition, _, number in actions:
        ET.SubElement(sequence, "Custom", Action=action, Sequence=str(number)).text = condition
