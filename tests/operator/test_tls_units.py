"""The pieces of auto-issued TLS: issuer parsing, the Certificate object, reading cert-manager Secrets."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import trustme
from moto import mock_aws

from igw.cli.main import main
from igw.config.certificate_renewal import parse_go_duration
from igw.errors import IgwToolingError
from igw.operator.dataplane import DataPlaneSettings, desired_objects
from igw.operator.tls import (
    VERIFY_INTERVAL_S,
    AcmImporter,
    IssuedCertificate,
    IssuerRef,
    TlsIssuerError,
    certificate,
    client_hostnames,
    renewal_problem,
    wants_auto_issue,
    without_key_material,
)
from igw.redaction import MASK


@pytest.mark.parametrize("text", ["igw-ca", "Foo/igw-ca", "ClusterIssuer/", "/x"])
def test_a_bad_issuer_is_refused_with_the_expected_form(text: str) -> None:
    with pytest.raises(TlsIssuerError, match="Issuer/NAME or ClusterIssuer/NAME"):
        IssuerRef.parse(text)
    assert issubclass(TlsIssuerError, IgwToolingError)


@pytest.mark.parametrize(
    "text",
    [
        "ClusterIssuer/a/b",
        "Issuer/my issuer",
        "Issuer/LetsEncrypt",
        "Issuer/-x",
        "Issuer/x.",
        "Issuer/" + "a" * 254,
    ],
)
def test_an_issuer_name_that_is_no_kubernetes_object_name_is_refused(text: str) -> None:
    with pytest.raises(TlsIssuerError, match="not a Kubernetes object name"):
        IssuerRef.parse(text)


def test_a_dotted_issuer_name_is_taken() -> None:
    assert IssuerRef.parse("ClusterIssuer/letsencrypt.prod") == IssuerRef("ClusterIssuer", "letsencrypt.prod")


def test_the_cli_refuses_an_issuer_name_with_a_slash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["operator", "--tls-issuer", "ClusterIssuer/a/b", "--no-leader-election"]) == 2
    assert "--tls-issuer 'ClusterIssuer/a/b'" in capsys.readouterr().err


def test_the_cli_refuses_a_bad_issuer_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["operator", "--tls-issuer", "letsencrypt", "--no-leader-election"]) == 2
    assert "--tls-issuer 'letsencrypt'" in capsys.readouterr().err


def test_only_an_empty_tls_asks_for_auto_issue() -> None:
    assert wants_auto_issue({"tls": {}})
    assert wants_auto_issue({"tls": {"acmArn": ""}})
    assert not wants_auto_issue({"tls": {"acmArn": "arn:aws:acm:us-east-1:123456789012:certificate/x"}})
    assert not wants_auto_issue({})


def test_the_certificate_names_the_issuer_and_the_service_names() -> None:
    cert = certificate("chat-gateway", "team", IssuerRef.parse("Issuer/team-ca"), {"name": "chat-gateway"})
    assert cert["spec"]["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": "team-ca"}
    assert cert["spec"]["dnsNames"][-1] == "chat-gateway.team.svc.cluster.local"
    assert cert["spec"]["secretName"] == "chat-gateway-tls"


def test_client_hostnames_come_first_and_a_long_one_is_not_the_common_name() -> None:
    issuer = IssuerRef.parse("Issuer/team-ca")
    spec = {"extensions": {"dataPlane": {"hostnames": ["llm.example.com", "chat-gateway"]}}}
    cert = certificate("chat-gateway", "team", issuer, {"name": "chat-gateway"}, client_hostnames(spec))
    names = cert["spec"]["dnsNames"]
    assert names[:2] == ["llm.example.com", "chat-gateway"]  # no duplicate of the in-cluster short name
    assert len(names) == len(set(names)) == 5
    assert cert["spec"]["commonName"] == "llm.example.com"
    long_name = "a" * 60 + ".example.com"
    cert = certificate("chat-gateway", "team", issuer, {"name": "chat-gateway"}, [long_name])
    assert cert["spec"]["dnsNames"][0] == long_name
    assert cert["spec"]["commonName"] == "chat-gateway"
    assert client_hostnames({}) == []


def test_the_service_waits_for_the_auto_issued_certificate() -> None:
    igwc = {
        "metadata": {"name": "chat", "namespace": "team", "uid": "u"},
        "spec": {"tls": {}, "schedulers": []},
    }
    kinds = [o["kind"] for o in desired_objects(igwc, DataPlaneSettings())]
    assert "Service" not in kinds
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/abc"
    (service,) = [
        o for o in desired_objects(igwc, DataPlaneSettings(), issued_acm_arn=arn) if o["kind"] == "Service"
    ]
    assert service["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-ssl-cert"] == arn


def test_a_secret_splits_into_leaf_chain_and_key() -> None:
    ca = trustme.CA()
    intermediate = ca.create_child_ca()
    leaf = intermediate.issue_cert("chat-gateway.team.svc")
    pems = [blob.bytes() for blob in leaf.cert_chain_pems]
    assert len(pems) == 2
    secret = {
        "data": {
            "tls.crt": base64.b64encode(b"".join(pems)).decode(),
            "tls.key": base64.b64encode(leaf.private_key_pem.bytes()).decode(),
        }
    }
    issued = IssuedCertificate.from_secret(secret)
    assert issued is not None
    assert issued.leaf.strip() == pems[0].decode().strip()
    assert issued.chain.strip() == pems[1].decode().strip()
    assert issued.private_key == leaf.private_key_pem.bytes().decode()
    assert IssuedCertificate.from_secret({"data": {"tls.key": "eA=="}}) is None
    assert IssuedCertificate.from_secret(None) is None
    with pytest.raises(ValueError, match=r"tls\.crt does not start with a PEM certificate"):
        IssuedCertificate.from_secret({"data": {"tls.crt": "bm90IGEgY2VydA==", "tls.key": "eA=="}})


def _secret(crt: bytes, key: bytes) -> dict[str, Any]:
    return {"data": {"tls.crt": base64.b64encode(crt).decode(), "tls.key": base64.b64encode(key).decode()}}


def test_only_certificate_blocks_of_tls_crt_reach_the_chain() -> None:
    """A combined PEM (certificates then their private key in ``tls.crt``) is refused with a message
    that names the problem without quoting the key; before session s43 the key block was sent to ACM
    as part of ``CertificateChain``. Any other non-certificate block is refused by its label, a block
    cut short too; text outside the blocks (``openssl pkcs12``'s ``Bag Attributes``) is left out."""
    leaf = trustme.CA().create_child_ca().issue_cert("chat-gateway.team.svc")
    pems = [blob.bytes() for blob in leaf.cert_chain_pems]
    key = leaf.private_key_pem.bytes()
    for combined in (b"".join(pems) + key, key + b"".join(pems), pems[0] + key + pems[1]):
        with pytest.raises(ValueError, match=r"tls\.crt holds a private key") as refused:
            IssuedCertificate.from_secret(_secret(combined, key))
        assert "".join(key.decode().splitlines()[1:-1])[:40] not in str(refused.value)
    crl = b"-----BEGIN X509 CRL-----\nMIIBAA==\n-----END X509 CRL-----\n"
    with pytest.raises(ValueError, match=r"tls\.crt holds a 'X509 CRL' PEM block"):
        IssuedCertificate.from_secret(_secret(b"".join(pems) + crl, key))
    with pytest.raises(ValueError, match=r"without its END line"):
        IssuedCertificate.from_secret(_secret(pems[0] + pems[1][:200], key))
    bags = b"Bag Attributes\n    friendlyName: chat\nsubject=CN = chat\n"
    issued = IssuedCertificate.from_secret(_secret(bags + pems[0] + bags + pems[1], key))
    assert issued is not None
    assert issued.leaf.strip() == pems[0].decode().strip()
    assert issued.chain.strip() == pems[1].decode().strip()
    with mock_aws():
        acm = boto3.client("acm", region_name="us-west-2")
        arn = AcmImporter(lambda: acm).ensure_imported(issued, arn=None, uid="uid-1", name="chat")
        imported = acm.get_certificate(CertificateArn=arn)
        # moto appends Amazon's own CA certificates to what it was sent
        assert "".join(imported["CertificateChain"].split()).startswith("".join(pems[1].decode().split()))
        assert "Bag" not in imported["CertificateChain"]


def test_an_import_retried_without_a_recorded_arn_reuses_the_owned_certificate() -> None:
    """A status write lost after the first import must not leave a second certificate in ACM."""
    ca = trustme.CA()
    leaf = ca.issue_cert("chat-gateway.team.svc")
    issued = IssuedCertificate(
        leaf=leaf.cert_chain_pems[0].bytes().decode(),
        chain="".join(blob.bytes().decode() for blob in leaf.cert_chain_pems[1:]),
        private_key=leaf.private_key_pem.bytes().decode(),
        issued_at="2026-12-01T00:00:00Z",
    )
    with mock_aws():
        acm = boto3.client("acm", region_name="us-west-2")
        importer = AcmImporter(lambda: acm)
        first = importer.ensure_imported(issued, arn=None, uid="uid-1", name="chat")
        again = importer.ensure_imported(issued, arn=None, uid="uid-1", name="chat")
        other = importer.ensure_imported(issued, arn=None, uid="uid-2", name="other")
        assert again == first
        assert other != first
        listed = acm.list_certificates(Includes={"keyTypes": ["RSA_2048", "EC_prime256v1"]})
        assert len(listed["CertificateSummaryList"]) == 2


def _issued(hostname: str) -> IssuedCertificate:
    leaf = trustme.CA().issue_cert(hostname)
    secret = {
        "data": {
            "tls.crt": base64.b64encode(b"".join(blob.bytes() for blob in leaf.cert_chain_pems)).decode(),
            "tls.key": base64.b64encode(leaf.private_key_pem.bytes()).decode(),
        }
    }
    issued = IssuedCertificate.from_secret(secret)
    assert issued is not None
    return issued


def test_an_unchanged_certificate_asks_acm_again_only_after_the_verify_interval() -> None:
    """Every resync pass (5 s) of every ``tls: {}`` object called GetCertificate and
    ListTagsForCertificate, ACM calls the account and region share under its request-rate quotas. The
    import found holding the Secret's certificate is now taken as is for VERIFY_INTERVAL_S; a renewed
    certificate is re-imported at once, and one deleted by hand is imported again after the interval."""
    now = [1000.0]
    issued = _issued("chat-gateway.team.svc")
    with mock_aws():
        acm = boto3.client("acm", region_name="us-west-2")
        calls: list[str] = []
        acm.meta.events.register("before-call.acm.*", lambda model, **_: calls.append(model.name))
        importer = AcmImporter(lambda: acm, clock=lambda: now[0])
        arn = importer.ensure_imported(issued, arn=None, uid="uid-1", name="chat", cluster="c")
        calls.clear()
        for _ in range(60):  # five minutes of 5 s passes, less one
            assert importer.ensure_imported(issued, arn=arn, uid="uid-1", name="chat", cluster="c") == arn
            now[0] += VERIFY_INTERVAL_S / 60 - 0.01
        assert calls == []

        renewed = _issued("chat-gateway.team.svc")
        assert importer.ensure_imported(renewed, arn=arn, uid="uid-1", name="chat", cluster="c") == arn
        assert "ImportCertificate" in calls
        assert "".join(acm.get_certificate(CertificateArn=arn)["Certificate"].split()) == "".join(
            renewed.leaf.split()
        )

        calls.clear()  # a changed tag (the cluster's identity now known) is not taken from memory
        assert importer.ensure_imported(renewed, arn=arn, uid="uid-1", name="chat", cluster="d") == arn
        assert "AddTagsToCertificate" in calls

        acm.delete_certificate(CertificateArn=arn)  # by hand
        assert importer.ensure_imported(renewed, arn=arn, uid="uid-1", name="chat", cluster="d") == arn
        now[0] += VERIFY_INTERVAL_S
        again = importer.ensure_imported(renewed, arn=arn, uid="uid-1", name="chat", cluster="d")
        assert again != arn
        assert acm.describe_certificate(CertificateArn=again)["Certificate"]["Type"] == "IMPORTED"

        assert importer.delete_owned(again, uid="uid-1") is True  # forgotten with the import
        calls.clear()
        third = importer.ensure_imported(renewed, arn=again, uid="uid-1", name="chat", cluster="d")
        assert third != again
        assert "ImportCertificate" in calls


def _served(days: int) -> IssuedCertificate:
    """A certificate in ACM valid for ``days`` days from 2026-01-01 (only its validity matters)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return IssuedCertificate(
        leaf="", chain="", private_key="", issued_at="", not_before=start, not_after=start + timedelta(days)
    )


def _stuck(**fields: Any) -> dict[str, Any]:
    """A Certificate not Ready (cert-manager renewing and not getting there), with ``fields``:
    ``renewBefore`` / ``renewBeforePercentage`` (spec) or ``renewalTime`` (status)."""
    spec = {key: value for key, value in fields.items() if key.startswith("renewBefore")}
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "False", "message": "renewing"}]}
    if "renewalTime" in fields:
        status["renewalTime"] = fields["renewalTime"]
    return {"metadata": {"generation": 1}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("live", "quiet_day", "reported_day"),
    [
        (_stuck(), 59, 61),  # cert-manager's default: two thirds of 90 days
        (_stuck(renewBefore="1440h"), 29, 31),  # 60 days before expiry
        (_stuck(renewBefore="1440h0m0s"), 29, 31),  # as the API server writes it back
        (_stuck(renewBeforePercentage=50), 44, 46),
        (_stuck(renewBefore="2400h"), 59, 61),  # not shorter than the lifetime: cert-manager ignores it
        # status.renewalTime (what cert-manager computed) wins over the spec
        (_stuck(renewBefore="1440h", renewalTime="2026-01-11T00:00:00Z"), 9, 11),
    ],
)
def test_a_stuck_renewal_is_reported_from_cert_managers_renewal_point(
    live: dict[str, Any], quiet_day: int, reported_day: int
) -> None:
    """``renewal_problem`` assumed cert-manager renews two thirds into the lifetime: a Certificate
    renewed earlier (``renewBefore``, ``renewBeforePercentage``, or the point cert-manager wrote in
    ``status.renewalTime``) sat not Ready for weeks before the object said a word."""
    served = _served(90)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert renewal_problem(live, served, start + timedelta(days=quiet_day)) is None
    problem = renewal_problem(live, served, start + timedelta(days=reported_day))
    assert problem is not None
    assert "Certificate not Ready: renewing" in problem


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("720h", 2592000.0), ("1h30m0s", 5400.0), ("1.5h", 5400.0), ("0", 0.0), ("90m", 5400.0)],
)
def test_go_durations_parse_as_cert_manager_writes_them(text: str, seconds: float) -> None:
    parsed = parse_go_duration(text)
    assert parsed is not None
    assert parsed.total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "1 h", "1d", "10", 10, None])
def test_what_is_no_go_duration_is_not_read_as_one(text: object) -> None:
    assert parse_go_duration(text) is None


def test_key_material_is_cut_from_error_text_and_the_rest_kept() -> None:
    """What goes into status and Events from an ACM error or a Secret's parse: PEM blocks (even cut
    short) and long base64 runs go; ARNs, uids and words stay."""
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/0b9f1b08-e908-4058-985d-d5f13ba79f65"
    pem = (
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n"
        "-----END PRIVATE KEY-----"
    )
    encoded = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JR0hBZ0VBTUJNR0J5cUdTTTQ5QWdFR0NDcUdTTTQ5"
    text = without_key_material(
        f"import of {arn} refused: Value '{encoded}' bad; Value '{pem}'; and {pem[:60]}"
    )
    assert arn in text
    assert "import of" in text
    assert "refused" in text
    assert "PRIVATE KEY" not in text
    assert "MIGHAgEA" not in text
    assert encoded[:20] not in text


def _key_cases() -> list[tuple[str, str]]:
    """``(case, key material)``: every form of key material the operator's error-text masking has cut
    since session s44 (PEM of any label, its newlines real or escaped, cut short; a whole PEM base64
    encoded, with or without text before its BEGIN line; a PEM body on one line, escaped-newline
    lines, 48 characters of it; a key in hex)."""
    ca = trustme.CA()
    key = ca.issue_cert("chat.llm.example.com").private_key_pem.bytes().decode()
    cert = ca.cert_pem.bytes().decode()
    body = "".join(key.strip().splitlines()[1:-1])
    bagged = "Bag Attributes\n    localKeyID: 01 00 00 00\nKey Attributes: <No Attributes>\n" + key
    return [
        ("pem", key),
        ("pem-without-final-newline", key.strip()),
        ("pem-certificate", cert),
        ("pem-escaped-newlines", key.replace("\n", "\\n")),
        ("pem-cut-off", key[:200]),
        ("base64-of-pem", base64.b64encode(key.encode()).decode()),
        ("base64-of-pem-with-bag-attributes", base64.b64encode(bagged.encode()).decode()),
        ("der-body", body),
        ("der-body-escaped-lines", "\\n".join(key.strip().splitlines()[1:-1])),
        ("der-body-48-characters", body[:48]),
        ("hex-key", "9f3a" * 16),
    ]


def _pieces(material: str) -> list[str]:
    """12-character pieces of the material's base64/hex runs: any of them in a text is a leak."""
    runs = [run for line in material.replace("\\n", "\n").splitlines() for run in line.split()]
    return [run[i : i + 12] for run in runs if "-----" not in run for i in range(0, len(run) - 11, 12)]


