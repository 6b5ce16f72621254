"""GlobalRouterConfig: schema, cross-field rules, defaults, the CRD, and `igw validate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from igw.cli.main import main
from igw.config.crd import to_structural
from igw.config.schema import resolved_schema
from igw.global_router.config import GlobalConfigError, load_global_config, parse_global_config
from igw.global_router.crd import build_crd, render_global_crd
from igw.global_router.schema import DEFAULT_REPLAY_KEEPALIVE_S, global_schema, validate_global_document
from tests.config.support import REPO_ROOT
from tests.global_router.support import global_doc

EXAMPLE = REPO_ROOT / "crds" / "examples" / "global" / "global-router.yaml"


def keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node).union(*(keys(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(keys(v) for v in node))
    return set()


def problems(doc: dict[str, Any]) -> dict[str, str]:
    return {p.path: f"{p.rule}: {p.message}" for p in validate_global_document(doc)}


def test_the_example_is_valid_and_builds_with_converted_costs() -> None:
    config = load_global_config(EXAMPLE)
    assert [c.name for c in config.clusters] == ["use1-a", "use1-b", "usw2-a"]
    # 4.10 USD/GPU-hour at 2500 tokens/s = 9 M tokens/hour -> 0.4556 USD per million tokens
    assert config.clusters[0].cost_per_million_tokens == pytest.approx(4.10 / 9.0)
    assert config.routing.policy == "cost-first-within-slo"
    assert config.failover.heartbeat_staleness_s == 3
    assert config.model_limits[1].tenant == "team-a"


def test_defaults() -> None:
    config = parse_global_config(global_doc())
    assert config.failover.heartbeat_staleness_s == 3.0
    assert config.failover.slow_start_s == 30.0
    assert config.routing.policy == "latency-first"
    assert config.routing.max_attempts == 3
    assert config.heartbeats.poll_interval_s == 0.5
    assert config.clusters[0].endpoint == "http://127.0.0.1:1"
    assert (config.request_timeout_s, config.max_request_s) == (600.0, 3600.0)


def test_max_request_seconds_is_read_and_bounded() -> None:
    config = parse_global_config(global_doc(upstream={"maxRequestSeconds": 90}))
    assert config.max_request_s == 90.0
    assert "spec.upstream.maxRequestSeconds" in problems(global_doc(upstream={"maxRequestSeconds": 0}))


def test_replay_keepalive_seconds_is_read_defaulted_and_bounded() -> None:
    """``spec.upstream.replayKeepAliveSeconds`` (since session s48; a constant before): read, 15 s by
    default - the schema's default and the code's one value - and refused by its path at 0, below
    0.1 s (a ping stream) or above 300 s (keeps no proxy's connection alive)."""
    assert parse_global_config(global_doc()).replay_keepalive_s == DEFAULT_REPLAY_KEEPALIVE_S == 15.0
    upstream = global_schema()["properties"]["spec"]["properties"]["upstream"]["properties"]
    assert upstream["replayKeepAliveSeconds"]["default"] == DEFAULT_REPLAY_KEEPALIVE_S
    doc = global_doc(upstream={"replayKeepAliveSeconds": 2.5})
    assert parse_global_config(doc).replay_keepalive_s == 2.5
    for bad in (0, -1, 0.05, 301, "15s"):
        found = problems(global_doc(upstream={"replayKeepAliveSeconds": bad}))
        assert list(found) == ["spec.upstream.replayKeepAliveSeconds"], (bad, found)


def test_problems_name_the_field() -> None:
    doc = global_doc()
    spec = doc["spec"]
    spec["clusters"][1]["name"] = "east-a"
    spec["clusters"][2]["endpoint"] = "http://127.0.0.1:1/"
    spec["clusters"][0]["cost"] = {"perGpuHour": 3}
    spec["clusters"][1]["cost"] = {"perGpuHour": 3, "perMillionTokens": 1, "tokensPerGpuSecond": 1}
    spec["routing"] = {"policy": "cheapest", "saturationThreshold": 2}
    spec["failover"] = {"heartbeatStalenessSeconds": 0}
    spec["modelRateLimits"] = [{"tenant": "*", "model": "m"}, {"tenant": "*", "model": "m"}]
    spec["rateLimits"] = {"tenants": [{"tenant": "acme"}, {"tenant": "acme"}]}
    spec["auth"] = {
        "jwt": {"provider": {"name": "p", "issuer": "http://x", "remoteJWKS": {"uri": "https://k"}}}
    }
    spec["surprise"] = 1
    found = problems(doc)
    assert found["spec.clusters[1].name"].startswith("global-unique-name: duplicates spec.clusters[0].name")
    assert found["spec.clusters[2].endpoint"].startswith("global-unique-endpoint")
    assert found["spec.clusters[0].cost.tokensPerGpuSecond"].startswith("global-cost-gpu-throughput")
    assert found["spec.clusters[1].cost"].startswith("global-cost-one-basis")
    assert found["spec.routing.policy"].startswith("schema.enum")
    assert found["spec.routing.saturationThreshold"].startswith("schema.maximum")
    assert found["spec.failover.heartbeatStalenessSeconds"].startswith("schema.minimum")
    assert found["spec.modelRateLimits[1].model"].startswith("global-unique-model")
    assert found["spec.rateLimits.tenants[1].tenant"].startswith("global-unique-tenant")
    assert found["spec.auth.jwt.provider.issuer"].startswith("schema.pattern")
    assert found["spec.surprise"].startswith("schema.unknown-field")
    with pytest.raises(GlobalConfigError, match=r"invalid GlobalRouterConfig \(\d+ problems\)"):
        parse_global_config(doc)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://alice:s3cretpw@igw.example.com",  # credentials: before s38 taken for the host name
        "http://igw.example.com:abc",
        "http://igw.example.com:0",
        "http://igw.example.com:65536",
        "https://:443",
        "http://[::1",
        "http://a:b:c",
        "http://igw.example.com\n",  # Python's $ matched before the newline; the API server's does not
        "http://igw%2eexample.com",
        "http://igw.example.com/v1",
        "ftp://igw.example.com",
    ],
)
def test_an_endpoint_the_router_cannot_connect_to_is_refused_at_validation(endpoint: str) -> None:
    """Before session s38 each of these passed ``igw validate`` and the CRD, and failed only when a
    request was sent: a connect failure per request, its message quoting the endpoint (with its
    password)."""
    doc = global_doc()
    doc["spec"]["clusters"][0]["endpoint"] = endpoint
    found = problems(doc)
    assert list(found) == ["spec.clusters[0].endpoint"]
    assert found["spec.clusters[0].endpoint"].startswith("schema.pattern: must be an http:// or https:// URL")
    assert "s3cretpw" not in found["spec.clusters[0].endpoint"]


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://igw.use1-a.example.com",
        "http://127.0.0.1:65535/",
        "http://[::1]:8080",
        "http://igw_a.ns.svc:8080",
    ],
)
def test_host_names_addresses_and_ports_are_endpoints(endpoint: str) -> None:
    doc = global_doc()
    doc["spec"]["clusters"][0]["endpoint"] = endpoint
    assert problems(doc) == {}


