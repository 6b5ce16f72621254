"""Table-driven tests of the gateway's small pure pieces: body parsing, model routing, endpoints file,
endpoint pool, Kubernetes object conversion."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from igw.config.build import build_gateway_config
from igw.config.model import (
    BbrSpec,
    ConfigMapRef,
    DefaultBackend,
    GatewayConfig,
    LabelSelector,
    SchedulerSpec,
)
from igw.gateway.default_backend import DefaultBackendResolver
from igw.gateway.discovery.kube import adapters_from_config_map, pod_endpoint
from igw.gateway.discovery.static_file import EndpointsFileError, parse_endpoints, parse_services
from igw.gateway.endpoints import DiscoveredEndpoint, EndpointPool
from igw.gateway.guards import OpenGuard
from igw.gateway.inference_apis import InferenceApi
from igw.gateway.model_router import ModelRouter
from igw.gateway.request_body import BadRequestBody, estimated_tokens, parse_body, with_leading_field
from igw.gateway.runtime import SchedulerRuntime
from igw.gateway.state import GatewayState
from tests.gateway.support import config_doc, scheduler

CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES, RERANK, SCORE = (
    InferenceApi.CHAT,
    InferenceApi.COMPLETIONS,
    InferenceApi.EMBEDDINGS,
    InferenceApi.RESPONSES,
    InferenceApi.RERANK,
    InferenceApi.SCORE,
)


@pytest.mark.parametrize(
    ("raw", "api", "header", "expected"),
    [
        pytest.param(
            b'{"model":"m","prompt":"abcdefgh"}',
            COMPLETIONS,
            None,
            ("m", "abcdefgh", 2, False, None),
            id="completion",
        ),
        pytest.param(
            b'{"prompt":["ab","cd"]}',
            COMPLETIONS,
            "h",
            ("h", "abcd", 1, False, None),
            id="header-model-list-prompt",
        ),
        pytest.param(
            b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":9}',
            CHAT,
            None,
            ("m", '[{"role":"user","content":"hi"}]', 8, True, 9),
            id="chat-messages-serialised-with-roles",
        ),
        pytest.param(
            b'{"model":"m","messages":[],"max_completion_tokens":null,"max_tokens":9}',
            CHAT,
            None,
            ("m", "[]", 1, False, 9),
            id="chat-null-max-completion-tokens-falls-to-max-tokens",
        ),
        pytest.param(
            b'{"model":"e","input":"abcdefgh","stream":true}',
            EMBEDDINGS,
            None,
            ("e", "abcdefgh", 2, False, None),
            id="embedding-string-never-streamed",
        ),
        pytest.param(
            b'{"model":"e","input":["abcd","efgh"]}',
            EMBEDDINGS,
            None,
            ("e", "abcdefgh", 2, False, None),
            id="embedding-list",
        ),
        pytest.param(
            b'{"model":"e","messages":[{"role":"user","content":"hi"}]}',
            EMBEDDINGS,
            None,
            ("e", '[{"role":"user","content":"hi"}]', 8, False, None),
            id="embedding-of-messages-as-vllm-takes-it",
        ),
        pytest.param(
            b'{"model":"m","input":"abcdefgh","instructions":"be brief",'
            b'"stream":true,"max_output_tokens":20}',
            RESPONSES,
            None,
            ("m", "be briefabcdefgh", 4, True, 20),
            id="response-instructions-then-input",
        ),
        pytest.param(
            b'{"model":"m","input":[{"role":"user","content":"hi"}],"max_tokens":7}',
            RESPONSES,
            None,
            ("m", '[{"role":"user","content":"hi"}]', 8, False, None),
            id="response-input-items-max-tokens-is-not-its-field",
        ),
        pytest.param(
            b'{"model":"r","query":"abcd","documents":["efgh",{"text":"ijklmnop"}],"stream":true}',
            RERANK,
            None,
            # the query once per document: (4 + 4) + (4 + 8) characters
            ("r", "abcdefghijklmnop", 5, False, None),
            id="rerank-query-then-documents-never-streamed",
        ),
        pytest.param(
            b'{"model":"r","text_1":"abcd","text_2":["efgh","ijkl","mnop"]}',
            SCORE,
            None,
            ("r", "abcdefghijklmnop", 6, False, None),
            id="score-one-text-against-three",
        ),
        pytest.param(
            b'{"model":"r","text_1":["ab","cd"],"text_2":["ef","gh"]}',
            SCORE,
            None,
            ("r", "abcdefgh", 2, False, None),
            id="score-pairs",
        ),
    ],
)
def test_parse_body(raw: bytes, api: InferenceApi, header: str | None, expected: tuple[Any, ...]) -> None:
    b = parse_body(raw, api=api, header_model=header)
    assert (b.model, b.prefix_text, b.prompt_tokens, b.stream, b.max_tokens) == expected
    if header is None or b'"model"' in raw:
        assert b.raw == raw
    else:  # named by the header only: written into the body the model server gets (session s34)
        assert orjson.loads(b.raw) == {**orjson.loads(raw), "model": header}


@pytest.mark.parametrize(
    ("raw", "api", "message", "param"),
    [
        (b'{"model": 3, "prompt": ""}', COMPLETIONS, "'model' must be a string", "model"),
        (
            b'{"model": "' + b"x" * 300 + b'", "prompt": ""}',
            COMPLETIONS,
            "'model' is longer than 256",
            "model",
        ),
        (
            b'{"model": "m", "prompt": "", "max_tokens": "9"}',
            COMPLETIONS,
            "'max_tokens' must be an integer",
            "max_tokens",
        ),
        (
            b'{"model": "m", "messages": [], "max_completion_tokens": 1.5}',
            CHAT,
            "'max_tokens' must be",
            "max_tokens",
        ),
        (b'{"model": "m", "messages": "hi"}', CHAT, "'messages' must be a list", "messages"),
        (b'{"model": "m", "messages": [], "n": 0}', CHAT, "'n' must be a positive integer", "n"),
        (b'{"model": "m", "prompt": "", "n": "2"}', COMPLETIONS, "'n' must be a positive integer", "n"),
        (b'{"model": "m", "prompt": "", "n": true}', COMPLETIONS, "'n' must be a positive integer", "n"),
        (b'{"model": "m", "prompt": "", "best_of": 0}', COMPLETIONS, "'best_of' must be", "best_of"),
        (b'{"model": "m", "prompt": "hi"}', CHAT, "'messages' must be a list", "messages"),
        (b'{"model": "m", "messages": []}', COMPLETIONS, "'prompt' is required", "prompt"),
        (b"\xff\xfe", COMPLETIONS, "request body is not valid JSON", None),
        (b'{"model": "e"}', EMBEDDINGS, "'input' is required", "input"),
        (b'{"model": "r", "documents": ["a"]}', RERANK, "'query' must be a string", "query"),
        (
            b'{"model": "r", "query": "q", "documents": []}',
            RERANK,
            "'documents' must be a non-empty list",
            "documents",
        ),
        (
            b'{"model": "r", "query": "q", "documents": "d"}',
            RERANK,
            "'documents' must be a non-empty list",
            "documents",
        ),
        (b'{"model": "r", "text_2": "d"}', SCORE, "'text_1' must be a string or a non-empty list", "text_1"),
        (
            b'{"model": "r", "text_1": "q", "text_2": [1]}',
            SCORE,
            "'text_2' must be a string or a non-empty",
            "text_2",
        ),
        (b'{"model": "e", "input": 5}', EMBEDDINGS, "'input' must be a string or a list", "input"),
        (
            b'{"model": "e", "input": "x", "stream": "yes"}',
            EMBEDDINGS,
            "'stream' must be true or false",
            "stream",
        ),
        (b'{"model": "m", "messages": []}', RESPONSES, "'input' is required", "input"),
        (b'{"model": "m", "input": {"a": 1}}', RESPONSES, "'input' must be a string or a list", "input"),
        (
            b'{"model": "m", "input": "x", "instructions": 3}',
            RESPONSES,
            "'instructions' must be a string",
            "instructions",
        ),
        (
            b'{"model": "m", "input": "x", "max_output_tokens": true}',
            RESPONSES,
            "'max_output_tokens' must be an integer",
            "max_output_tokens",
        ),
    ],
)
def test_parse_body_errors(raw: bytes, api: InferenceApi, message: str, param: str | None) -> None:
    with pytest.raises(BadRequestBody) as err:
        parse_body(raw, api=api, header_model=None)
    assert err.value.message.startswith(message)
    assert err.value.param == param


@pytest.mark.parametrize(
    ("raw", "api", "choices", "estimate"),
    [
        (b'{"model": "m", "prompt": "abcdefgh", "max_tokens": 10, "n": 8}', COMPLETIONS, 8, 2 + 80),
        (b'{"model": "m", "messages": [], "max_completion_tokens": 10, "n": 3}', CHAT, 3, 1 + 30),
        (b'{"model": "m", "prompt": "abcdefgh", "max_tokens": 10, "n": null}', COMPLETIONS, 1, 2 + 10),
        (b'{"model": "m", "prompt": "abcdefgh", "n": 8}', COMPLETIONS, 8, 2),  # no bound: none known
        (b'{"model": "m", "input": "abcdefgh", "n": 8}', RESPONSES, 1, 2),  # no n in the Responses API
        # best_of sequences generated, the n best returned (session s40: not counted)
        (b'{"model": "m", "prompt": "abcdefgh", "max_tokens": 10, "n": 2, "best_of": 5}', COMPLETIONS, 5, 52),
        (
            b'{"model": "m", "prompt": "abcdefgh", "max_tokens": 10, "n": 3, "best_of": null}',
            COMPLETIONS,
            3,
            32,
        ),
        (b'{"model": "m", "messages": [], "max_tokens": 10, "best_of": 5}', CHAT, 1, 11),  # not a chat field
    ],
)
def test_a_request_for_n_answers_is_estimated_as_n_output_bounds(
    raw: bytes, api: InferenceApi, choices: int, estimate: int
) -> None:
    """Each of a completion's ``n`` answers may run to ``max_tokens`` (session s39: counted once)."""
    body = parse_body(raw, api=api, header_model=None)
    assert (body.choices, estimated_tokens(body)) == (choices, estimate)
    assert with_leading_field(body, "salt", "x").choices == choices


