"""A selector that matches nothing names the nearest existing label values."""

from __future__ import annotations

from igw.checks.selectors import diagnose, nearest_values, selector_from_mapping


def _pod(name: str, namespace: str, **labels: str) -> dict[str, object]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels}}


PODS = [_pod("a", "ns", app="vllm-lama"), _pod("b", "ns", app="qwen"), _pod("c", "other", app="mistral-7b")]


def test_one_edit_away_is_a_typo() -> None:
    selector = selector_from_mapping({"matchLabels": {"app": "vllm-llama"}})
    assert diagnose(selector, namespace="ns", pods=PODS) == [
        "Pod ns/a: label app='vllm-lama' differs by a typo from the selector's 'vllm-llama'"
    ]


def test_no_near_miss_lists_existing_values_nearest_first() -> None:
    selector = selector_from_mapping({"matchLabels": {"app": "qwen-32b"}})
    assert diagnose(selector, namespace="ns", pods=PODS) == [
        "Pod ns/b: label app='qwen' differs by a suffix from the selector's 'qwen-32b'"
    ]
    far = selector_from_mapping({"matchLabels": {"app": "llama-70b"}})
    assert diagnose(far, namespace="ns", pods=PODS) == []
    assert nearest_values(far, namespace="ns", pods=PODS) == [
        "existing values of app in 'ns', nearest first: vllm-lama, qwen"
    ]
    assert nearest_values(far, namespace="empty", pods=PODS) == []
