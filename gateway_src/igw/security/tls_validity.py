"""The validity period of the certificate the gateway serves: a WARNING when it is expired, not yet
valid or about to expire, and the gauge ``igw_tls_certificate_expiry_timestamp_seconds``.

An expired certificate is still served (as nginx and Envoy do): cert-manager renews by replacing the
files, and a gateway that refused to start on an expired certificate would turn a renewal that is
late by minutes into an outage; clients refuse it anyway, so the operator must hear about it. Before
session s42 nothing did: an expired or not-yet-valid pair was loaded at start and on reload without
a word, and nothing on ``/metrics`` said when the served certificate ran out (cert-manager's own
gauge describes the Secret, not what the gateway loaded - a failing reload keeps the old one).

Each state (expiring within :data:`EXPIRY_WARNING_DAYS` days, expired, not yet valid) is logged once
per certificate: at load, or at the reload check where the served certificate first reaches it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("igw.security.tls")

EXPIRY_WARNING_DAYS: Final = 7
"""A certificate that expires within this many days is logged (once) with a WARNING; the chart's
alert ``IgwServedCertificateExpiringSoon`` uses the same horizon."""

EXPIRY_METRIC: Final = "igw_tls_certificate_expiry_timestamp_seconds"


@dataclass(frozen=True, slots=True)
class CertificateValidity:
    """The leaf certificate's ``notBefore``/``notAfter`` (Unix seconds) and subject, for messages."""

    not_before: float
    not_after: float
    subject: str

    @classmethod
    def from_pem(cls, chain: bytes) -> CertificateValidity | None:
        """The first certificate of a PEM chain (the one OpenSSL serves); ``None`` when it does not parse
        (the pair then failed to load anyway)."""
        try:
            cert = x509.load_pem_x509_certificate(chain)
        except ValueError:
            return None
        return cls(
            not_before=cert.not_valid_before_utc.timestamp(),
            not_after=cert.not_valid_after_utc.timestamp(),
            subject=cert.subject.rfc4514_string() or "(empty subject)",
        )


class _State(enum.IntEnum):
    """How bad the served certificate's validity is; a warning is logged when it gets worse."""

    VALID = 0
    EXPIRING = 1
    NOT_YET_VALID = 2
    EXPIRED = 3


class ValidityWatch:
    """Holds the served certificate's validity and logs a WARNING once per certificate and state."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.served: CertificateValidity | None = None
        self._logged = _State.VALID

    def loaded(self, validity: CertificateValidity | None, source: str) -> None:
        """A certificate (from ``source``, a file name for the message) is now served."""
        self.served = validity
        self._logged = _State.VALID
        self.check(source)

    def check(self, source: str) -> None:
        """Log when the served certificate is in a worse state than already logged for it."""
        cert = self.served
        if cert is None:
            return
        now = self._clock()
        if now >= cert.not_after:
            state = _State.EXPIRED
        elif now < cert.not_before:
            state = _State.NOT_YET_VALID
        elif cert.not_after - now < EXPIRY_WARNING_DAYS * 86400:
            state = _State.EXPIRING
        else:
            state = _State.VALID
        if state <= self._logged:
            return
        self._logged = state
        if state is _State.EXPIRED:
            log.warning(
                "serving an EXPIRED TLS certificate from %s (%s): it expired %.1f days ago; clients "
                "refuse it - renew it (cert-manager: check the Certificate's status)",
                source,
                cert.subject,
                (now - cert.not_after) / 86400,
            )
        elif state is _State.NOT_YET_VALID:
            log.warning(
                "serving a TLS certificate from %s (%s) that is not valid for %.1f more days "
                "(notBefore in the future; is this host's clock right?): clients refuse it",
                source,
                cert.subject,
                (cert.not_before - now) / 86400,
            )
        else:
            log.warning(
                "the TLS certificate served from %s (%s) expires in %.1f days; renew it",
                source,
                cert.subject,
                (cert.not_after - now) / 86400,
            )


class ExpiryCollector(Collector):
    """``igw_tls_certificate_expiry_timestamp_seconds``: the served certificate's ``notAfter``.

    The family is declared on every gateway's page; it has a sample only while TLS termination
    serves a certificate that parsed (``watch`` is ``None`` without ``tlsTermination``)."""

    def __init__(self, watch: ValidityWatch | None) -> None:
        self._watch = watch

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            EXPIRY_METRIC,
            "notAfter (Unix seconds) of the TLS certificate this gateway process serves "
            "(spec.extensions.tlsTermination); absent without TLS termination.",
        )
        served = None if self._watch is None else self._watch.served
        if served is not None:
            family.add_metric([], served.not_after)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The family's name without collecting (the registry's duplicate check)."""
        yield GaugeMetricFamily(EXPIRY_METRIC, "")