def spec(name: str, model: str, adapters: tuple[str, ...] = ()) -> SchedulerSpec:
    return SchedulerSpec(name=name, model_selector=LabelSelector(), model_name=model, lora_adapters=adapters)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("base-a", ("a", "base-a", None)),
        ("lora-1", ("a", "base-a", "lora-1")),
        ("cm-lora", ("b", "base-b", "cm-lora")),
        ("lora-clash", ("a", "base-a", "lora-clash")),  # loraAdapters beat ConfigMaps
        ("orphan", None),  # ConfigMap base model nobody serves
        ("base-b", ("b", "base-b", None)),
    ],
)
def test_model_router(model: str, expected: tuple[str, str, str | None] | None) -> None:
    router = ModelRouter(
        [spec("a", "base-a", ("lora-1", "lora-clash")), spec("b", "base-b")],
        bbr_adapters={"cm-lora": "base-b", "lora-clash": "base-b", "orphan": "nobody"},
    )
    route = router.resolve(model)
    assert (None if route is None else (route.scheduler, route.base_model, route.adapter)) == expected
    assert router.unroutable_bbr == ("orphan -> nobody",)


def test_endpoints_file_parsing_and_errors() -> None:
    names = {"llama": "llama", "meta/llama": "llama"}
    got = parse_endpoints(
        {
            "schedulers": {
                "meta/llama": ["10.0.0.1:8000", {"address": "10.0.0.2:8000", "labels": {"gpu": "h100"}}]
            }
        },
        path=Path("e.yaml"),
        names=names,
    )
    assert got == {
        "llama": [DiscoveredEndpoint("10.0.0.1:8000"), DiscoveredEndpoint("10.0.0.2:8000", {"gpu": "h100"})]
    }
    with pytest.raises(EndpointsFileError) as err:
        parse_endpoints(
            {"schedulers": {"nope": [], "llama": ["10.0.0.1", {"address": "h:70000", "port": 1}]}},
            path=Path("e.yaml"),
            names=names,
        )
    assert err.value.problems == (
        "schedulers.nope: no scheduler or modelName 'nope' in the configuration",
        "schedulers.llama[0]: expected 'host:port', got '10.0.0.1'",
        "schedulers.llama[1]: unknown field 'port'",
        "schedulers.llama[1].address: expected 'host:port' with a port 1-65535, got 'h:70000'",
    )
    ipv6 = parse_endpoints({"schedulers": {"llama": ["[::1]:8000"]}}, path=Path("e.yaml"), names=names)
    assert ipv6 == {"llama": [DiscoveredEndpoint("[::1]:8000")]}
    with pytest.raises(EndpointsFileError) as err:
        parse_endpoints(
            {"schedulers": {"llama": ["::1:8000", "[10.0.0.1]:8000", "[::1]:0"]}},
            path=Path("e.yaml"),
            names=names,
        )
    assert err.value.problems == (
        "schedulers.llama[0]: expected 'host:port' (an IPv6 address as '[addr]:port'), got '::1:8000'",
        "schedulers.llama[1]: expected 'host:port' with a port 1-65535, got '[10.0.0.1]:8000'",
        "schedulers.llama[2]: expected 'host:port' with a port 1-65535, got '[::1]:0'",
    )
    with pytest.raises(EndpointsFileError, match=r"the key 'schedulers' \(and optionally 'services'\)"):
        parse_endpoints(["x"], path=Path("e.yaml"), names=names)
    with pytest.raises(EndpointsFileError, match="optionally 'services'"):
        parse_endpoints({"schedulers": {}, "extra": {}}, path=Path("e.yaml"), names=names)


