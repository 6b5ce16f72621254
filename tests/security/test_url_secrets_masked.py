"""A credential in a configured URL (user-info, a query or fragment value) never reaches a log line,
an error, a readiness detail or a validation message: each path that quotes a JWKS, OIDC, OTLP,
backend or Redis URL masks it with :func:`igw.redaction.redact_url` and keeps host and path.

Before session s42 only user-info was masked: ``JWKS loaded from https://idp/jwks?api_key=...`` was
logged whole at INFO, and ``igw validate`` (the operator's ``Accepted`` condition and Events use the
same messages) quoted ``?sig=`` values of a refused URI."""

from __future__ import annotations

import logging
import random
import ssl
from pathlib import Path

import pytest

from igw.cli.main import main
from igw.gateway.redaction import RedactingFormatter
from igw.redaction import MASK, redact, redact_url
from igw.security.jwks import JwksCache
from igw.security.settings import JwksSettings
from tests.security.helpers import JwksServer, ManualClock

SECRET = "Zm9vYmFyYmF6cXV4"
"""A credential's value: short and letters-only enough that only its place in a URL gives it away."""


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"https://idp.example.com/jwks?api_key={SECRET}", f"https://idp.example.com/jwks?api_key={MASK}"),
        (
            f"https://acct.blob.core.windows.net/k/jwks.json?sv=2024&sig={SECRET}",
            f"https://acct.blob.core.windows.net/k/jwks.json?sv={MASK}&sig={MASK}",
        ),
        (
            f"https://b.s3.amazonaws.com/jwks?X-Amz-Credential=AKIA%2F1&X-Amz-Signature={SECRET}",
            f"https://b.s3.amazonaws.com/jwks?X-Amz-Credential={MASK}&X-Amz-Signature={MASK}",
        ),
        (
            f"https://idp.example.com/cb#access_token={SECRET}",
            f"https://idp.example.com/cb#access_token={MASK}",
        ),
        (f"https://idp.example.com/jwks?{SECRET}", f"https://idp.example.com/jwks?{MASK}"),
        (f"rediss://default:{SECRET}@cache:6379/0", f"rediss://{MASK}@cache:6379/0"),
        # an unencoded "@" in the password: the user-info runs to the last "@" before the host
        (f"redis://u:p@{SECRET}@cache:6379", f"redis://{MASK}@cache:6379"),
        (f"redis://cache:6379/0?password={SECRET}", f"redis://cache:6379/0?password={MASK}"),
        ("https://idp.example.com/.well-known/jwks.json", "https://idp.example.com/.well-known/jwks.json"),
        # an anchor is no credential: a documentation link stays whole
        ("https://docs.example.com/security.md#jwt", "https://docs.example.com/security.md#jwt"),
    ],
)
def test_redact_url_masks_user_info_query_and_fragment_values_and_keeps_host_and_path(
    url: str, shown: str
) -> None:
    assert redact_url(url) == shown
    assert redact(f"fetch from {url} failed") == f"fetch from {shown} failed"


async def refreshed_once(
    jwks_uri: str,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    caplog: pytest.LogCaptureFixture,
    *,
    algorithms: tuple[str, ...],
    oidc_discovery: bool = False,
) -> JwksCache:
    """A :class:`JwksCache` of ``jwks_uri`` for ``jwks_server``'s issuer, refreshed once and closed,
    its ``igw.security.jwks`` log at INFO captured in ``caplog``: what each test below reads."""
    cache = JwksCache(
        jwks_uri=jwks_uri,
        issuer=jwks_server.issuer,
        settings=JwksSettings(),
        algorithms=algorithms,
        oidc_discovery=oidc_discovery,
        clock=ManualClock(),
        rng=random.Random(0),
        ssl_context=client_ssl,
    )
    caplog.set_level(logging.INFO, logger="igw.security.jwks")
    try:
        await cache.refresh()
    finally:
        await cache.close()
    return cache


async def test_jwks_loaded_line_masks_the_uri_query(
    jwks_server: JwksServer, client_ssl: ssl.SSLContext, caplog: pytest.LogCaptureFixture
) -> None:
    cache = await refreshed_once(
        f"{jwks_server.jwks_uri}?api_key={SECRET}",
        jwks_server,
        client_ssl,
        caplog,
        algorithms=("RS256", "ES256", "EdDSA"),
    )
    assert cache.ready()
    loaded = [r for r in caplog.records if "JWKS loaded from" in r.getMessage()]
    assert loaded, caplog.text
    # masked in the record itself, for any handler, and by igw's formatter
    assert loaded[0].getMessage().startswith(f"JWKS loaded from {jwks_server.jwks_uri}?api_key={MASK}")
    assert SECRET not in RedactingFormatter().format(loaded[0])


async def test_a_discovered_non_https_jwks_uri_is_reported_without_its_query(
    jwks_server: JwksServer, client_ssl: ssl.SSLContext, caplog: pytest.LogCaptureFixture
) -> None:
    jwks_server.discovery = {
        "issuer": jwks_server.issuer,
        "jwks_uri": f"http://127.0.0.1:{jwks_server.port}/jwks?sig={SECRET}",
    }
    await refreshed_once(
        jwks_server.jwks_uri, jwks_server, client_ssl, caplog, algorithms=("RS256",), oidc_discovery=True
    )
    failed = [r.getMessage() for r in caplog.records if "OIDC discovery at" in r.getMessage()]
    assert failed, caplog.text
    assert f"/jwks?sig={MASK}" in failed[0]
    assert SECRET not in failed[0]


def test_a_refused_configured_jwks_uri_is_quoted_without_its_query() -> None:
    with pytest.raises(ValueError, match=r"remoteJWKS\.uri") as info:
        JwksCache(
            jwks_uri=f"http://idp.example.com/jwks?api_key={SECRET}",
            issuer="https://idp.example.com",
            settings=JwksSettings(),
            algorithms=("RS256",),
            clock=ManualClock(),
            rng=random.Random(0),
        )
    assert SECRET not in str(info.value)
    assert f"http://idp.example.com/jwks?api_key={MASK}" in str(info.value)


def test_validate_quotes_a_refused_uri_without_its_signature(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw validate``'s messages are also the operator's ``Accepted`` condition and Events
    (:func:`igw.operator.admission.spec_problems`), readable with the cluster's ``view`` role."""
    path = tmp_path / "igwc.yaml"
    path.write_text(
        "apiVersion: inference.sagemaker.aws.amazon.com/v1alpha1\n"
        "kind: InferenceGatewayConfig\n"
        "metadata: {name: demo, namespace: default}\n"
        "spec:\n"
        "  auth:\n"
        "    jwt:\n"
        "      provider:\n"
        "        name: corp-idp\n"
        "        issuer: https://idp.example.com\n"
        '        remoteJWKS: {uri: "http://idp.example.com/jwks?sig=abc&se=2026"}\n'
        "        audiences: [inference]\n"
    )
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr()
    assert "remoteJWKS.uri" in out.out + out.err
    assert f"http://idp.example.com/jwks?sig={MASK}&se={MASK}" in out.out + out.err
    assert "sig=abc" not in out.out + out.err
