"""App Control for Business (WDAC) and AppLocker policies for the PE files an install puts on disk: pure, from
the files' identities (bundler/readers/pe_identity.py) to XML bytes.

One rule per distinct identity, and every file covered by exactly one rule:

- a file whose signature verified and that has a version resource naming it (`OriginalFilename`) and a file
  version gets a publisher rule: App Control's `FilePublisher` level (a `FileAttrib` with the file name and the
  minimum version, referenced by a `Signer` holding the CA's TBS hash and the leaf's common name), AppLocker's
  `FilePublisherRule` (the leaf's subject, the product, the binary name, the version and above);
- every other file (unsigned, a signature that did not verify, no version resource) gets a hash rule with its
  Authenticode SHA-256 digest: App Control's `Allow Hash=`, AppLocker's `FileHashRule`.

App Control: a supplemental policy (`PolicyType="Supplemental Policy"`) for the base policy the admin names,
rules in the user-mode signing scenario (12), and optionally the same rules as a base policy for
`Merge-CIPolicy`. Element order follows what ConfigCI's `New-CIPolicy` writes. AppLocker: the Exe and Dll
rule collections, `EnforcementMode="NotConfigured"` so that merging (`Set-AppLockerPolicy -Merge`) changes no
enforcement mode, each rule for the SID the admin names. IDs and GUIDs are derived from the bundle and the
rule's content, so the same bundle gives the same bytes.
"""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from bundler.errors import UsageError
from bundler.readers.pe_identity import PeIdentity

SIPOLICY_NS = "urn:schemas-microsoft-com:sipolicy"
#: The PlatformID every policy ConfigCI writes carries.
PLATFORM_ID = "{2E07F7E4-194C-4D20-B7C9-6F44A6C5A234}"
USER_MODE_SCENARIO = "12"
EVERYONE = "S-1-1-0"
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "ort-bundler/app-control")
_GUID = re.compile(r"\{?[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\}?")
_SID = re.compile(r"S-1-\d+(-\d+)*")
_EXE_SUFFIXES = (".exe", ".com")


@dataclass(frozen=True, kw_only=True)
class PolicyOptions:
    name: str  # the bundle's
    version: str
    base_policy_id: str | None  # {GUID} of the admin's base policy: the supplemental policy needs it
    sid: str = EVERYONE

    def __post_init__(self) -> None:
        if self.base_policy_id is not None and not _GUID.fullmatch(self.base_policy_id):
            msg = (f"--base-policy-id: found {self.base_policy_id!r}, expected the GUID of your App Control base "
                   "policy, as its <PolicyID> holds it ({XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX})")
            raise UsageError(msg)
        if not _SID.fullmatch(self.sid):
            msg = f"--sid: found {self.sid!r}, expected a security identifier such as S-1-1-0 (Everyone)"
            raise UsageError(msg)


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One rule, and the files it covers."""

    key: str  # what makes it one rule: the hash, or the publisher, name and version
    level: str  # "publisher" or "hash"
    files: tuple[PeIdentity, ...]

    @property
    def first(self) -> PeIdentity:
        return self.files[0]

    @property
    def collection(self) -> str:
        """AppLocker's rule collection."""
        return "Exe" if PurePosixPath(self.first.path).suffix.lower() in _EXE_SUFFIXES else "Dll"


@dataclass(frozen=True, kw_only=True)
class Uncovered:
    """A file the install puts on disk that no rule can name before it exists."""

    path: str
    reason: str


def rules_for(files: Sequence[PeIdentity]) -> tuple[Rule, ...]:
    """Every file in exactly one rule; files with the same identity (the same DLL twice) share it."""
    grouped: dict[tuple[str, str], list[PeIdentity]] = {}
    for identity in sorted(files, key=lambda f: f.path):
        grouped.setdefault(_rule_key(identity), []).append(identity)
    return tuple(Rule(key=key, level=level, files=tuple(members)) for (level, key), members in grouped.items())


def publisher_level(identity: PeIdentity) -> bool:
    return identity.publisher is not None and bool(identity.original_filename) and identity.file_version is not None


def why_hash(identity: PeIdentity) -> str:
    """The reason a file gets a hash rule, for the report."""
    if not identity.signed:
        return "unsigned"
    if identity.publisher is None:
        return f"signature not verified: {identity.signature_note}" if identity.signature_note else \
            "signature names no issuing CA"
    return "signed, but its version resource names no OriginalFilename and file version"


