"""Documents the data-plane tests render: an InferenceGatewayConfig object and objects by kind."""

from __future__ import annotations

from typing import Any

K8S_VERSION = "1.33.0"
"""The Kubernetes version the rendered objects are validated against (kubernetes-validate)."""


def igwc_object(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "bbr": {"enabled": True},
        "schedulers": [
            {"name": "main", "modelName": "llama", "modelSelector": {"matchLabels": {"app": "llama"}}}
        ],
    }
    body.update(spec)
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "chat", "namespace": "inference", "uid": "1234", "generation": 3},
        "spec": body,
    }


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}
