"""Build provenance (issue 41): the in-toto statements `build` writes, `sign` signs, `verify --trust` checks,
`publish` pushes and `reproduce` compares, for real.

Every claim is checked by code that is not ours where it exists: the statements are parsed with the in-toto
reference library (`in-toto-attestation`: the Statement wrapper's own validation, and the SLSA Provenance v1
protobuf, whose JSON parser refuses any field the predicate does not define), the DSSE signatures are verified
with `securesystemslib`'s DSSE envelope verification, the referrers are read from a real registry (Debian's
`docker-registry`, distribution 2.8, which has no referrers API) with plain HTTP requests. The bundles are the
quickstart builds; the PKI is made in the test (tests/fixtures/signing_pki.py).
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import json
import sys
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from fixtures.cli import MANIFESTS, run_cli
from fixtures.registry import RunningRegistry, start_registry
from fixtures.signing_pki import Pki
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError as SslibVerificationError
from securesystemslib.signer import SSlibKey

pytestmark = pytest.mark.integration

WIN = "quickstart-win-1.0.0-win_amd64"
LINUX = "quickstart-linux-1.0.0-linux_x86_64"
STATEMENT, ENVELOPE = "provenance.intoto.json", "provenance.intoto.dsse.json"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pki]:
    folder = tmp_path_factory.mktemp("pki")
    return {"good": Pki.make(folder, "good"), "other": Pki.make(folder, "other")}


@pytest.fixture(scope="module")
def win_zip(bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("win")
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(out), str(MANIFESTS / "quickstart-win.toml"))
    return out / f"{WIN}.zip"


@pytest.fixture(scope="module")
def signed_win(win_zip: Path, pki: dict[str, Pki], bundler_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("signed")
    sign(win_zip, out, pki["good"], bundler_cache)
    return out / win_zip.name


def sign(bundle: Path, out: Path, pki: Pki, cache: Path, *, check: bool = True):
    return run_cli("sign", "--cache", str(cache), "-q", str(bundle), "-o", str(out), "--cert", str(pki.cert),
                   "--key", str(pki.key), "--chain", str(pki.chain), check=check)


def verify(zip_path: Path, cache: Path, *args: str) -> tuple[int, dict]:
    proc = run_cli("verify", "--cache", str(cache), "--json", *args, str(zip_path), check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def member(zip_path: Path, name: str) -> bytes:
    with zipfile.ZipFile(zip_path) as archive:
        return archive.read(f"{zip_path.name.removesuffix('.zip')}/{name}")


def parse_statement(data: bytes) -> tuple[Statement, provenance_pb2.Provenance]:
    """The reference library's reading: Statement v1 validated, the predicate parsed strictly as SLSA v1."""
    statement = Statement.copy_from_pb(json_format.Parse(data, statement_pb2.Statement()))
    statement.validate()
    assert statement.pb.predicate_type == "https://slsa.dev/provenance/v1"
    predicate = json_format.ParseDict(json.loads(data)["predicate"], provenance_pb2.Provenance())
    return statement, predicate


def sslib_key(cert_path: Path) -> SSlibKey:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    keyid = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    return SSlibKey.from_crypto(cert.public_key(), keyid=keyid, scheme="rsa-pkcs1v15-sha256")


def beside(zip_path: Path) -> list[dict]:
    return [json.loads(line) for line in zip_path.with_name(zip_path.name + ".intoto.jsonl").read_bytes().splitlines()]


def sums_of(zip_path: Path) -> dict[str, str]:
    return {line[66:]: line[:64] for line in member(zip_path, "SHA256SUMS").decode().splitlines()}


# -- build ----------------------------------------------------------------------------------------------------