def wdac_policy(rules: Sequence[Rule], options: PolicyOptions, *, base: bool) -> bytes:
    """The SiPolicy XML: supplemental for `options.base_policy_id`, or (`base`) a base policy of these rules alone."""
    policy_id = _guid(options.name, "wdac", "base" if base else "supplemental").upper()
    root = ET.Element("SiPolicy", {"xmlns": SIPOLICY_NS,
                                   "PolicyType": "Base Policy" if base else "Supplemental Policy"})
    _text(root, "VersionEx", _version_ex(options.version))
    _text(root, "PlatformID", PLATFORM_ID)
    rules_element = ET.SubElement(root, "Rules")
    options_set = ("Enabled:UMCI", "Enabled:Unsigned System Integrity Policy") if base else \
        ("Enabled:Unsigned System Integrity Policy",)
    for option in options_set:
        _text(ET.SubElement(rules_element, "Rule"), "Option", option)
    ET.SubElement(root, "EKUs")
    file_rules, signers, hash_ids, signer_ids = _wdac_rules(rules)
    root.append(file_rules)
    root.append(signers)
    scenarios = ET.SubElement(root, "SigningScenarios")
    scenario = ET.SubElement(scenarios, "SigningScenario", {"Value": USER_MODE_SCENARIO,
                                                            "ID": "ID_SIGNINGSCENARIO_WINDOWS",
                                                            "FriendlyName": f"{options.name} {options.version}"})
    product = ET.SubElement(scenario, "ProductSigners")
    if signer_ids:
        allowed = ET.SubElement(product, "AllowedSigners")
        for signer_id in signer_ids:
            ET.SubElement(allowed, "AllowedSigner", {"SignerId": signer_id})
    if hash_ids:
        refs = ET.SubElement(product, "FileRulesRef")
        for rule_id in hash_ids:
            ET.SubElement(refs, "FileRuleRef", {"RuleID": rule_id})
    ET.SubElement(root, "UpdatePolicySigners")
    ET.SubElement(root, "CiSigners")
    _text(root, "HvciOptions", "0")
    _text(root, "BasePolicyID", policy_id if base else _braced(options.base_policy_id or ""))
    _text(root, "PolicyID", policy_id)
    settings = ET.SubElement(root, "Settings")
    for value_name, value in (("Name", f"{options.name} {options.version} (ort-bundler)"),
                              ("Id", _version_ex(options.version))):
        setting = ET.SubElement(settings, "Setting", {"Provider": "PolicyInfo", "Key": "Information",
                                                      "ValueName": value_name})
        _text(ET.SubElement(setting, "Value"), "String", value)
    return _serialise(root)


def applocker_policy(rules: Sequence[Rule], options: PolicyOptions) -> bytes:
    """The AppLocker policy XML, as `Set-AppLockerPolicy -XmlPolicy` (and `-Merge`) takes it."""
    root = ET.Element("AppLockerPolicy", {"Version": "1"})
    for collection in ("Exe", "Dll"):
        element = ET.SubElement(root, "RuleCollection", {"Type": collection, "EnforcementMode": "NotConfigured"})
        for rule in rules:
            if rule.collection == collection:
                element.append(_applocker_rule(rule, options))
    return _serialise(root)


def rule_ids(rules: Sequence[Rule], options: PolicyOptions) -> dict[str, tuple[str, str]]:
    """Each file's App Control rule ID and AppLocker rule GUID, for the report."""
    wdac = _wdac_ids(rules)
    return {identity.path: (wdac[rule.key], _applocker_id(rule, options)) for rule in rules for identity in rule.files}


def _rule_key(identity: PeIdentity) -> tuple[str, str]:
    if publisher_level(identity):
        assert identity.publisher is not None and identity.original_filename is not None
        return "publisher", "|".join((identity.publisher.ca_tbs_hash, identity.publisher.leaf_name,
                                      identity.original_filename.lower(), identity.file_version or ""))
    return "hash", identity.authenticode_sha256


def _wdac_ids(rules: Sequence[Rule]) -> dict[str, str]:
    ids, counters = {}, {"publisher": 0, "hash": 0}
    for rule in rules:
        counters[rule.level] += 1
        prefix = "ID_FILEATTRIB_F_" if rule.level == "publisher" else "ID_ALLOW_A_"
        ids[rule.key] = f"{prefix}{counters[rule.level]}"
    return ids


