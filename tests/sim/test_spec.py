"""Fleet specs: YAML loading, replicas, and clear errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from igw.sim.spec import EngineKind, FaultKind, FleetSpec, PodSpec, SpecError

EXAMPLE = Path(__file__).resolve().parents[2] / "gateway_src/igw/sim/examples/mixed-fleet.yaml"


def test_example_spec_loads_and_expands_replicas() -> None:
    spec = FleetSpec.from_yaml(EXAMPLE)
    names = [p.name for p in spec.pods]
    assert names == ["h100-0", "h100-1", "a10g", "old-vllm", "sglang-nometrics"]
    assert spec.pods[0].labels == {"app": "llama-8b", "gpu": "h100"}
    assert spec.pods[0].effective_max_loras == 2
    assert spec.pods[4].engine is EngineKind.SGLANG
    assert not spec.pods[4].exposes_metrics
    assert spec.pods[4].faults[0].kind is FaultKind.SLOW


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"pods": [{"preset": "llama-3.1-8b/h100", "colour": "red"}]}, "spec.pods[0].colour"),
        ({"pods": [{"preset": "nope/h100"}]}, "spec.pods[0].preset"),
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "engine_version": "latest!"}]},
            "spec.pods[0].engine_version",
        ),
        ({"pods": [{"preset": "llama-3.1-8b/h100", "engine": "nope"}]}, "spec.pods[0].engine"),
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "labels": {"bad key!": "x"}}]},
            "spec.pods[0].labels.bad key!",
        ),
        ({"pods": [{"preset": "llama-3.1-8b/h100", "labels": {"gpu": "a b"}}]}, "spec.pods[0].labels.gpu"),
        # a final newline: ``re.match`` with ``$`` let it through before session s38
        ({"pods": [{"preset": "llama-3.1-8b/h100", "labels": {"gpu": "h100\n"}}]}, "spec.pods[0].labels.gpu"),
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "labels": {"gpu\n": "h100"}}]},
            "spec.pods[0].labels.gpu\n",
        ),
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "lora_adapters": ["sql\n"]}]},
            "spec.pods[0].lora_adapters[0]",
        ),
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "faults": [{"kind": "explode"}]}]},
            "spec.pods[0].faults[0].kind",
        ),
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "faults": [{"kind": "error_rate", "rate": 2}]}]},
            "spec.pods[0].faults[0].rate",
        ),
        ({"pods": [{"preset": "llama-3.1-8b/h100", "replicas": 0}]}, "spec.pods[0].replicas"),
        (
            {
                "pods": [
                    {"preset": "llama-3.1-8b/h100", "faults": [{"kind": "hang", "start_s": 2, "end_s": 1}]}
                ]
            },
            "spec.pods[0].faults[0].end_s",
        ),
        ({"pods": [{"preset": "llama-3.1-8b/h100", "port": 8000, "replicas": 2}]}, "spec.pods[0].port"),
        # two pods on one fixed port failed at bind time (exit 1, "address already in use")
        (
            {
                "pods": [
                    {"preset": "llama-3.1-8b/h100", "name": "a", "port": 8000},
                    {"preset": "llama-3.1-8b/h100", "name": "b", "port": 8000},
                ]
            },
            "spec.pods[1].port",
        ),
        # an unbounded slow factor (1e6) made a fault that outlived its clearing
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "faults": [{"kind": "slow", "factor": 1001}]}]},
            "spec.pods[0].faults[0].factor",
        ),
        (
            {
                "pods": [
                    {"preset": "llama-3.1-8b/h100", "name": "a"},
                    {"preset": "llama-3.1-8b/h100", "name": "a"},
                ]
            },
            "spec.pods[1].name",
        ),
        (
            {"pods": [{"preset": "llama-3.1-8b/h100", "lora_adapters": ["a", "a"]}]},
            "spec.pods[0].lora_adapters[1]",
        ),
        ({"pods": [{"preset": "llama-3.1-8b/h100", "max_loras": "2"}]}, "spec.pods[0].max_loras"),
        ({"pods": [], "time_scale": 1}, "spec.pods"),
        ({"pods": [{"preset": "llama-3.1-8b/h100"}], "time_scale": 0}, "spec.time_scale"),
        ({"pods": [{"preset": "llama-3.1-8b/h100"}], "extra": 1}, "spec.extra"),
        ({"nopods": 1}, "spec.nopods"),
        ([1, 2], "spec"),
    ],
)
def test_bad_specs_name_the_field(doc: object, path: str) -> None:
    with pytest.raises(SpecError) as info:
        FleetSpec.from_mapping(doc)
    assert info.value.path == path
    assert str(info.value).startswith(path)


def test_yaml_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pods: [\n", encoding="utf-8")
    with pytest.raises(
        SpecError, match=r"bad\.yaml: line 2, column 1: (expected the|did not find expected) node content"
    ):
        FleetSpec.from_yaml(bad)
    deep = tmp_path / "deep.yaml"
    deep.write_text("pods: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match="nested deeper than 64 levels"):
        FleetSpec.from_yaml(deep)
    with pytest.raises(SpecError, match="cannot read"):
        FleetSpec.from_yaml(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    for text in ("", "# only a comment\n", "---\n"):  # said "spec: expected a mapping, got NoneType"
        empty.write_text(text, encoding="utf-8")
        with pytest.raises(SpecError, match=r"empty\.yaml: expected one fleet spec document, found none"):
            FleetSpec.from_yaml(empty)


def test_sglang_metrics_need_flag_and_version() -> None:
    base = {"preset": "llama-3.1-8b/h100", "engine": "sglang"}
    assert PodSpec.from_mapping({**base, "engine_version": "0.3.5.post1"}, path="p").exposes_metrics
    assert not PodSpec.from_mapping({**base, "engine_version": "0.3.5"}, path="p").exposes_metrics
    assert not PodSpec.from_mapping(
        {**base, "engine_version": "0.4.0", "enable_metrics": False}, path="p"
    ).exposes_metrics


def test_a_kv_cache_smaller_than_the_max_seq_len_is_refused_for_vllm(tmp_path: Path) -> None:
    """At ``gpu_memory_utilization: 0.3`` an 8B on an H100 keeps 48,512 KV tokens, fewer than its
    max_model_len 131072: vLLM refuses to start (the cache must hold one max-length request), but the
    pod was accepted and served (before session s49). SGLang starts with a shorter request limit."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        "pods:\n  - preset: llama-3.1-8b/h100\n    gpu_memory_utilization: 0.3\n", encoding="utf-8"
    )
    with pytest.raises(
        SpecError, match=r"fleet\.yaml:3: spec\.pods\[0\]\.gpu_memory_utilization: 0\.3 leaves"
    ) as err:
        FleetSpec.from_yaml(spec)
    assert "48512 tokens for llama-3.1-8b/h100, less than its max seq len (131072)" in str(err.value)
    assert "vLLM refuses to start" in str(err.value)
    spec.write_text(spec.read_text(encoding="utf-8") + "    engine: sglang\n", encoding="utf-8")
    assert FleetSpec.from_yaml(spec).pods[0].resolved_preset().kv_capacity_tokens == 48512


