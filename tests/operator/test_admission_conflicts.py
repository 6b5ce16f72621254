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


def _serving(obj: dict[str, Any], *models: str) -> dict[str, Any]:
    """``obj`` with the ``status.models`` the operator writes once it serves ``models``."""
    return {**obj, "status": {"models": ", ".join(models)}}


def test_the_first_config_to_serve_a_model_keeps_it_against_an_older_configs_edit() -> None:
    """By creation time alone, the older config edited to take the model a newer one serves was
    admitted and the newer refused, while its data plane went on serving that model. The edit is
    refused; the config serving the model stays admitted."""
    older = _serving(_config("older", "2026-12-01T00:00:00Z", "mistral"), "llama")
    newer = _serving(_config("newer", "2026-12-02T00:00:00Z", "mistral"), "mistral")
    refusal = admit(older, [older, newer])
    assert refusal is not None
    assert refusal.messages == (
        'spec.schedulers[0].modelName: "mistral" is already served by InferenceGatewayConfig "newer" in '
        'namespace "inference" (it serves it already: the first config to serve a model keeps it)',
    )
    assert admit(newer, [older, newer]) is None


def test_two_new_configs_or_two_serving_ones_leave_the_model_to_the_older() -> None:
    older = _config("older", "2026-12-01T00:00:00Z", "llama")
    newer = _config("newer", "2026-12-02T00:00:00Z", "llama")
    for pair in ((older, newer), (_serving(older, "llama"), _serving(newer, "llama"))):
        refusal = admit(pair[1], pair)
        assert refusal is not None
        assert refusal.messages[0].endswith("(the older object keeps it)")
        assert admit(pair[0], pair) is None


def test_a_config_still_serving_a_model_it_gave_up_holds_it_until_it_stops() -> None:
    """Its new spec dropped the model (maybe refused, so it keeps serving it): another config asking
    for it is refused until the status says it stopped; then it is admitted."""
    leaving = _serving(_config("leaving", "2026-12-02T00:00:00Z", "phi"), "llama")
    taking = _config("taking", "2026-12-01T00:00:00Z", "llama")
    refusal = admit(taking, [taking, leaving])
    assert refusal is not None
    assert '"llama" is already served by InferenceGatewayConfig "leaving"' in refusal.message
    assert admit(taking, [taking, _serving(leaving, "phi")]) is None
    # Both serving it while the leaving one gives it up: the one still asking for it keeps it.
    assert admit(_serving(taking, "llama"), [taking, leaving]) is None


def test_a_served_model_name_holding_a_comma_is_matched_whole() -> None:
    older = _config("older", "2026-12-01T00:00:00Z", "a, b")
    newer = _serving(_config("newer", "2026-12-02T00:00:00Z", "a, b"), "x", "a, b")
    assert admit(older, [older, newer]) is not None
    # Serving "a" is not serving "a, b": neither serves it, so the older keeps it.
    partial = _serving(newer, "a")
    assert admit(partial, [older, partial]) is not None
