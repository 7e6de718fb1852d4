"""Which signatures the bundle's PE files must carry, checked against what the build found (`[ort] allow_unsigned`,
`[ort] allow_test_signed`, `[vc_redist] allow_unsigned`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from bundler.assembly.assembly import Assembly, BuildInputs
from bundler.assembly.binaries import payload_binaries, readable_binary
from bundler.errors import BuildError
from bundler.manifest import AllowedTestSignature, Manifest
from bundler.readers.pe_source import PeSource, source_sha256
from bundler.readers.signatures import SignatureEvidence, authenticode_sha256, known_evidence, signature_evidence

PE_SUFFIXES = (".dll", ".pyd", ".exe")


MICROSOFT = "Microsoft Corporation"  # the signer's organisation, matched exactly
# The common name of Microsoft's test code-signing certificate (chained to "Microsoft Testing PCA 2010", which no
# machine trusts): the binaries of onnxruntime-gpu 1.18.1's win_amd64 wheels carry it (docs/facts.md §10).
TEST_SIGNER = "Code Sign Test (DO NOT TRUST)"

_ORT_BINARY = re.compile(r"onnxruntime[^/]*\.dll|onnxruntime_pybind11_state[^/]*\.pyd", re.IGNORECASE)
_VC_REDIST = re.compile(r"vc_redist[^/]*\.exe", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class SigningRule:
    """What a binary's signature must show. `relaxable` rules give way to `[ort] allow_unsigned`; the
    VC_redist rule only to `[vc_redist] allow_unsigned` (an organisation's own repackaged redistributable)."""

    expected_signer: str | None
    relaxable: bool


ORT_RULE = SigningRule(expected_signer=MICROSOFT, relaxable=True)


VC_REDIST_RULE = SigningRule(expected_signer=MICROSOFT, relaxable=False)


REPORT_RULE = SigningRule(expected_signer=None, relaxable=True)


def signing_rule(name: str) -> SigningRule:
    """The rule for a binary, by its file name.

    Every ONNX Runtime build Microsoft publishes (wheel, capi tree, release archive) is Authenticode-signed
    by Microsoft, wherever the manifest fetched it from: a requirement may be served by a private index and a
    path may hold the official wheel, so the source does not decide. An ORT binary is held to Microsoft's
    signature unless the manifest declares a custom build with `[ort] allow_unsigned = true`. VC_redist is
    Microsoft's unless `[vc_redist] allow_unsigned = true` says it was repackaged. Everything else (NVIDIA's unsigned cudart64_110.dll, numpy's extension modules) is
    reported only, unless it carries a signature that does not verify.
    """
    base = PurePosixPath(name).name
    if _ORT_BINARY.fullmatch(base):
        return ORT_RULE
    if _VC_REDIST.fullmatch(base):
        return VC_REDIST_RULE
    return REPORT_RULE


def is_test_signed(evidence: SignatureEvidence) -> bool:
    """A signature by Microsoft's test certificate, which cannot verify: its root is trusted nowhere."""
    return evidence.signed and not evidence.verified and evidence.signer == TEST_SIGNER


def signature_problem(evidence: SignatureEvidence, rule: SigningRule) -> str | None:
    """Why the evidence breaks the rule, as one sentence, or None."""
    name, signer = evidence.path, evidence.signer
    if is_test_signed(evidence):
        return (f"{name}: signed with Microsoft's test certificate '{TEST_SIGNER}', not a production signature "
                f"({evidence.reason}); expected {rule.expected_signer or 'a valid signature'}")
    if evidence.signed and not evidence.verified:
        return f"{name}: its Authenticode signature by {signer or 'an unknown signer'} does not verify ({evidence.reason}); expected a valid signature"
    if rule.expected_signer is None:
        return None
    if not evidence.signed:
        return f"{name}: carries no Authenticode signature; expected one by {rule.expected_signer}"
    if signer != rule.expected_signer:
        return f"{name}: signed by {signer}; expected a signature by {rule.expected_signer}"
    return None


@dataclass(frozen=True, kw_only=True)
class PeFile:
    label: str  # the bundle path, or "wheel:<wheel>!<member>"
    bundle_path: str  # the member that holds it: the file itself or its wheel
    file: PeSource  # where to read it on the build machine


def check_signatures(assembly: Assembly, build: BuildInputs) -> None:
    """Record the Authenticode evidence of every PE file in the bundle and enforce the signing rules."""
    manifest, work = build.manifest, build.work
    allowed_ort = manifest.ort.allow_unsigned
    allowed_vc = bool(manifest.vc_redist and manifest.vc_redist.allow_unsigned)
    installed = _install_paths(assembly)
    records, problems, failed = [], [], set()
    allowances, used, refused_test = manifest.ort.allow_test_signed, set(), []
    store = build.cache.work_dir("derived")
    files = list(_pe_files(assembly, work=work, store=store))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="authenticode") as pool:
        ahead = {pe.file: pool.submit(authenticode_sha256, pe.file) for pe in files
                 if not known_evidence(pe.file, store)}
        evidences = [signature_evidence(pe.file, label=pe.label, store=store, ahead=ahead.get(pe.file))
                     for pe in files]
    for pe, evidence in zip(files, evidences):
        rule = signing_rule(pe.label)
        problem = signature_problem(evidence, rule)
        relaxed = allowed_vc if rule is VC_REDIST_RULE else rule.relaxable and allowed_ort
        if problem and is_test_signed(evidence):
            entry = allowing_entry(pe, allowances)
            relaxed = entry is not None
            if entry is None:
                refused_test.append(pe)
            else:
                used.add(entry)
        if problem and not relaxed:
            problems.append(problem)
            failed.add(rule)
        records.append(_signature_record(evidence, pe, rule, installed=installed, allowed=bool(problem)))
    problems.extend(unused_allowances(allowances, used, manifest))
    if problems:
        raise BuildError(_signature_message(problems, failed, manifest, test_signed=refused_test))
    assembly.facts.signatures = tuple(records)