def test_one_gateway_written_two_ways_is_a_duplicate_endpoint() -> None:
    doc = global_doc()
    doc["spec"]["clusters"][0]["endpoint"] = "https://IGW.example.com/"
    doc["spec"]["clusters"][1]["endpoint"] = "https://igw.example.com:443"
    found = problems(doc)
    assert found["spec.clusters[1].endpoint"].startswith(
        'global-unique-endpoint: duplicates spec.clusters[0].endpoint ("https://igw.example.com:443")'
    )


@pytest.mark.parametrize(
    ("heartbeats", "failover", "refused"),
    [
        ({"pollIntervalSeconds": 5}, {}, "below spec.failover.heartbeatStalenessSeconds (3)"),
        ({"pollIntervalSeconds": 1}, {"heartbeatStalenessSeconds": 1}, "got 1"),
        ({"pollIntervalSeconds": 1}, {"heartbeatStalenessSeconds": 2}, None),
        ({}, {"heartbeatStalenessSeconds": 0.5}, "got 0.5"),  # the default poll
        ({"pollIntervalSeconds": "5"}, {}, None),  # the schema's problem alone
    ],
)
def test_a_heartbeat_poll_as_slow_as_the_staleness_is_refused(
    heartbeats: dict[str, Any], failover: dict[str, Any], refused: str | None
) -> None:
    """A heartbeat's age runs from the read that saw it change: reads ``heartbeatStalenessSeconds``
    apart or more age every cluster past it between two reads, so every failed request between them
    drained the whole fleet as ``stale`` and the next read slow-started it again (probed in session
    s42: polling every 5 s against the default 3 s, 24 failovers and recoveries in 20 s of healthy
    heartbeats). Until then such a configuration validated."""
    found = problems(global_doc(heartbeats=heartbeats, failover=failover))
    poll = found.get("spec.heartbeats.pollIntervalSeconds", "")
    if refused is None:
        assert not poll.startswith("global-poll-within-staleness")
    else:
        assert poll.startswith("global-poll-within-staleness: must be below")
        assert refused in poll


def test_shared_nodes_are_the_inferencegatewayconfig_ones() -> None:
    schema = global_schema()
    igwc = resolved_schema()["properties"]["spec"]["properties"]
    spec = schema["properties"]["spec"]["properties"]
    assert spec["auth"] == igwc["auth"]
    assert spec["authorization"] == igwc["extensions"]["properties"]["authorization"]
    assert spec["rateLimits"] == igwc["extensions"]["properties"]["rateLimits"]
    assert "x-igw-same-as" not in keys(schema)