def _wdac_rules(rules: Sequence[Rule]) -> tuple[ET.Element, ET.Element, list[str], list[str]]:
    """FileRules and Signers, the hash rules' IDs and the signers' IDs: one Signer per CA and publisher name,
    referencing every FileAttrib of that signer."""
    ids = _wdac_ids(rules)
    file_rules, signers = ET.Element("FileRules"), ET.Element("Signers")
    by_signer: dict[tuple[str, str, str], list[str]] = {}
    hash_ids = []
    for rule in rules:
        identity = rule.first
        if rule.level == "hash":
            ET.SubElement(file_rules, "Allow", {"ID": ids[rule.key], "FriendlyName": f"{identity.path} Hash Sha256",
                                                "Hash": identity.authenticode_sha256})
            hash_ids.append(ids[rule.key])
            continue
        assert identity.publisher is not None and identity.original_filename and identity.file_version
        ET.SubElement(file_rules, "FileAttrib", {"ID": ids[rule.key],
                                                 "FriendlyName": f"{identity.path} FileAttribute",
                                                 "FileName": identity.original_filename,
                                                 "MinimumFileVersion": identity.file_version})
        signer = (identity.publisher.ca_tbs_hash, identity.publisher.leaf_name, identity.publisher.ca_name)
        by_signer.setdefault(signer, []).append(ids[rule.key])
    signer_ids = []
    for number, ((tbs, leaf, ca), attribs) in enumerate(sorted(by_signer.items()), start=1):
        signer_id = f"ID_SIGNER_F_{number}"
        element = ET.SubElement(signers, "Signer", {"ID": signer_id, "Name": ca})
        ET.SubElement(element, "CertRoot", {"Type": "TBS", "Value": tbs})
        ET.SubElement(element, "CertPublisher", {"Value": leaf})
        for attrib in attribs:
            ET.SubElement(element, "FileAttribRef", {"RuleID": attrib})
        signer_ids.append(signer_id)
    return file_rules, signers, hash_ids, signer_ids


def _applocker_rule(rule: Rule, options: PolicyOptions) -> ET.Element:
    identity = rule.first
    names = ", ".join(PurePosixPath(f.path).name for f in rule.files)
    attributes = {"Id": _applocker_id(rule, options), "Name": f"{options.name} {options.version}: {names}",
                  "Description": "", "UserOrGroupSid": options.sid, "Action": "Allow"}
    if rule.level == "publisher":
        assert identity.publisher is not None and identity.original_filename and identity.file_version
        element = ET.Element("FilePublisherRule", attributes)
        condition = ET.SubElement(ET.SubElement(element, "Conditions"), "FilePublisherCondition", {
            "PublisherName": identity.publisher.leaf_subject, "ProductName": identity.product_name or "*",
            "BinaryName": identity.original_filename})
        ET.SubElement(condition, "BinaryVersionRange", {"LowSection": identity.file_version, "HighSection": "*"})
        return element
    element = ET.Element("FileHashRule", attributes)
    condition = ET.SubElement(ET.SubElement(element, "Conditions"), "FileHashCondition")
    ET.SubElement(condition, "FileHash", {"Type": "SHA256", "Data": f"0x{identity.authenticode_sha256}",
                                          "SourceFileName": PurePosixPath(identity.path).name,
                                          "SourceFileLength": str(identity.size)})
    return element


def _applocker_id(rule: Rule, options: PolicyOptions) -> str:
    return _guid(options.name, "applocker", options.sid, rule.key).lower().strip("{}")


def _guid(*parts: str) -> str:
    return "{" + str(uuid.uuid5(NAMESPACE, "/".join(parts))).upper() + "}"


def _braced(value: str) -> str:
    return "{" + value.strip("{}").upper() + "}"


def _version_ex(version: str) -> str:
    """The policy's four-part version from the bundle's: its leading numbers, each within 0-65535, so a newer
    release's policy replaces the older one (App Control keeps the higher VersionEx)."""
    numbers = [int(n) for n in re.findall(r"\d+", version.split("+")[0])[:4]]
    return ".".join(str(min(n, 65535)) for n in (*numbers, 0, 0, 0, 0)[:4])


def _text(parent: ET.Element, tag: str, text: str) -> ET.Element:
    element = ET.SubElement(parent, tag)
    element.text = text
    return element


def _serialise(root: ET.Element) -> bytes:
    ET.indent(root, space="  ")
    body: bytes = ET.tostring(root, encoding="unicode").encode("utf-8")
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + body + b"\n"