def test_the_bundle_statement_names_every_member_and_every_input(win_zip: Path) -> None:
    data = member(win_zip, STATEMENT)
    statement, predicate = parse_statement(data)
    sums = sums_of(win_zip)
    assert STATEMENT in sums  # the statement is a member, covered by SHA256SUMS
    subjects = {s.name: s.digest["sha256"] for s in statement.pb.subject}
    assert subjects == {name: digest for name, digest in sums.items() if name != STATEMENT}
    assert "SHA256SUMS" not in subjects and not any(name.endswith(".zip") for name in subjects)

    definition = predicate.build_definition
    assert definition.build_type.startswith("urn:ort-bundler:")
    raw = json.loads(data)["predicate"]["buildDefinition"]
    record = json.loads(member(win_zip, "bundle.json"))
    assert raw["externalParameters"]["manifest"] == record["manifest"]
    assert raw["externalParameters"]["lock"] == tomllib.loads(member(win_zip, "lock.toml").decode())
    lock = raw["externalParameters"]["lock"]
    dependencies = {d.name: (d.digest["sha256"], d.uri) for d in definition.resolved_dependencies}
    for wheel in lock["wheel"]:  # every wheel the lock pins, by digest and package URL
        assert dependencies[f"lock:{wheel['name']}"] == (wheel["sha256"], f"pkg:pypi/{wheel['name']}@{wheel['version']}")
    manifest = record["manifest"]
    assert dependencies["ort.capi"][0] == manifest["ort"]["capi"]["sha256"]
    assert dependencies["models[0]"][0] == manifest["models"][0]["sha256"]
    assert dependencies["launch.script"] == (manifest["launch"]["script"]["sha256"], "")  # a local path: no URI
    installer = lock["installer"]
    assert dependencies["lock-installer:installer"] == (installer["sha256"], f"pkg:pypi/installer@{installer['version']}")
    assert len(dependencies) == len(lock["wheel"]) + 4  # nothing else: the wheels, the installer, capi, model, script
    assert not any(name.startswith("gate:") for name in dependencies)  # the build machine's gate wheels: not inputs
    assert raw["internalParameters"] == {"source_date_epoch": manifest["bundle"]["source_date_epoch"]}
    run = json.loads(data)["predicate"]["runDetails"]
    assert run == {"builder": {"id": "urn:ort-bundler:builder:reproducible", "version": {"ort-bundler": "0.1.0"}}}
    # Nothing of the machine that built it: no folder, no user name.
    assert str(win_zip.parent).encode() not in data and str(MANIFESTS).encode() not in data
    assert f'"{getpass.getuser()}'.encode() not in data


def test_the_builder_statement_beside_the_zip_names_the_zip_the_user_and_the_times(win_zip: Path) -> None:
    (line,) = beside(win_zip)
    assert line["payloadType"] == "application/vnd.in-toto+json" and line["signatures"] == []  # signed by `sign`
    payload = base64.b64decode(line["payload"])
    statement, predicate = parse_statement(payload)
    (subject,) = statement.pb.subject
    assert subject.name == win_zip.name
    assert subject.digest["sha256"] == hashlib.sha256(win_zip.read_bytes()).hexdigest()
    assert predicate.run_details.builder.id.endswith("@" + __import__("socket").gethostname())
    assert getpass.getuser() in predicate.run_details.builder.id
    metadata = predicate.run_details.metadata
    assert metadata.invocation_id and metadata.started_on.ToSeconds() <= metadata.finished_on.ToSeconds()
    (byproduct,) = predicate.run_details.byproducts
    assert byproduct.digest["sha256"] == hashlib.sha256(member(win_zip, STATEMENT)).hexdigest()
    inner = json.loads(member(win_zip, STATEMENT))["predicate"]["buildDefinition"]
    assert json.loads(payload)["predicate"]["buildDefinition"] == inner


