"""IGW-AU207..209: a GlobalRouterConfig checked against the tier-1 InferenceGatewayConfig of each of
its clusters (linked by ``spec.extensions.globalHeartbeat.cluster`` or ``--link``), from YAML files through
``igw audit --manifests``.

Why: since session s47 a cluster's 401 to a caller the router verified but did not forward becomes a
502 ``upstream_auth_misconfigured`` at run time; these checks find that deployment, a verified token
forwarded to an open gateway (which passes it to its pods), and tiers verifying one token
differently, before any traffic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from igw.checks.model import Status
from tests.checks.helpers import GLOBAL_ROUTER_EXAMPLE, cli

ISSUER = "https://idp.example.com/realms/ml"
OTHER = "https://other-idp.example.com"
FWD: dict[str, Any] = {"forward": True}


def _auth(issuer: str, audiences: str, claims: str = "", indent: str = "  ") -> str:
    """``spec.auth``; ``claims``: ``requiredClaims`` as a YAML flow sequence (none when empty)."""
    return (
        f"{indent}auth:\n"
        f"{indent}  jwt:\n"
        f"{indent}    provider:\n"
        f"{indent}      name: corp-idp\n"
        f"{indent}      issuer: {issuer}\n"
        f"{indent}      remoteJWKS: {{uri: {ISSUER}/certs}}\n"
        f"{indent}      audiences: [{audiences}]\n"
        + (f"{indent}      requiredClaims: {claims}\n" if claims else "")
    )


def _router(
    *, auth: bool = True, forward: bool = False, tenant_claim: str = "tenant", claims: str = ""
) -> str:
    """The example router (its spec last in the file) with ``spec.auth`` and ``spec.authorization``."""
    text = GLOBAL_ROUTER_EXAMPLE.read_text()
    if auth:
        text += _auth(ISSUER, "inference", claims)
    text += (
        f"  authorization: {{forwardAuthorization: {str(forward).lower()}, tenantClaim: {tenant_claim}}}\n"
    )
    return text


def _gateway(
    *,
    auth: bool = True,
    cluster: str = "use1-b",
    issuer: str = ISSUER,
    audiences: str = "inference",
    tenant_claim: str = "tenant",
    key_prefix: str = "igw:hb:",
    claims: str = "",
    heartbeat: bool = True,
    name: str = "llama",
) -> str:
    text = (
        "apiVersion: inference.sagemaker.aws.amazon.com/v1alpha1\n"
        "kind: InferenceGatewayConfig\n"
        f"metadata: {{name: {name}, namespace: inference}}\n"
        "spec:\n"
        "  bbr: {enabled: false}\n"
        "  schedulers:\n"
        "    - name: llama3-8b\n"
        "      modelName: meta-llama/Llama-3.1-8B-Instruct\n"
        "      modelSelector: {matchLabels: {app: llama3-8b}}\n"
        "  extensions:\n"
        + (
            "    globalHeartbeat:\n"
            f"      cluster: {cluster}\n"
            "      region: us-east-1\n"
            "      redis:\n"
            "        url: rediss://global-router-cache.example.com:6379/0\n"
            f"        keyPrefix: '{key_prefix}'\n"
            if heartbeat
            else ""
        )
        + f"    authorization: {{tenantClaim: {tenant_claim}}}\n"
    )
    return text + (_auth(issuer, audiences, claims) if auth else "")


def _audit(
    tmp_path: Path, check: str, *documents: str, links: tuple[str, ...] = ()
) -> tuple[int, list[dict[str, Any]]]:
    folder = tmp_path / "manifests"
    folder.mkdir()
    for index, document in enumerate(documents):
        (folder / f"{index}.yaml").write_text(document)
    options = [f"--link={link}" for link in links]
    code, out = cli(
        "audit", "--manifests", str(folder), "--check", check, "--fail-on", "medium", "-o", "json", *options
    )
    return code, [r for r in json.loads(out)["results"] if r["checkId"] == check]


RESOURCE = "GlobalRouterConfig global-llama cluster use1-b"


@pytest.mark.parametrize(
    ("check", "router", "gateway", "status", "severity", "finding"),
    [
        # 1. verified, not forwarded, the cluster authenticates: every verified caller gets a 502
        ("IGW-AU207", {}, {}, "FAIL", "HIGH", "every verified caller gets 502 upstream_auth_misconfigured"),
        ("IGW-AU207", {}, {"auth": False}, "PASS", None, "authenticates nobody"),
        ("IGW-AU207", {"forward": True}, {}, "PASS", None, "forwards callers' tokens"),
        ("IGW-AU207", {"auth": False}, {}, "PASS", None, "authenticates nobody"),
        # 2. forwarded to an open gateway: the token reaches the model-server pods
        ("IGW-AU208", {"forward": True}, {"auth": False}, "FAIL", "MEDIUM", "reach its model-server pods"),
        ("IGW-AU208", {"forward": True}, {}, "PASS", None, "verifies the forwarded token"),
        ("IGW-AU208", {}, {"auth": False}, "PASS", None, "forwards no verified token"),
        # 3. both verify one forwarded token, differently
        ("IGW-AU209", FWD, {}, "PASS", None, "as the router does"),
        ("IGW-AU209", FWD, {"issuer": OTHER}, "FAIL", "HIGH", "refuses every forwarded token"),
        ("IGW-AU209", FWD, {"audiences": "batch"}, "FAIL", "MEDIUM", "the router accepts inference"),
        ("IGW-AU209", FWD, {"audiences": "inference, batch"}, "PASS", None, "as the router does"),
        ("IGW-AU209", FWD, {"tenant_claim": "org"}, "FAIL", "MEDIUM", "'tenant' at the router, 'org'"),
        ("IGW-AU209", {}, {"tenant_claim": "org"}, "PASS", None, "IGW-AU207"),
    ],
    ids=[
        "withheld-to-authenticating", "withheld-to-open", "forwarded", "router-open",
        "forwarded-to-open", "forwarded-to-authenticating", "withheld-to-open-pods",
        "same-identity", "other-issuer", "other-audience", "wider-audiences", "other-tenant-claim",
        "not-forwarded",
    ],
)  # fmt: skip
def test_a_router_is_checked_against_its_clusters_gateway(
    tmp_path: Path,
    check: str,
    router: dict[str, Any],
    gateway: dict[str, Any],
    status: str,
    severity: str | None,
    finding: str,
) -> None:
    code, [result] = _audit(tmp_path, check, _router(**router), _gateway(**gateway))
    assert result["status"] == status, result["message"]
    assert result["resource"] == RESOURCE
    assert finding in result["message"]
    if severity is not None:
        assert result["severity"] == severity
        assert "InferenceGatewayConfig inference/llama" in result["message"]
    assert code == (1 if status == "FAIL" else 0)


def test_the_documents_are_configurations_igw_validate_accepts(tmp_path: Path) -> None:
    """The audit is only worth something on deployable configurations: both tiers' documents here are."""
    for name, document in (("router.yaml", _router(forward=True)), ("gateway.yaml", _gateway())):
        (tmp_path / name).write_text(document)
        code, out = cli("validate", str(tmp_path / name))
        assert code == 0, out