def test_services_section_and_default_backend_addresses() -> None:
    doc = {"schedulers": {}, "services": {"fallback": ["127.0.0.1:9000", "127.0.0.1:9001"]}}
    assert parse_services(doc, path=Path("e.yaml")) == {"fallback": ["127.0.0.1:9000", "127.0.0.1:9001"]}
    assert parse_services({"schedulers": {}}, path=Path("e.yaml")) == {}
    with pytest.raises(EndpointsFileError) as err:
        parse_services({"services": {"a": [], "b": ["nohost"]}}, path=Path("e.yaml"))
    assert err.value.problems == (
        "services.a: expected a non-empty list of 'host:port'",
        "services.b[0]: expected 'host:port', got 'nohost'",
    )
    local = DefaultBackendResolver(service_domain=None)
    assert local.address(None) is None
    assert local.address(DefaultBackend(name=None)) is None
    assert local.address(DefaultBackend(name="localhost", port=9000)) == "localhost:9000"
    local.apply_services(parse_services(doc, path=Path("e.yaml")))
    spec = DefaultBackend(name="fallback")
    assert [local.address(spec) for _ in range(3)] == ["127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9000"]
    cluster = DefaultBackendResolver(service_domain="inference.svc")
    assert cluster.address(DefaultBackend(name="fallback")) == "fallback.inference.svc:8000"


