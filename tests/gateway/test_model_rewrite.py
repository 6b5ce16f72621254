"""Canary splitting rules: weighted split within a statistical bound, stickiness, validation."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from igw.gateway.model_rewrite import ModelRewriteError, ModelRewrites

SERVED = {"llama-v1", "llama-v2", "llama-v3"}


def rules(targets: list[tuple[str, int]], **extra: Any) -> ModelRewrites:
    raw = {"rules": [{"model": "llama", "targets": [{"model": m, "weight": w} for m, w in targets], **extra}]}
    return ModelRewrites.from_extension(raw, routable=SERVED.__contains__)


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_random_split_is_within_four_sigma_of_the_weights(share: float) -> None:
    n = 10_000
    r = rules([("llama-v1", round(100 * (1 - share))), ("llama-v2", round(100 * share))])
    rng = random.Random(7)
    got = sum(r.choose("llama", headers={}, tenant=None, rng=rng) == "llama-v2" for _ in range(n))
    sigma = math.sqrt(n * share * (1 - share))
    assert abs(got - n * share) <= 4 * sigma


def test_zero_weight_targets_get_nothing_and_other_models_pass_through() -> None:
    r = rules([("llama-v1", 0), ("llama-v2", 3)])
    rng = random.Random(1)
    assert {r.choose("llama", headers={}, tenant=None, rng=rng) for _ in range(200)} == {"llama-v2"}
    assert r.choose("other", headers={}, tenant=None, rng=rng) is None


def test_tenant_stickiness_and_growing_the_last_target_only_moves_users_onto_it() -> None:
    before = rules([("llama-v1", 90), ("llama-v2", 10)], stickyBy="tenant")
    after = rules([("llama-v1", 50), ("llama-v2", 50)], stickyBy="tenant")
    rng = random.Random(3)
    tenants = [f"tenant-{i}" for i in range(2000)]
    first = {t: before.choose("llama", headers={}, tenant=t, rng=rng) for t in tenants}
    again = {t: before.choose("llama", headers={}, tenant=t, rng=rng) for t in tenants}
    assert first == again  # sticky while the weights stay
    moved = {t: after.choose("llama", headers={}, tenant=t, rng=rng) for t in tenants}
    assert all(moved[t] == "llama-v2" for t in tenants if first[t] == "llama-v2")
    on_v2 = sum(v == "llama-v2" for v in moved.values())
    assert abs(on_v2 - 1000) <= 4 * math.sqrt(2000 * 0.25)


def test_header_stickiness_and_no_key_falls_back_to_random() -> None:
    r = rules([("llama-v1", 1), ("llama-v2", 1)], stickyBy="header", stickyHeader="X-User")
    rng = random.Random(5)
    picks = {r.choose("llama", headers={"x-user": "alice"}, tenant=None, rng=rng) for _ in range(50)}
    assert len(picks) == 1
    unkeyed = {r.choose("llama", headers={}, tenant=None, rng=rng) for _ in range(50)}
    assert unkeyed == {"llama-v1", "llama-v2"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"rules": [{"model": "a", "targets": [{"model": "llama-v1", "weight": 1}]}] * 2},
            r"rules\[1\]\.model: 'a' has more than one rule",
        ),
        (
            {"rules": [{"model": "a", "targets": [{"model": "nope", "weight": 1}]}]},
            r"rules\[0\]\.targets\[0\]\.model: no scheduler serves 'nope'",
        ),
        (
            {"rules": [{"model": "a", "targets": [{"model": "llama-v1", "weight": 0}]}]},
            r"rules\[0\]\.targets: at least one weight must be positive",
        ),
        (
            {
                "rules": [
                    {"model": "a", "stickyBy": "header", "targets": [{"model": "llama-v1", "weight": 1}]}
                ]
            },
            r"rules\[0\]\.stickyHeader: required",
        ),
    ],
)
def test_bad_rules_are_refused_naming_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelRewriteError, match=message):
        ModelRewrites.from_extension(raw, routable=SERVED.__contains__)