def test_the_withheld_token_finding_names_both_fixes(tmp_path: Path) -> None:
    _, [result] = _audit(tmp_path, "IGW-AU207", _router(), _gateway())
    assert "forwardAuthorization: true" in result["remediation"]
    assert "remove spec.auth from that cluster's InferenceGatewayConfig" in result["remediation"]
    assert "Caller identity at the clusters" in result["remediation"]


@pytest.mark.parametrize(
    "gateway",
    [{"cluster": "eu-a"}, {"key_prefix": "igw:other:"}],
    ids=["another-cluster", "another-key-prefix"],
)
def test_a_gateway_publishing_no_heartbeat_the_router_reads_is_not_linked(
    tmp_path: Path, gateway: dict[str, Any]
) -> None:
    """Only the heartbeat key ``<keyPrefix><cluster>`` links the tiers: a gateway publishing another
    one serves no cluster of this router, whatever its auth, so nothing is in scope."""
    for check in ("IGW-AU207", "IGW-AU208", "IGW-AU209"):
        folder = tmp_path / check
        folder.mkdir()
        code, [result] = _audit(folder, check, _router(), _gateway(**gateway))
        assert result["status"] == Status.SKIP.value, result["message"]
        assert "globalHeartbeat.cluster" in result["message"]
        assert code == 0