def test_overrides_reach_the_preset() -> None:
    pod = PodSpec.from_mapping(
        {"preset": "llama-3.1-8b/h100", "max_num_seqs": 256, "gpu_memory_utilization": 0.8}, path="p"
    )
    preset = pod.resolved_preset()
    assert preset.max_num_seqs == 256
    assert preset.gpu_memory_utilization == 0.8


def test_a_memory_share_that_leaves_no_kv_cache_is_refused_naming_the_field(tmp_path: Path) -> None:
    """At ``gpu_memory_utilization: 0.1`` the 70B's weights (16.4 GiB per H100) fill its share: the pod
    had no KV cache and ``igw sim run`` answered every request with an error, exit 0."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        "pods:\n  - preset: llama-3.1-70b/8xh100\n    gpu_memory_utilization: 0.1\n", encoding="utf-8"
    )
    with pytest.raises(SpecError, match=r"fleet\.yaml:3: spec\.pods\[0\]\.gpu_memory_utilization: 0\.1 of "):
        FleetSpec.from_yaml(spec)
    # a share with room for a max-length sequence's KV blocks still loads
    spec.write_text(spec.read_text(encoding="utf-8").replace("0.1", "0.35"), encoding="utf-8")
    assert FleetSpec.from_yaml(spec).pods[0].resolved_preset().num_gpu_blocks > 0


@pytest.mark.parametrize(
    ("preset", "engine", "share", "message"),
    [
        ("llama-3.1-70b/8xh100", "vllm", 0.1, "gpu_memory_utilization: 0.1 of "),
        ("llama-3.1-8b/h100", "vllm", 0.3, "gpu_memory_utilization: 0.3 leaves a KV cache of 48512 tokens"),
        ("llama-3.1-8b/h100", "vllm", 5.0, "gpu_memory_utilization: must be a number in [0.05, 1], got 5.0"),
    ],
)
def test_a_pod_built_in_python_gets_the_kv_checks_of_the_yaml_loader(
    preset: str, engine: str, share: float, message: str
) -> None:
    """The KV cache checks ran in :meth:`PodSpec.from_mapping` only: ``PodSpec(...)`` built in Python
    (scenarios, tests, scripts) took a memory share that leaves no KV cache, or one too small for
    vLLM to start, and the run answered with errors (before session s49)."""
    with pytest.raises(SpecError) as err:
        PodSpec(preset=preset, engine=EngineKind(engine), gpu_memory_utilization=share)
    assert message in str(err.value)
    ok = PodSpec(preset="llama-3.1-8b/h100", engine=EngineKind.SGLANG, gpu_memory_utilization=0.3)
    assert ok.resolved_preset().kv_capacity_tokens == 48512