def test_bundled_copy_validates_like_the_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bundled = REPO_ROOT / "gateway_src" / "igw" / "config" / "bundled"
    doc = global_doc(routing={"policy": "nope"})
    assert problems(doc) == {
        p.path: f"{p.rule}: {p.message}" for p in validate_global_document(doc, folder=bundled)
    }


def test_crd_is_structural_and_keys_clusters_by_name() -> None:
    crd = build_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    found = keys(schema)
    assert not {k for k in found if k.startswith("x-igw-") or k in {"$ref", "const", "$defs"}}
    assert '"additionalProperties": false' not in json.dumps(schema)
    clusters = schema["properties"]["spec"]["properties"]["clusters"]
    assert clusters["x-kubernetes-list-type"] == "map"
    assert clusters["x-kubernetes-list-map-keys"] == ["name"]
    assert to_structural(schema) == schema
    assert crd["spec"]["names"]["kind"] == "GlobalRouterConfig"


def test_crd_is_a_valid_kubernetes_object() -> None:
    """apiextensions' own schema; and ``exclusiveMinimum`` as its boolean beside ``minimum``, never JSON
    Schema's number (a real API server refuses the whole CRD then; kubernetes_validate does not look
    inside ``openAPIV3Schema``, hence the explicit check)."""
    kubernetes_validate.validate(build_crd(), "1.31", strict=True)
    weight = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["clusters"]["items"]["properties"]["capacityWeight"]
    assert (weight["minimum"], weight["exclusiveMinimum"]) == (0, True)


def test_committed_crd_is_fresh() -> None:
    path = REPO_ROOT / "crds" / "globalrouterconfigs.inference.sagemaker.aws.amazon.com.yaml"
    assert path.read_text(encoding="utf-8") == render_global_crd(REPO_ROOT)
    assert yaml.safe_load(path.read_text())["metadata"]["name"].startswith("globalrouterconfigs.")


def test_igw_validate_reports_global_documents_with_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = global_doc()
    doc["spec"]["clusters"][2]["region"] = "Not A Region"
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr()
    assert "spec.clusters[2].region: must be a region name such as us-east-1" in out.out
    assert "1 GlobalRouterConfig document(s) checked, 1 problem(s)" in out.err
    assert main(["validate", str(EXAMPLE)]) == 0


def test_load_refuses_a_file_without_exactly_one_document(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([global_doc(), global_doc()]))
    with pytest.raises(GlobalConfigError, match="expected exactly one GlobalRouterConfig document, found 2"):
        load_global_config(path)


def test_global_serve_refuses_an_invalid_config_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = global_doc(routing={"maxAttempts": 0})
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["global", "serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "invalid GlobalRouterConfig (1 problem)" in err
    assert "spec.routing.maxAttempts: must be >= 1" in err


def test_spec_auth_alone_holds_the_default_token_cap_to_the_header_limit() -> None:
    """With ``spec.auth`` and no ``spec.authorization`` the default cap of 8,192 is in force: a
    ``serverLimits.maxHeaderBytes`` of 4,096 passed (before session s42) and the listener answered
    431 to every token over 4,076 bytes; without ``spec.auth`` no token is read, so it is taken."""
    auth = {
        "jwt": {
            "provider": {
                "name": "idp",
                "issuer": "https://idp.example.com",
                "remoteJWKS": {"uri": "https://idp.example.com/jwks.json"},
                "audiences": ["router"],
            }
        }
    }
    small = {"maxHeaderBytes": 4096}
    problem = problems(global_doc(auth=auth, serverLimits=small))["spec.authorization.maxTokenBytes"]
    assert problem.startswith("token-fits-header-limit: 8192 (its default) needs spec.serverLimits")
    assert "got 4096" in problem
    assert problems(global_doc(serverLimits=small)) == {}
    assert problems(global_doc(auth=auth, serverLimits={"maxHeaderBytes": 8212})) == {}


def test_a_token_cap_beyond_the_header_limit_is_refused_naming_both_fields() -> None:
    """The gateway's rule ``token-fits-header-limit`` for the router's own listener: a token cap over
    ``serverLimits.maxHeaderBytes`` (less 20 bytes of header name and scheme) changed nothing, since
    the listener answered 431 to such a token first (before session s40)."""
    doc = global_doc(authorization={"maxTokenBytes": 20000})
    problem = problems(doc)["spec.authorization.maxTokenBytes"]
    assert problem.startswith(
        "token-fits-header-limit: 20000 needs spec.serverLimits.maxHeaderBytes of at least"
    )
    assert "got 16384 (its default)" in problem
    assert (
        problems(global_doc(authorization={"maxTokenBytes": 20000}, serverLimits={"maxHeaderBytes": 20020}))
        == {}
    )