def _claim(name: str, value_type: str, values: str) -> str:
    return f"[{{name: {name}, valueType: {value_type}, values: [{values}]}}]"


GROUP = _claim("groups", "StringArray", "ml-users")
SCOPE = _claim("scope", "String", "inference")


@pytest.mark.parametrize(
    ("router_claims", "gateway_claims", "status", "severity", "finding"),
    [
        (GROUP, GROUP, "PASS", None, "as the router does"),
        # the router holds callers to more than the cluster: every request through it meets that
        (GROUP, "", "PASS", None, "does not require the router's claim 'groups'"),
        (_claim("groups", "StringArray", "ml-users"), _claim("groups", "StringArray", "ml-users, ops"),
         "PASS", None, "as the router does"),
        # the cluster holds callers to more than the router: some verified callers get its 401
        ("", GROUP, "FAIL", "MEDIUM",
         "requires claim 'groups' (StringArray in [ml-users]) and the router does not"),
        (_claim("groups", "StringArray", "ml-users, ops"), GROUP, "FAIL", "MEDIUM",
         "the router accepts StringArray in [ml-users, ops] but InferenceGatewayConfig inference/llama only"),
        # no token passes both: HIGH, as another issuer is
        (SCOPE, _claim("scope", "String", "batch"), "FAIL", "HIGH", "refuses every forwarded token"),
        (SCOPE, _claim("scope", "StringArray", "inference"), "FAIL", "HIGH", "refuses every forwarded token"),
    ],
    ids=["same-claims", "cluster-requires-less", "cluster-accepts-more-values", "router-requires-less",
         "router-accepts-more-values", "disjoint-string-values", "other-value-type"],
)  # fmt: skip
def test_the_tiers_required_claims_are_compared(
    tmp_path: Path,
    router_claims: str,
    gateway_claims: str,
    status: str,
    severity: str | None,
    finding: str,
) -> None:
    """A forwarded token must pass the gateway's ``requiredClaims`` whenever it passed the router's
    (else the cluster relays its 401 to a caller the router verified); the reverse is no finding."""
    _, [result] = _audit(
        tmp_path,
        "IGW-AU209",
        _router(forward=True, claims=router_claims),
        _gateway(claims=gateway_claims),
    )
    assert result["status"] == status, result["message"]
    assert finding in result["message"]
    if severity is not None:
        assert result["severity"] == severity


UNLINKED = (_gateway(heartbeat=False, name="llama-a"), _gateway(heartbeat=False, name="llama-b"))


def test_gateways_without_a_heartbeat_are_named_with_how_to_link_them(tmp_path: Path) -> None:
    """Before session s48 a router withholding tokens from two authenticating gateways that publish
    no heartbeat was one SKIP, "nothing links", naming neither gateway nor a way to link them."""
    code, [result] = _audit(tmp_path, "IGW-AU207", _router(), *UNLINKED)
    assert result["status"] == Status.SKIP.value
    for name in ("llama-a", "llama-b"):
        assert f"InferenceGatewayConfig inference/{name} not linked" in result["message"]
        assert f"--link CLUSTER=inference/{name}" in result["message"]
    assert code == 0