def test_pool_replace_keeps_state_of_survivors() -> None:
    pool = EndpointPool()
    assert pool.replace([DiscoveredEndpoint("a:1"), DiscoveredEndpoint("b:1")]) == (["a:1", "b:1"], [])
    pool.states["a:1"].inflight = 3
    assert pool.replace([DiscoveredEndpoint("a:1", {"x": "y"}), DiscoveredEndpoint("c:1")]) == (
        ["c:1"],
        ["b:1"],
    )
    assert pool.states["a:1"].inflight == 3
    assert pool.states["a:1"].labels == {"x": "y"}


def test_an_address_reused_by_another_pod_is_a_new_endpoint() -> None:
    """Pod ``a`` left and pod ``b`` got its IP, seen in one report (a relist after a watch outage):
    ``b`` is a new endpoint, not ``a``'s state under a new name. Kept, ``b`` inherited ``a``'s
    ejection by outlier detection (``a`` was failing on its way out), its prefix-cache entries, its
    frozen-page and failure state and its context window."""
    config = build_gateway_config(config_doc([scheduler("llama", "llama-8b")]))
    state = GatewayState(config, guard=OpenGuard(), clock=lambda: 0.0, rng=random.Random(0))
    state.apply_endpoints(
        "llama",
        [DiscoveredEndpoint("10.0.0.1:8000", pod="ns/a"), DiscoveredEndpoint("10.0.0.2:8000", pod="ns/c")],
    )
    sr = state.runtime.schedulers["llama"]
    old = sr.pool.states["10.0.0.1:8000"]
    old.max_model_len, old.scrape_failing = 2048, True
    outliers = sr.scheduler.outliers
    for _ in range(outliers.settings.consecutive_failures):
        outliers.failed("10.0.0.1:8000", now=0.0)
    assert "10.0.0.1:8000" in outliers.ejected

    state.apply_endpoints(
        "llama",
        [DiscoveredEndpoint("10.0.0.1:8000", pod="ns/b"), DiscoveredEndpoint("10.0.0.2:8000", pod="ns/c")],
    )
    new = sr.pool.states["10.0.0.1:8000"]
    assert new is not old
    assert (new.pod, new.max_model_len, new.scrape_failing) == ("ns/b", None, False)
    assert "10.0.0.1:8000" not in outliers.ejected
    # the same pod reported again, or without a pod name (the endpoints file), keeps its state
    state.apply_endpoints(
        "llama", [DiscoveredEndpoint("10.0.0.1:8000", pod="ns/b"), DiscoveredEndpoint("10.0.0.2:8000")]
    )
    assert sr.pool.states["10.0.0.1:8000"] is new


