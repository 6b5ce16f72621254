"""A credential in a URL's *path* is masked wherever the URL is quoted (logs, errors, reports).

Some endpoints carry their secret in the path, not the query: an API key (``/key/sk-...``), a
webhook's secret (``/services/T0/B0/<24 characters>``), an ingest key, a JWT. Before session s44
:func:`igw.redaction.redact_url` masked user-info, query and fragment values only, and the log
formatter's :func:`~igw.redaction.redact` let such a URL through whole (``needs_redaction`` too: it
looked for ``@``, ``?`` or ``#`` alone). The rule (:func:`igw.redaction._secret_segment`): a segment
holding a JWT, an ``sk-``/``sk_`` key, or a run of 24+ letters and digits mixing both is masked
whole; the ordinary paths of IdPs, collectors and model servers stay as they are.
"""

from __future__ import annotations

import logging
import random

import pytest

from igw.gateway.redaction import RedactingFormatter
from igw.redaction import MASK, needs_redaction, redact, redact_url
from igw.security.jwks import JwksCache
from igw.security.settings import JwksSettings
from tests.security.helpers import ManualClock

KEY = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"
HOOK = "Xy7Zab8Cde9Fgh0Ijk1Lmn2O"  # 24 characters, as a Slack webhook's secret
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
HEX = "0123456789abcdef0123456789abcdef"  # a 32-digit hex ingest key


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"https://api.example.com/v1/key/{KEY}/x", f"https://api.example.com/v1/key/{MASK}/x"),
        (
            "https://api.example.com/key/sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            f"https://api.example.com/key/{MASK}",
        ),
        (
            f"https://hooks.example.com/services/T0AB12CD3/B0EF45GH6/{HOOK}",
            f"https://hooks.example.com/services/T0AB12CD3/B0EF45GH6/{MASK}",
        ),
        (f"https://otlp.example.com/v1/{JWT}/traces", f"https://otlp.example.com/v1/{MASK}/traces"),
        (
            f"https://otlp.example.com/ingest/{HEX}/v1/traces",
            f"https://otlp.example.com/ingest/{MASK}/v1/traces",
        ),
    ],
)
def test_a_credential_in_the_path_is_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert needs_redaction(f"fetch from {url}")
    assert redact(f"fetch from {url}: 404") == f"fetch from {shown}: 404"


@pytest.mark.parametrize(
    "url",
    [
        "https://gw.example.com:8443/v1/chat/completions",
        "https://idp.example.com/.well-known/jwks.json",
        "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_AbCdEfGhI/.well-known/jwks.json",
        "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/discovery/v2.0/keys",
        "https://dev-1.okta.com/oauth2/aus1fmjhw9zJQzLM55d7/v1/keys",
        "https://kc.example.com/realms/my-realm/protocol/openid-connect/certs",
        "http://10.0.3.7:8000/v1/models/Meta-Llama-3.1-70B-Instruct",
        "http://otel-collector.observability.svc:4318/v1/traces",
        "https://docs.example.com/sk-learn-docs/ratelimitsandquotasandtokenbudgets",
    ],
)
def test_ordinary_paths_are_kept(url: str) -> None:
    assert redact_url(url) == url
    assert redact(f"fetch from {url} failed") == f"fetch from {url} failed"


def test_a_refused_jwks_uri_with_a_key_in_its_path_is_quoted_masked() -> None:
    with pytest.raises(ValueError, match=r"remoteJWKS\.uri") as info:
        JwksCache(
            jwks_uri=f"http://idp.example.com/keys/{KEY}/jwks.json",
            issuer="https://idp.example.com",
            settings=JwksSettings(),
            algorithms=("RS256",),
            clock=ManualClock(),
            rng=random.Random(0),
        )
    assert KEY not in str(info.value)
    assert f"http://idp.example.com/keys/{MASK}/jwks.json" in str(info.value)


def test_the_log_formatter_masks_an_endpoint_s_path_key() -> None:
    record = logging.LogRecord(
        "igw.gateway.trace_export", logging.WARNING, __file__, 1,
        "OTLP export to %s failed: %s", (f"https://otlp.example.com/ingest/{HEX}/v1/traces", "503"), None,
    )  # fmt: skip
    line = RedactingFormatter().format(record)
    assert HEX not in line
    assert f"https://otlp.example.com/ingest/{MASK}/v1/traces failed: 503" in line
