"""The merge of InferenceObjective / InferenceModelRewrite objects into a config's spec (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from igw.config.validate import validate_document
from igw.operator.bindings import Verdict, conditions, merge

API = "inference.networking.x-k8s.io/v1alpha2"
SPEC: dict[str, Any] = {
    "bbr": {"enabled": False},
    "schedulers": [
        {
            "name": "main",
            "modelName": "llama",
            "modelSelector": {"matchLabels": {"app": "llama"}},
            "loraAdapters": ["llama-v1", "llama-v2"],
        }
    ],
}


def objective(name: str, priority: int | None, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {"poolRef": {"name": "pool"}}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": API,
        "kind": "InferenceObjective",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": spec,
    }


def rewrite(name: str, rules: list[dict[str, Any]], created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceModelRewrite",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"poolRef": {"name": "pool"}, "rules": rules},
    }


def as_config(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "pool"},
        "spec": spec,
    }


def test_objectives_enable_flow_control_and_unset_priority_is_standard() -> None:
    result = merge(SPEC, [objective("chat", 5), objective("plain", None)], [])
    assert result.spec["extensions"]["flowControl"] == {
        "objectives": [{"name": "chat", "priority": 5}, {"name": "plain", "priority": 0}]
    }
    assert all(v.accepted for v in result.verdicts.values())
    assert validate_document(as_config(result.spec)) == []
    assert "extensions" not in merge(SPEC, [], []).spec


def test_a_priority_gie_allows_outside_a_million_is_accepted_and_merges_into_a_valid_config() -> None:
    """GIE's ``InferenceObjective.spec.priority`` is an unbounded Go int; igw refused anything past
    +-1,000,000 (``spec.priority: must be <= 1000000``), so YAML written for GIE with priority
    2000000 did not apply. Any 32-bit priority is accepted, and the merged config is valid too."""
    from igw.config.inference_extension import validate_resource

    for priority in (2_000_000, -2_000_000, 2_147_483_647, -2_147_483_648):
        obj = objective("premium", priority)
        assert validate_resource(obj) == []
        result = merge(SPEC, [obj], [])
        assert result.spec["extensions"]["flowControl"]["objectives"] == [
            {"name": "premium", "priority": priority}
        ]
        assert validate_document(as_config(result.spec)) == []
    beyond = validate_resource(objective("premium", 2_147_483_648))
    assert [(p.path, p.rule) for p in beyond] == [("spec.priority", "schema.maximum")]


def test_spec_objectives_win_and_the_older_object_wins() -> None:
    spec = {**SPEC, "extensions": {"flowControl": {"objectives": [{"name": "chat", "priority": 1}]}}}
    result = merge(
        spec,
        [
            objective("chat", 9),
            objective("batch", -1, "2026-01-02T00:00:00Z"),
            objective("batch", -5, "2026-01-03T00:00:00Z"),
        ],
        [],
    )
    verdict = result.verdicts["InferenceObjective", "chat"]
    assert (verdict.accepted, verdict.reason) == (False, "Conflict")
    assert "spec.extensions.flowControl.objectives" in verdict.message
    assert result.spec["extensions"]["flowControl"]["objectives"] == [
        {"name": "chat", "priority": 1},
        {"name": "batch", "priority": -1},
    ]


def test_rewrite_matches_become_rules_and_missing_weights_share_equally() -> None:
    rules: list[dict[str, Any]] = [
        {
            "matches": [
                {
                    "model": {"type": "Exact", "value": "llama"},
                    "headers": [{"name": "x-canary", "value": "1"}],
                },
                {"model": {"value": "chat"}},
            ],
            "targets": [{"modelRewrite": "llama-v2"}],
        },
        {"targets": [{"modelRewrite": "llama-v1", "weight": 0}, {"modelRewrite": "llama-v2", "weight": 0}]},
    ]
    result = merge(SPEC, [], [rewrite("r", rules)])
    assert result.spec["extensions"]["modelRewrites"]["rules"] == [
        {
            "name": "r",  # the object's name: the rule label of the per-target metrics
            "model": "llama",
            "headers": [{"name": "x-canary", "value": "1"}],
            "targets": [{"model": "llama-v2", "weight": 1}],
        },
        {"name": "r", "model": "chat", "targets": [{"model": "llama-v2", "weight": 1}]},
        {"name": "r", "targets": [{"model": "llama-v1", "weight": 1}, {"model": "llama-v2", "weight": 1}]},
    ]
    assert result.verdicts["InferenceModelRewrite", "r"].accepted
    assert validate_document(as_config(result.spec)) == []


def test_a_refused_rewrite_adds_nothing() -> None:
    good = {"matches": [{"model": {"value": "a"}}], "targets": [{"modelRewrite": "llama-v1"}]}
    unknown = {"matches": [{"model": {"value": "b"}}], "targets": [{"modelRewrite": "llama-v9"}]}
    result = merge(SPEC, [], [rewrite("mixed", [good, unknown])])
    verdict = result.verdicts["InferenceModelRewrite", "mixed"]
    assert (verdict.accepted, verdict.reason) == (False, "UnknownTarget")
    assert "llama-v9" in verdict.message
    assert "extensions" not in result.spec

    twice = merge(SPEC, [], [rewrite("twice", [good, good])]).verdicts["InferenceModelRewrite", "twice"]
    assert (twice.accepted, twice.reason) == (False, "Conflict")
    assert 'model "a" is matched twice in this object' in twice.message


def test_an_invalid_object_is_refused_with_the_field_path() -> None:
    bad = objective("bad", 1)
    bad["spec"]["priority"] = "high"
    verdict = merge(SPEC, [bad], []).verdicts["InferenceObjective", "bad"]
    assert (verdict.accepted, verdict.reason) == (False, "InvalidSpec")
    assert "spec.priority" in verdict.message


def test_conditions_keep_their_time_while_the_status_stays() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    t1 = datetime(2026, 1, 2, tzinfo=UTC)
    first = conditions(Verdict(True, "Accepted", "ok"), [], now=t0, generation=1)
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in first] == [
        ("Accepted", "True", "2026-01-01T00:00:00Z"),
        ("ResolvedRefs", "True", "2026-01-01T00:00:00Z"),
    ]
    again = conditions(Verdict(False, "Conflict", "x"), first, now=t1, generation=2)
    assert again[0]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert again[1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert again[0]["observedGeneration"] == 2