def test_a_reused_build_gets_a_fresh_builder_statement_and_the_same_bundle(win_zip: Path, bundler_cache: Path,
                                                                           tmp_path: Path) -> None:
    proc = run_cli("build", "--json", "--cache", str(bundler_cache), "-o", str(tmp_path),
                   str(MANIFESTS / "quickstart-win.toml"))
    again = tmp_path / win_zip.name
    assert json.loads(proc.stdout)["reused"] and again.read_bytes() == win_zip.read_bytes()
    (first,), (second,) = beside(win_zip), beside(again)
    first_run = json.loads(base64.b64decode(first["payload"]))["predicate"]["runDetails"]["metadata"]
    second_run = json.loads(base64.b64decode(second["payload"]))["predicate"]["runDetails"]["metadata"]
    assert first_run["invocationId"] != second_run["invocationId"]


# -- sign and verify ------------------------------------------------------------------------------------------


def test_sign_makes_dsse_envelopes_that_securesystemslib_verifies(signed_win: Path, win_zip: Path,
                                                                   pki: dict[str, Pki], bundler_cache: Path) -> None:
    key, other = sslib_key(pki["good"].cert), sslib_key(pki["other"].cert)
    envelope = Envelope.from_dict(json.loads(member(signed_win, ENVELOPE)))
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert list(envelope.verify([key], 1)) == [key.keyid]
    with pytest.raises(SslibVerificationError):
        envelope.verify([other], 1)
    # The statement is the unsigned build's, unchanged: its subjects are the unsigned members' digests.
    assert envelope.payload == member(signed_win, STATEMENT) == member(win_zip, STATEMENT)
    assert member(signed_win, "install.ps1") != member(win_zip, "install.ps1")
    (line,) = beside(signed_win)
    outer = Envelope.from_dict(line)
    assert list(outer.verify([key], 1)) == [key.keyid]
    assert outer.payload == base64.b64decode(beside(win_zip)[0]["payload"])
    assert ENVELOPE in sums_of(signed_win)  # covered by SHA256SUMS.p7s too
    record = json.loads(member(signed_win, "signature.json"))
    assert record["provenance"] == {"statement": STATEMENT, "envelope": ENVELOPE}

    code, report = verify(signed_win, bundler_cache, "--trust", str(pki["good"].root))
    assert code == 0, report
    assert report["provenance"] == {"statement": STATEMENT, "envelope": ENVELOPE, "beside": f"{WIN}.zip.intoto.jsonl",
                                    "ok": True, "notes": [], "problems": []}
    code, report = verify(signed_win, bundler_cache, "--trust", str(pki["other"].root))
    assert code == 8


def _rewrite(source: Path, dest: Path, name: str, edit, *, fix_sums: bool) -> Path:
    """A copy of the bundle with one member edited (and, with `fix_sums`, its SHA256SUMS line rewritten, as an
    attacker with write access would)."""
    top = source.name.removesuffix(".zip")
    with zipfile.ZipFile(source) as archive:
        files = {i.filename: (i, archive.read(i)) for i in archive.infolist()}
    info, data = files[f"{top}/{name}"]
    changed = edit(data)
    files[f"{top}/{name}"] = (info, changed)
    if fix_sums:
        sums_info, sums = files[f"{top}/SHA256SUMS"]
        old, new = (hashlib.sha256(d).hexdigest().encode() for d in (data, changed))
        files[f"{top}/SHA256SUMS"] = (sums_info, sums.replace(old, new))
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest / source.name, "w", zipfile.ZIP_DEFLATED) as out:
        for entry, content in files.values():
            out.writestr(entry, content)
    return dest / source.name


