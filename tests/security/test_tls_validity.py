"""The served certificate's validity: a WARNING once per certificate and state (expiring within 7
days, expired, not yet valid) at load and on reload, and ``igw_tls_certificate_expiry_timestamp_seconds``.
Before session s42 an expired or not-yet-valid certificate was loaded at start and on reload without a
word, and no metric said when the served certificate ran out."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import pytest
import trustme
from prometheus_client import CollectorRegistry, generate_latest

from igw.security.tls import CertificateReloader, build_server_ssl_context, build_server_tls

DAY = datetime.timedelta(days=1)
METRIC = "igw_tls_certificate_expiry_timestamp_seconds"


def _write(ca: trustme.CA, folder: Path, not_before: datetime.datetime, not_after: datetime.datetime) -> None:
    cert = ca.issue_cert("127.0.0.1", not_before=not_before, not_after=not_after)
    (folder / "tls.crt").write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    (folder / "tls.key").write_bytes(cert.private_key_pem.bytes())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "igw.security.tls"
    ]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def test_an_expired_certificate_is_served_with_one_warning_and_its_expiry_on_metrics(
    tmp_path: Path, ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    """Served (as nginx and Envoy do: a renewal late by minutes must not become an outage), but loudly:
    one WARNING at start, none at each later check, and the gauge carries its notAfter."""
    expired_at = _now() - DAY
    _write(ca, tmp_path, expired_at - 30 * DAY, expired_at)
    registry = CollectorRegistry()
    caplog.set_level(logging.INFO, logger="igw.security.tls")
    built = build_server_tls(
        {"tlsTermination": {"certFile": str(tmp_path / "tls.crt"), "keyFile": str(tmp_path / "tls.key")}},
        registry=registry,
    )
    assert built is not None
    _, reloader = built
    for _ in range(3):
        assert not reloader.check_now()
    (warning,) = _warnings(caplog)
    assert "serving an EXPIRED TLS certificate from" in warning
    assert "expired 1.0 days ago" in warning
    assert registry.get_sample_value(METRIC) == expired_at.timestamp()


def test_the_expiry_gauge_is_declared_without_a_sample_when_tls_termination_is_off() -> None:
    registry = CollectorRegistry()
    assert build_server_tls({}, registry=registry) is None
    assert registry.get_sample_value(METRIC) is None
    assert f"# TYPE {METRIC} gauge" in generate_latest(registry).decode()


def test_a_served_certificate_warns_once_as_it_nears_its_expiry_and_once_when_it_passes_it(
    tmp_path: Path, ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    """The served certificate crosses the 7-day horizon and then its notAfter while the files stay the
    same (a renewal that never came): one WARNING for each, not one per check; a renewed certificate
    starts afresh and moves the gauge."""
    start = _now()
    not_after = start + 30 * DAY
    _write(ca, tmp_path, start - DAY, not_after)
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    clock = [start.timestamp()]
    context = build_server_ssl_context(cert_file=cert_file, key_file=key_file)
    caplog.set_level(logging.INFO, logger="igw.security.tls")
    reloader = CertificateReloader(
        context=context, cert_file=cert_file, key_file=key_file, interval_s=1, clock=lambda: clock[0]
    )
    assert not reloader.check_now()
    assert _warnings(caplog) == []
    clock[0] = (not_after - 3 * DAY).timestamp()
    for _ in range(3):
        reloader.check_now()
    (expiring,) = _warnings(caplog)
    assert "expires in 3.0 days; renew it" in expiring
    clock[0] = (not_after + DAY).timestamp()
    for _ in range(3):
        reloader.check_now()
    assert len(_warnings(caplog)) == 2
    assert "serving an EXPIRED TLS certificate" in _warnings(caplog)[1]
    renewed_until = start + 90 * DAY
    _write(ca, tmp_path, start, renewed_until)
    assert reloader.check_now()
    assert len(_warnings(caplog)) == 2
    assert reloader.validity.served is not None
    assert reloader.validity.served.not_after == renewed_until.timestamp()


def test_a_renewed_certificate_not_valid_yet_is_loaded_with_a_warning(
    tmp_path: Path, ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    """notBefore in the future (clock skew between the issuer and this host): clients refuse it."""
    start = _now()
    _write(ca, tmp_path, start - DAY, start + 60 * DAY)
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    registry = CollectorRegistry()
    caplog.set_level(logging.INFO, logger="igw.security.tls")
    built = build_server_tls(
        {"tlsTermination": {"certFile": str(cert_file), "keyFile": str(key_file)}}, registry=registry
    )
    assert built is not None
    _, reloader = built
    _write(ca, tmp_path, start + 2 * DAY, start + 90 * DAY)
    assert reloader.check_now()
    (warning,) = _warnings(caplog)
    assert "that is not valid for" in warning
    assert "notBefore in the future" in warning
    assert registry.get_sample_value(METRIC) == (start + 90 * DAY).timestamp()