def test_link_pairs_a_router_cluster_with_a_gateway_without_a_heartbeat(tmp_path: Path) -> None:
    """``--link CLUSTER=NAMESPACE/NAME`` pairs them as a heartbeat would; a gateway left unlinked, and a
    link naming nothing in the source, are each a SKIP row saying so."""
    links = ("use1-b=inference/llama-b", "eu-x=inference/llama-a")
    code, results = _audit(tmp_path, "IGW-AU207", _router(), *UNLINKED, links=links)
    rows = {r["resource"]: r for r in results}
    assert rows[RESOURCE]["status"] == "FAIL"
    assert "InferenceGatewayConfig inference/llama-b has spec.auth" in rows[RESOURCE]["message"]
    assert rows["--link eu-x=inference/llama-a"]["status"] == Status.SKIP.value
    assert "links nothing" in rows["--link eu-x=inference/llama-a"]["message"]
    assert set(rows) == {RESOURCE, "--link eu-x=inference/llama-a"}
    assert code == 1


def test_a_heartbeat_gateway_and_an_unlinked_one_both_show(tmp_path: Path) -> None:
    code, results = _audit(tmp_path, "IGW-AU207", _router(), _gateway(), UNLINKED[0])
    rows = {r["resource"]: r["status"] for r in results}
    assert rows == {RESOURCE: "FAIL", "InferenceGatewayConfig inference/llama-a": Status.SKIP.value}
    assert code == 1


@pytest.mark.parametrize("link", ["use1-b", "=inference/llama", "use1-b=", "use1-b=a/b/c"])
def test_a_malformed_link_is_a_usage_error(link: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli("audit", "--manifests", ".", f"--link={link}")
    assert exit_.value.code == 2
    assert "CLUSTER=NAMESPACE/NAME" in capsys.readouterr().err


def _audit_all(tmp_path: Path, *documents: str, checks: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """(check, status, resource, message) of every IGW-AU207..209 row of one ``igw audit`` of ``checks``."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    for index, document in enumerate(documents):
        (folder / f"{index}.yaml").write_text(document)
    options = [f"--check={check}" for check in checks]
    _, out = cli("audit", "--manifests", str(folder), *options, "-o", "json")
    return [(r["checkId"], r["status"], r["resource"], r["message"]) for r in json.loads(out)["results"]]


def test_an_unlinked_gateway_is_one_row_of_the_first_tier_check(tmp_path: Path) -> None:
    """Until session s49 each of IGW-AU207..209 gave the unlinked gateway's SKIP row: three rows of one
    fact, each naming the fix. Now the first check of the run gives it, naming both fixes once."""
    rows = _audit_all(
        tmp_path, _router(), _gateway(), UNLINKED[0], checks=("IGW-AU207", "IGW-AU208", "IGW-AU209")
    )
    unlinked = [row for row in rows if row[2] == "InferenceGatewayConfig inference/llama-a"]
    assert [(check, status) for check, status, _, _ in unlinked] == [("IGW-AU207", "SKIP")], rows
    message = unlinked[0][3]
    assert "--link CLUSTER=inference/llama-a" in message
    assert "globalHeartbeat naming that cluster" in message
    assert "IGW-AU207..209 do not check it" in message
    assert {(check, status) for check, status, resource, _ in rows if resource == RESOURCE} == {
        ("IGW-AU207", "FAIL"),
        ("IGW-AU208", "PASS"),
        ("IGW-AU209", "PASS"),
    }


def test_with_no_pair_the_later_tier_checks_refer_to_the_first(tmp_path: Path) -> None:
    rows = _audit_all(tmp_path, _router(), *UNLINKED, checks=("IGW-AU207", "IGW-AU208", "IGW-AU209"))
    by_check = {check: message for check, _, _, message in rows}
    assert sorted(by_check) == ["IGW-AU207", "IGW-AU208", "IGW-AU209"]
    assert by_check["IGW-AU207"].count("--link CLUSTER=") == 2
    for later in ("IGW-AU208", "IGW-AU209"):
        assert "--link CLUSTER=" not in by_check[later]
        assert by_check[later].endswith("(what is not linked: see IGW-AU207)")


def test_a_tier_check_run_without_the_first_names_the_unlinked_gateway_itself(tmp_path: Path) -> None:
    rows = _audit_all(tmp_path, _router(), _gateway(), UNLINKED[0], checks=("IGW-AU209",))
    assert ("IGW-AU209", "SKIP", "InferenceGatewayConfig inference/llama-a") in [row[:3] for row in rows]
