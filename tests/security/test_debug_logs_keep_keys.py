"""``--log-level debug`` writes no private key, whatever library logs the request that carries it.

``igw operator --log-level debug`` logged botocore's ``Making request for
OperationModel(name=ImportCertificate) with params: {... 'body': b'{"Certificate": "LS0t...",
"PrivateKey": "LS0t..."}'}``: the Secret's private key, base64 of its PEM, which the redacting
formatter let through. Now :func:`igw.redaction.redact` masks PEM blocks and encoded key material, and
:func:`igw.gateway.redaction.configure_logging` keeps the chatty libraries at INFO unless
``IGW_DEBUG_THIRD_PARTY=1``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from igw.redaction import MASK, needs_redaction, redact

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def key_pem() -> str:
    return trustme.CA().issue_cert("chat.llm.example.com").private_key_pem.bytes().decode()


def _secrets(key_pem: str) -> list[str]:
    """Pieces any of which in a text means the key leaked: its PEM body, and the base64 of its PEM."""
    body = "".join(key_pem.strip().splitlines()[1:-1])
    return [body[:40], body[-40:], base64.b64encode(key_pem.encode()).decode()[:40]]


def _assert_masked(text: str, key_pem: str) -> None:
    assert needs_redaction(text)
    shown = redact(text)
    assert MASK in shown
    for piece in _secrets(key_pem):
        assert piece not in shown, shown


def test_a_pem_block_is_masked_with_its_newlines_real_or_escaped(key_pem: str) -> None:
    _assert_masked(f"loaded {key_pem} from the Secret", key_pem)
    _assert_masked(f"params: {{'PrivateKey': {key_pem.encode()!r}}}", key_pem)  # repr: \n escaped
    _assert_masked(json.dumps({"key": key_pem}), key_pem)
    _assert_masked("cut off: " + key_pem[:200], key_pem)  # no END line: masked to the end


def test_encoded_key_material_is_masked_without_its_name(key_pem: str) -> None:
    """botocore's body (base64 of the PEM), ACM's error quoting the value, a PEM body on one line."""
    encoded = base64.b64encode(key_pem.encode()).decode()
    _assert_masked(f"""'body': b'{{"Certificate": "x", "PrivateKey": "{encoded}"}}'""", key_pem)
    _assert_masked(f"Value '{encoded}' at 'privateKey' failed to satisfy constraint", key_pem)
    body = "".join(key_pem.strip().splitlines()[1:-1])
    _assert_masked(f"der={body}", key_pem)


def test_a_masked_pem_leaves_no_stray_newline_before_a_quote_and_keeps_the_lines_after(key_pem: str) -> None:
    """A PEM file ends with a newline, which was left after the mask (``Value '[REDACTED]\\n' at``);
    it goes with the block before a quote or the end of the text, and stays before more text."""
    assert redact(f"Value '{key_pem}' at 'privateKey'") == f"Value '{MASK}' at 'privateKey'"
    assert redact(f"params: {key_pem.encode()!r}") == f"params: b'{MASK}'"
    assert redact(json.dumps({"key": key_pem})) == json.dumps({"key": MASK})
    assert redact(key_pem) == MASK
    assert redact(f"loaded\n{key_pem}from the Secret") == f"loaded\n{MASK}\nfrom the Secret"


def test_a_long_value_assigned_to_a_key_name_is_masked() -> None:
    value = "Zm9vYmFyYmF6cXV4" * 4  # base64, not DER-looking
    assert value not in redact(f'"PrivateKey": "{value}"')
    assert value not in redact(f"tls.key: {value}")


def test_prose_and_paths_about_keys_stay() -> None:
    for text in (
        "private_key=/etc/igw/tls/key.pem unreadable",
        "migrating 3 replicas; the private key is in Secret inference/chat-gateway-tls",
        "arn:aws:acm:us-east-1:123456789012:certificate/1234abcd-12ab-34cd-56ef-1234567890ab",
    ):
        assert redact(text) == text


_PROBE = """
import asyncio, base64, logging, sys
import boto3
from moto import mock_aws
from igw.gateway.redaction import configure_logging
from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import Kube
from igw.operator.reconcile import Reconciler
from igw.operator.tls import AutoTlsSettings, IssuerRef
from tests.fakes.kube_api import running_fake_kube
from tests.operator.harness import add_issuer, find, install_crd, tls_igwc, write_tls_secret

configure_logging("debug")
with running_fake_kube() as cluster, mock_aws():
    install_crd(cluster)
    cluster.install_cert_manager()
    acm = boto3.client("acm", region_name="us-east-1")
    add_issuer(cluster, "ClusterIssuer", "test-ca")
    tls = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=tls)
    cluster.add(tls_igwc("chat"))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
    asyncio.run(reconciler.reconcile("inference", "chat"))
    assert find(cluster, "InferenceGatewayConfig", "inference", "chat")["status"]["tls"]["acmArn"]
    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
print(base64.b64decode(secret["data"]["tls.key"]).decode(), end="")
"""


@pytest.mark.parametrize("opt_in", [False, True], ids=["default", "IGW_DEBUG_THIRD_PARTY=1"])
def test_the_operator_at_debug_never_logs_the_imported_private_key(opt_in: bool) -> None:
    """The reconciler imports an auto-issued certificate into (moto's) ACM with the operator's logging
    at ``debug``; its stderr is what ``igw operator --log-level debug`` writes."""
    env = {k: v for k, v in os.environ.items() if k != "IGW_DEBUG_THIRD_PARTY"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "gateway_src"), str(ROOT)])
    if opt_in:
        env["IGW_DEBUG_THIRD_PARTY"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    key_pem, log = result.stdout, result.stderr
    assert "BEGIN" in key_pem
    assert "DEBUG igw." in log or "DEBUG asyncio" in log  # the process logged at debug
    request = "Making request for OperationModel(name=ImportCertificate)"
    # Capped by default: botocore's and urllib3's DEBUG lines are written only when asked for.
    assert (request in log) is opt_in
    assert ("DEBUG urllib3" in log) is opt_in
    assert "PRIVATE KEY" not in log
    for piece in _secrets(key_pem):
        assert piece not in log