def pod(
    *, phase: str = "Running", ready: str = "True", ip: str | None = "10.1.1.1", deleting: bool = False
) -> Any:
    return SimpleNamespace(
        metadata=SimpleNamespace(
            name="p", namespace="ns", labels={"app": "x"}, deletion_timestamp="t" if deleting else None
        ),
        status=SimpleNamespace(
            phase=phase, pod_ip=ip, conditions=[SimpleNamespace(type="Ready", status=ready)]
        ),
    )


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({}, "10.1.1.1:8000"),
        ({"ready": "False"}, None),
        ({"phase": "Pending"}, None),
        ({"ip": None}, None),
        ({"deleting": True}, None),
        # an IPv6 pod IP in brackets: unbracketed, the proxy read "fd00::1:8000" as a host on port 80
        ({"ip": "fd00::1"}, "[fd00::1]:8000"),
    ],
)
def test_pod_endpoint(kwargs: dict[str, Any], key: str | None) -> None:
    ep = pod_endpoint(pod(**kwargs), target_port=8000)
    assert (None if ep is None else ep.key) == key


def cm(data: dict[str, str]) -> Any:
    return SimpleNamespace(metadata=SimpleNamespace(name="c", namespace="ns"), data=data)


def test_bbr_config_map() -> None:
    assert adapters_from_config_map(cm({"baseModel": "b", "adapters": "- x\n- y\n"})) == {"x": "b", "y": "b"}
    with pytest.raises(ValueError, match=r"ConfigMap ns/c: data.baseModel is missing"):
        adapters_from_config_map(cm({"adapters": "- x"}))
    with pytest.raises(ValueError, match=r"data.adapters must be a YAML list"):
        adapters_from_config_map(cm({"baseModel": "b", "adapters": "x: 1"}))


def test_config_map_ref_from_local_directory(tmp_path: Path) -> None:
    from igw.launch import picker_configs_from_dir

    cfg = GatewayConfig(
        name="g",
        namespace="ns",
        bbr=BbrSpec(enabled=False),
        schedulers=(
            SchedulerSpec(
                name="s",
                model_selector=LabelSelector(),
                model_name="m",
                config_map_ref=ConfigMapRef(name="epp"),
            ),
        ),
    )
    with pytest.raises(ValueError, match=r"pass --config-maps DIR \(file DIR/epp/default-plugins.yaml\)"):
        picker_configs_from_dir(cfg, None)
    (tmp_path / "epp").mkdir()
    (tmp_path / "epp" / "default-plugins.yaml").write_text("plugins: [{type: queue-scorer}]\n")
    assert picker_configs_from_dir(cfg, tmp_path) == {
        "epp/default-plugins.yaml": {"plugins": [{"type": "queue-scorer"}]}
    }
    (tmp_path / "epp" / "default-plugins.yaml").write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="is not a YAML mapping"):
        picker_configs_from_dir(cfg, tmp_path)
    # the ConfigMap manifest copied whole (alone, or with the config beside it): named as such, not
    # "is not a YAML mapping" or the picker schema's "kind: expected 'EndpointPickerConfig'" (before s42)
    manifest = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: epp}\n"
        "data:\n  default-plugins.yaml: |\n    plugins: [{type: queue-scorer}]\n"
    )
    (tmp_path / "epp" / "default-plugins.yaml").write_text(manifest)
    whole = "holds a whole ConfigMap manifest; the file must hold only the value of its data key "
    with pytest.raises(ValueError, match=whole + "'default-plugins.yaml'"):
        picker_configs_from_dir(cfg, tmp_path)
    (tmp_path / "epp" / "default-plugins.yaml").write_text("kind: InferenceGatewayConfig\n---\n" + manifest)
    with pytest.raises(ValueError, match="holds 2 YAML documents, expected one EndpointPickerConfig"):
        picker_configs_from_dir(cfg, tmp_path)


@pytest.mark.parametrize(("configured", "applied"), [(None, None), (0.0, None), (0.5, 0.5)])
def test_a_scheduler_runtime_reads_its_route_timeout(configured: float | None, applied: float | None) -> None:
    """``routeTimeout`` unset or ``0s``: no timeout; else the configured seconds (set at construction)."""
    given = dataclasses.replace(spec("s", "m"), route_timeout_s=configured)
    unused: Any = None
    runtime = SchedulerRuntime(spec=given, scheduler=unused, pool=unused, families=unused, picker_config=None)
    assert runtime.route_timeout_s == applied