def allowing_entry(pe: PeFile, entries: Sequence[AllowedTestSignature]) -> int | None:
    """The index of the `[ort] allow_test_signed` entry naming this file's name and exact sha256, or None.

    Narrower than `allow_unsigned` on purpose: other bytes under the same name, and every other unsigned or
    test-signed file, are still refused."""
    name = PurePosixPath(pe.label).name.lower()
    named = [i for i, entry in enumerate(entries) if entry.file.lower() == name]
    if not named:
        return None
    sha256 = source_sha256(pe.file)
    return next((i for i in named if entries[i].sha256 == sha256), None)


def unused_allowances(entries: Sequence[AllowedTestSignature], used: set[int], manifest: Manifest) -> list[str]:
    """An entry that allowed nothing is a stale pin: the bundle no longer ships those bytes test-signed."""
    return [f"{manifest.path.name}: ort.allow_test_signed[{i}] allows {entry.file} with sha256 {entry.sha256}, "
            f"but the bundle has no test-signed {entry.file} with those bytes; expected each entry to name a "
            f"test-signed file the bundle ships (remove the entry or correct its sha256)"
            for i, entry in enumerate(entries) if i not in used]


def _signature_message(problems: list[str], rules: set[SigningRule], manifest: Manifest, *,
                       test_signed: Sequence[PeFile] = ()) -> str:
    """The problems, and the one switch that can relax each rule that failed."""
    hints = []
    if test_signed:
        entries = ", ".join(f'{{ file = "{PurePosixPath(pe.label).name}", sha256 = "{source_sha256(pe.file)}" }}'
                            for pe in test_signed)
        hints.append(f"if these are the test-signed binaries of an official ONNX Runtime wheel (onnxruntime-gpu "
                     f"1.18.1's are), allow exactly these bytes under [ort] in {manifest.path.name}: "
                     f"allow_test_signed = [{entries}]")
    if ORT_RULE in rules:
        hints.append(f"if these are binaries of a custom ONNX Runtime build, set `allow_unsigned = true` under [ort] "
                     f"in {manifest.path.name}")
    if VC_REDIST_RULE in rules:
        hints.append("if VC_redist was repackaged by your organisation, set `allow_unsigned = true` under [vc_redist]")
    hints.append("otherwise fetch the official files again")
    return "; ".join(problems) + "; " + ", ".join(hints)


def _signature_record(evidence: SignatureEvidence, pe: PeFile, rule: SigningRule, *,
                      installed: Mapping[str, str], allowed: bool) -> dict[str, Any]:
    """Installed files are named by their install-relative path, so install.ps1 can re-check them in place."""
    return {
        **evidence.to_json(),
        "path": installed.get(pe.bundle_path, pe.label) if pe.label == pe.bundle_path else pe.label,
        "bundle_path": pe.bundle_path,
        "expected_signer": rule.expected_signer,
        "allowed_by_manifest": allowed,
    }


def _install_paths(assembly: Assembly) -> dict[str, str]:
    found: dict[str, str] = {}
    for copy in sorted(assembly.copies, key=lambda c: (c.source, c.target)):
        found.setdefault(copy.source, copy.target)
    return found


def _pe_files(assembly: Assembly, *, work: Path, store: Path | None = None) -> Iterator[PeFile]:
    """DLLs and PYDs as the DLL closure extracted them (once), then the executables."""
    for label, file in payload_binaries(assembly, work, store=store).items():
        bundle_path, _, member = label.partition("!")
        name = f"wheel:{PurePosixPath(bundle_path).name}!{member}" if member else label
        yield PeFile(label=name, bundle_path=bundle_path, file=file)
    for path in sorted(assembly.members):
        if path.lower().endswith(".exe"):
            yield PeFile(label=path, bundle_path=path, file=readable_binary(assembly.members[path], work / "signatures" / "generated" / path))
