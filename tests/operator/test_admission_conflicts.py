"""The cross-object admission rule: a refusal for a model name another config serves names its field."""

from __future__ import annotations

from typing import Any

from igw.operator.admission import admit


def _config(name: str, created: str, *models: str) -> dict[str, Any]:
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": name, "namespace": "inference", "uid": name, "creationTimestamp": created},
        "spec": {
            "bbr": {"enabled": len(models) > 1},
            "schedulers": [
                {"name": f"s{i}", "modelName": model, "modelSelector": {"matchLabels": {"app": f"a{i}"}}}
                for i, model in enumerate(models)
            ],
        },
    }


def test_a_model_name_conflict_names_the_scheduler_index() -> None:
    """The refusal said ``spec.schedulers[].modelName``: with 16 schedulers the user had to find which
    one clashed. It names each clashing scheduler's index, as every other refusal names its path."""
    older = _config("older", "2026-12-01T00:00:00Z", "llama", "qwen")
    newer = _config("newer", "2026-12-02T00:00:00Z", "mistral", "qwen", "phi", "llama")
    refusal = admit(newer, [older, newer])
    assert refusal is not None
    assert refusal.reason == "ModelNameConflict"
    assert [message.split(":")[0] for message in refusal.messages] == [
        "spec.schedulers[3].modelName",
        "spec.schedulers[1].modelName",
    ]
    assert all('InferenceGatewayConfig "older"' in message for message in refusal.messages)
    assert admit(older, [older, newer]) is None