def _flip(data: bytes, at: int | None = None) -> bytes:
    changed = bytearray(data)
    changed[len(changed) // 2 if at is None else at] ^= 0x01
    return bytes(changed)


def _copy_beside(source: Path, dest: Path, data: bytes | None = None) -> None:
    """The statement beside `source`, beside `dest` (as its file name), optionally replaced by `data`."""
    original = source.with_name(source.name + ".intoto.jsonl").read_bytes()
    dest.with_name(dest.name + ".intoto.jsonl").write_bytes(original if data is None else data)


def _payload_edit(line: bytes, edit) -> bytes:
    envelope = json.loads(line)
    envelope["payload"] = base64.b64encode(edit(base64.b64decode(envelope["payload"]))).decode()
    return json.dumps(envelope).encode() + b"\n"


CASES = {
    # name: (member to edit or None for the beside file, edit, rewrite SHA256SUMS, expected words in the findings)
    "statement byte": (STATEMENT, _flip, False, '"altered": ["provenance.intoto.json"]'),
    "statement byte with its sum rewritten": (STATEMENT, _flip, True, "provenance.intoto.dsse.json signs other bytes"),
    "envelope signature": (ENVELOPE, lambda d: d.replace(b'"sig":"', b'"sig":"AAAA', 1), False,
                           '"altered": ["provenance.intoto.dsse.json"]'),
    "a bundle member": ("payload/ort_bundle/selfcheck/selfcheck.py", _flip, True, "subject payload/ort_bundle/selfcheck/selfcheck.py has"),
    "beside payload byte": (None, lambda line: _payload_edit(line, lambda p: p.replace(b"startedOn", b"startedOm")),
                            False, "the signature does not match its payload"),
    "beside signature removed": (None, lambda line: line.replace(json.dumps(json.loads(line)["signatures"],
                                                                            separators=(",", ":")).encode(), b"[]"),
                                 False, "is not signed (its signature list is empty)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_trust_refuses_any_changed_byte_of_a_statement_or_the_bundle(
        signed_win: Path, pki: dict[str, Pki], bundler_cache: Path, tmp_path: Path, case: str) -> None:
    name, edit, fix_sums, expected = CASES[case]
    if name is None:
        tampered = tmp_path / signed_win.name
        tampered.write_bytes(signed_win.read_bytes())
        (line,) = signed_win.with_name(signed_win.name + ".intoto.jsonl").read_bytes().splitlines()
        changed = edit(line)
        assert changed != line
        _copy_beside(signed_win, tampered, changed)
    else:
        tampered = _rewrite(signed_win, tmp_path, name, edit, fix_sums=fix_sums)
        _copy_beside(signed_win, tampered)
    code, report = verify(tampered, bundler_cache, "--trust", str(pki["good"].root))
    assert code == 8 and not report["ok"]
    findings = json.dumps(report)
    assert expected in findings, findings[:3000]


def test_a_builder_statement_of_another_build_is_refused(signed_win: Path, win_zip: Path, pki: dict[str, Pki],
                                                         bundler_cache: Path, tmp_path: Path) -> None:
    """A signed statement copied beside another signed zip: its signature holds, its subject does not."""
    linux_dir = tmp_path / "linux"
    run_cli("build", "-q", "--cache", str(bundler_cache), "-o", str(linux_dir), str(MANIFESTS / "quickstart-linux.toml"))
    signed_linux = tmp_path / "signed-linux"
    sign(linux_dir / f"{LINUX}.zip", signed_linux, pki["good"], bundler_cache)
    target = signed_linux / f"{LINUX}.zip"
    _copy_beside(signed_win, target)
    code, report = verify(target, bundler_cache, "--trust", str(pki["good"].root))
    assert code == 8
    problems = " ".join(report["provenance"]["problems"])
    assert "its subject is" in problems and "expected the unsigned build" in problems
    assert "names another provenance.intoto.json" in problems


@pytest.mark.parametrize("stale", ["another zip", "not an envelope"])
def test_sign_refuses_a_statement_beside_the_zip_that_names_another_zip(win_zip: Path, pki: dict[str, Pki],
                                                                        bundler_cache: Path, tmp_path: Path,
                                                                        stale: str) -> None:
    copy = tmp_path / "in" / win_zip.name
    copy.parent.mkdir()
    copy.write_bytes(win_zip.read_bytes())
    line = beside(win_zip)[0]
    statement = json.loads(base64.b64decode(line["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    line["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    _copy_beside(win_zip, copy, json.dumps(line).encode() + b"\n" if stale == "another zip" else b"{not json\n")
    proc = sign(copy, tmp_path / "out", pki["good"], bundler_cache, check=False)
    expected = "describes another build" if stale == "another zip" else "is not a JSON DSSE envelope"
    assert proc.returncode == 8 and expected in proc.stderr and f"{win_zip.name}.intoto.jsonl line 1" in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing written


def test_with_an_external_signer_no_envelope_is_made_and_verify_says_so(win_zip: Path, pki: dict[str, Pki],
                                                                        bundler_cache: Path, tmp_path: Path) -> None:
    from integration.real_wheels.test_sign import EXTERNAL_SIGNER

    script = tmp_path / "org-signer.py"
    script.write_text(EXTERNAL_SIGNER, encoding="utf-8")
    good = pki["good"]
    command = f"{sys.executable} {script} {good.cert} {good.key} {good.chain}"
    proc = run_cli("sign", "--cache", str(bundler_cache), str(win_zip), "-o", str(tmp_path / "out"), "--signer", command)
    assert "no DSSE envelope with --signer" in proc.stderr
    signed = tmp_path / "out" / win_zip.name
    with zipfile.ZipFile(signed) as archive:
        assert f"{WIN}/{ENVELOPE}" not in archive.namelist()
    assert beside(signed)[0]["signatures"] == []
    code, report = verify(signed, bundler_cache, "--trust", str(good.root))
    assert code == 0, report
    notes = " ".join(report["provenance"]["notes"])
    assert "has no DSSE envelope" in notes and "is not signed (the bundle was signed with --signer)" in notes


# -- publish and reproduce ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    running = start_registry(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


def _get(registry: RunningRegistry, path: str, accept: str) -> bytes:
    request = urllib.request.Request(f"http://{registry.host}{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


def test_publish_pushes_the_statements_as_referrers_under_the_tag_scheme(signed_win: Path, registry: RunningRegistry,
                                                                         pki: dict[str, Pki], bundler_cache: Path) -> None:
    url = registry.url("team/provenance")
    proc = run_cli("publish", "--json", "--cache", str(bundler_cache), str(signed_win), f"{url}:1.0.0-signed")
    published = json.loads(proc.stdout)
    release = published["digest"]
    tag = "sha256-" + release.removeprefix("sha256:")
    assert published["attestations"] == f"{url}:{tag}"
    index = json.loads(_get(registry, f"/v2/team/provenance/manifests/{tag}", "application/vnd.oci.image.index.v1+json"))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    (entry,) = index["manifests"]
    assert entry["artifactType"] == "application/vnd.in-toto+json"
    referrer_bytes = _get(registry, f"/v2/team/provenance/manifests/{entry['digest']}",
                          "application/vnd.oci.image.manifest.v1+json")
    assert "sha256:" + hashlib.sha256(referrer_bytes).hexdigest() == entry["digest"]
    referrer = json.loads(referrer_bytes)
    assert referrer["subject"]["digest"] == release
    blobs = {layer["annotations"]["org.opencontainers.image.title"]:
             _get(registry, f"/v2/team/provenance/blobs/{layer['digest']}", "*/*") for layer in referrer["layers"]}
    assert blobs == {f"{WIN}.{ENVELOPE}": member(signed_win, ENVELOPE),
                     f"{WIN}.zip.intoto.jsonl": signed_win.with_name(signed_win.name + ".intoto.jsonl").read_bytes()}
    key = sslib_key(pki["good"].cert)
    assert Envelope.from_dict(json.loads(blobs[f"{WIN}.{ENVELOPE}"])).verify([key], 1)
    # Publishing again (the same release) lists the referrer once.
    run_cli("publish", "-q", "--cache", str(bundler_cache), str(signed_win), f"{url}:1.0.0-signed")
    again = json.loads(_get(registry, f"/v2/team/provenance/manifests/{tag}", "application/vnd.oci.image.index.v1+json"))
    assert again == index


def test_publish_refuses_a_statement_of_another_build_before_pushing(win_zip: Path, registry: RunningRegistry,
                                                                     bundler_cache: Path, tmp_path: Path) -> None:
    copy = tmp_path / win_zip.name
    copy.write_bytes(win_zip.read_bytes())
    line = beside(win_zip)[0]
    statement = json.loads(base64.b64decode(line["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "1" * 64
    line["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    _copy_beside(win_zip, copy, json.dumps(line).encode() + b"\n")
    url = registry.url("team/stale")
    proc = run_cli("publish", "--cache", str(bundler_cache), str(copy), f"{url}:1.0.0", check=False)
    assert proc.returncode == 8 and "describes another build" in proc.stderr
    request = urllib.request.Request(f"http://{registry.host}/v2/team/stale/tags/list")
    with pytest.raises(urllib.error.HTTPError):  # nothing pushed: the repository does not exist
        urllib.request.urlopen(request, timeout=30)


def test_reproduce_names_a_provenance_that_differs(win_zip: Path, bundler_cache: Path, tmp_path: Path) -> None:
    def edit(data: bytes) -> bytes:
        statement = json.loads(data)
        statement["predicate"]["runDetails"]["builder"]["id"] = "urn:example:another-builder"
        return (json.dumps(statement, indent=2, sort_keys=True) + "\n").encode()

    changed = _rewrite(win_zip, tmp_path, STATEMENT, edit, fix_sums=True)
    proc = run_cli("reproduce", "--json", "--cache", str(bundler_cache), str(changed), check=False)
    assert proc.returncode == 8, proc.stderr
    reasons = {d["member"]: d["reason"] for d in json.loads(proc.stdout)["differences"]}
    assert reasons.pop(STATEMENT) == "the build provenance differs: runDetails (the builder or its version)"
    assert set(reasons) == {"SHA256SUMS"}


# -- the pieces, without a build --------------------------------------------------------------------------------


def test_pae_is_the_dsse_specification_s_encoding() -> None:
    from bundler.signing.dsse import pae

    # The example in the DSSE protocol specification (protocol.md, "Test cases").
    assert pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_an_envelope_by_another_key_or_with_a_changed_payload_is_refused(pki: dict[str, Pki]) -> None:
    from bundler.signing import dsse
    from bundler.signing.cms import SignatureProblem
    from bundler.signing.credentials import load_pem_identity

    good = load_pem_identity(pki["good"].cert, pki["good"].key)
    other = load_pem_identity(pki["other"].cert, pki["other"].key)
    payload = b'{"_type": "https://in-toto.io/Statement/v1"}'
    from bundler.assembly.provenance import envelope_line

    line = envelope_line(payload, [dsse.signature(payload, good)])
    assert Envelope.from_dict(json.loads(line)).verify([sslib_key(pki["good"].cert)], 1)
    dsse.check(dsse.parse(line, what="it"), good.cert, what="it")  # ours agrees with securesystemslib
    with pytest.raises(SignatureProblem, match="signed by key"):
        dsse.check(dsse.parse(line, what="it"), other.cert, what="it")
    changed = envelope_line(payload + b" ", [dsse.signature(payload, good)])
    with pytest.raises(SignatureProblem, match="does not match its payload"):
        dsse.check(dsse.parse(changed, what="it"), good.cert, what="it")
    with pytest.raises(SignatureProblem, match="payloadType"):
        dsse.parse(line.replace(b"in-toto+json", b"other+json"), what="it")
    with pytest.raises(SignatureProblem, match="not signed"):
        dsse.check(dsse.parse(envelope_line(payload, []), what="it"), good.cert, what="it")


def test_the_report_page_reads_the_member_build_writes() -> None:
    from bundler.assembly.provenance import PROVENANCE_MEMBER
    from bundler.commands import report

    assert report.PROVENANCE_MEMBER == PROVENANCE_MEMBER == STATEMENT