@pytest.mark.parametrize(("case", "material"), _key_cases(), ids=[case for case, _ in _key_cases()])
def test_every_form_of_key_material_is_cut_from_error_text(case: str, material: str) -> None:
    """Whatever form ACM's error (or a Secret's parse error) quotes the key in, none of it reaches the
    object's status or Events, and the rest of the message (ARN, words, quotes) stays readable."""
    arn = "arn:aws:acm:us-east-1:123456789012:certificate/0b9f1b08-e908-4058-985d-d5f13ba79f65"
    after = "' at 'privateKey' failed to satisfy constraint"
    if case == "pem-cut-off":  # no END line: masked to the end of the text, so it ends the text
        after = ""
    text = without_key_material(f"import of {arn} refused: Value '{material}{after}")
    assert text.startswith(f"import of {arn} refused: Value '")
    assert text.endswith(after)
    assert "PRIVATE KEY" not in text
    assert "CERTIFICATE" not in text
    assert [piece for piece in _pieces(material) if piece in text] == []


def test_key_material_quoted_in_error_text_becomes_one_mask() -> None:
    """The same masking as every log line (:mod:`igw.redaction`), and no stray newline left where a
    PEM block ended (``Value '<redacted>\\n' at``, as the operator's own rule wrote it)."""
    key = trustme.CA().issue_cert("chat.llm.example.com").private_key_pem.bytes().decode()
    assert without_key_material(f"Value '{key}' at 'privateKey'") == f"Value '{MASK}' at 'privateKey'"
    encoded = base64.b64encode(("Bag Attributes\n" + key).encode()).decode()
    assert without_key_material(f"Value '{encoded}' at") == f"Value '{MASK}' at"
