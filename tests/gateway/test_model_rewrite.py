"""Canary splitting rules: weighted split within a statistical bound, stickiness, validation."""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import pytest

from igw.gateway.model_rewrite import ModelRewriteError, ModelRewrites, hash_point

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


def test_targets_of_a_name_are_its_rules_targets_with_a_positive_weight() -> None:
    """What GET /v1/models checks a caller may use before listing a canary name."""
    raw = {
        "rules": [
            {
                "model": "llama",
                "targets": [{"model": "llama-v1", "weight": 0}, {"model": "llama-v2", "weight": 3}],
            },
            {
                "model": "llama",
                "headers": [{"name": "x-canary", "value": "always"}],
                "targets": [{"model": "llama-v3", "weight": 1}, {"model": "llama-v2", "weight": 1}],
            },
        ]
    }
    r = ModelRewrites.from_extension(raw, routable=SERVED.__contains__)
    assert r.targets_of("llama") == ("llama-v2", "llama-v3")
    assert r.targets_of("other") == ()


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
            r"rules\[1\]: matches the same model and headers as .*rules\[0\]",
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


def _target(model: str, weight: int = 1) -> dict[str, Any]:
    return {"model": model, "weight": weight}


def test_header_rules_are_tried_in_order_before_the_plain_rule_of_their_model() -> None:
    raw = {
        "rules": [
            {
                "model": "llama",
                "headers": [{"name": "X-Canary", "value": "yes"}, {"name": "x-team", "value": "a"}],
                "targets": [_target("llama-v3")],
            },
            {
                "model": "llama",
                "headers": [{"name": "x-canary", "value": "yes"}],
                "targets": [_target("llama-v2")],
            },
            {"model": "llama", "targets": [_target("llama-v1")]},
        ]
    }
    r = ModelRewrites.from_extension(raw, routable=SERVED.__contains__)
    rng = random.Random(0)

    def pick(headers: dict[str, str]) -> str | None:
        return r.choose("llama", headers=headers, tenant=None, rng=rng)

    assert pick({"x-canary": "yes", "x-team": "a"}) == "llama-v3"  # both headers of the first rule
    assert pick({"x-canary": "yes", "x-team": "b"}) == "llama-v2"  # only the second rule's header
    assert pick({"x-canary": "YES"}) == "llama-v1"  # values are exact
    assert pick({}) == "llama-v1"
    assert set(r.rules) == {"llama"}


def test_a_rule_without_model_is_a_fallback_for_models_no_rule_names() -> None:
    raw = {
        "rules": [
            {"headers": [{"name": "x-canary", "value": "1"}], "targets": [_target("llama-v3")]},
            {"model": "llama", "targets": [_target("llama-v1")]},
        ]
    }
    r = ModelRewrites.from_extension(raw, routable=SERVED.__contains__)
    rng = random.Random(0)
    assert r.choose("llama", headers={"x-canary": "1"}, tenant=None, rng=rng) == "llama-v1"
    assert r.choose("other", headers={"x-canary": "1"}, tenant=None, rng=rng) == "llama-v3"
    assert r.choose("other", headers={}, tenant=None, rng=rng) is None
    assert set(r.rules) == {"llama"}  # a fallback adds no name to GET /v1/models


def test_the_same_model_and_headers_twice_is_refused_naming_both_rules() -> None:
    rule = {"model": "llama", "headers": [{"name": "X-A", "value": "1"}], "targets": [_target("llama-v1")]}
    twin = {**rule, "headers": [{"name": "x-a", "value": "1"}]}  # header names are case-insensitive
    with pytest.raises(
        ModelRewriteError, match=r"rules\[1\]: matches the same model and headers as .*rules\[0\]"
    ):
        ModelRewrites.from_extension({"rules": [rule, twin]}, routable=SERVED.__contains__)


def test_configured_says_whether_any_rule_exists() -> None:
    """The request path skips the split (and the fairness-header lookup) without rules."""
    assert not ModelRewrites.from_extension(None, routable=SERVED.__contains__).configured
    assert not ModelRewrites.from_extension({"rules": []}, routable=SERVED.__contains__).configured
    assert rules([("llama-v1", 1)]).configured
    fallback = {
        "rules": [
            {"headers": [{"name": "x-canary", "value": "1"}], "targets": [{"model": "llama-v2", "weight": 1}]}
        ]
    }
    assert ModelRewrites.from_extension(fallback, routable=SERVED.__contains__).configured


def test_a_hash_at_the_top_of_its_range_never_reaches_a_weight_0_target() -> None:
    """``h / 2**64`` rounds the hashes from ``2**64 - 2**10`` up to 1.0, past every target's bound:
    the last target took them although its weight was 0 (a user pinned to a version rolled back)."""
    top = hash_point(2**64 - 1)
    assert top < 1.0
    rule = rules([("llama-v1", 100), ("llama-v2", 0)]).rules["llama"][0]
    assert rule.target_at(top) == "llama-v1"
    assert rule.target_at(1.0) == "llama-v1"  # no point of [0, 1), still never the weight-0 target


def test_a_target_without_a_usable_endpoint_gives_its_draw_to_the_others_by_weight() -> None:
    r = rules([("llama-v1", 60), ("llama-v2", 30), ("llama-v3", 10)])
    rng = random.Random(11)
    n = 4000
    splits = [
        r.split("llama", headers={}, tenant=None, rng=rng, usable=lambda t: t != "llama-v2") for _ in range(n)
    ]
    got = Counter(s.target for s in splits if s is not None)
    assert set(got) == {"llama-v1", "llama-v3"}
    assert abs(got["llama-v3"] - n * 0.1 / 0.7) <= 4 * math.sqrt(n * (1 / 7) * (6 / 7))  # 60:10 kept
    moved = [s for s in splits if s is not None and s.fallback_from is not None]
    assert {s.fallback_from for s in moved} == {"llama-v2"}
    assert abs(len(moved) - n * 0.3) <= 4 * math.sqrt(n * 0.3 * 0.7)


def test_a_sticky_user_falls_back_to_the_same_target_and_no_usable_target_leaves_the_draw() -> None:
    r = rules([("llama-v1", 1), ("llama-v2", 1), ("llama-v3", 1)], stickyBy="tenant")
    rng = random.Random(2)
    down = {"llama-v2"}
    for tenant in (f"t{i}" for i in range(50)):
        once = r.split("llama", headers={}, tenant=tenant, rng=rng, usable=lambda t: t not in down)
        again = r.split("llama", headers={}, tenant=tenant, rng=rng, usable=lambda t: t not in down)
        assert once == again
        assert once is not None
        assert once.target != "llama-v2"
    drawn = {r.split("llama", headers={}, tenant=None, rng=rng, usable=lambda t: False) for _ in range(100)}
    assert {s.target for s in drawn if s is not None} == {"llama-v1", "llama-v2", "llama-v3"}
    assert {s.fallback_from for s in drawn if s is not None} == {None}


def test_a_continuation_follows_its_response_to_a_target_of_weight_0() -> None:
    """Rolled back to weight 0, a version still gets the continuations of the responses its pool
    stores (its pods hold them); everything else, sticky or drawn, never goes there."""
    r = rules([("llama-v1", 100), ("llama-v2", 0)], stickyBy="tenant")
    rng = random.Random(3)
    on_v2 = {r.choose("llama", headers={}, tenant=f"t{i}", rng=rng) for i in range(100)}
    assert on_v2 == {"llama-v1"}
    for i in range(100):
        split = r.split("llama", headers={}, tenant=f"t{i}", rng=rng, holds=lambda t: t == "llama-v2")
        assert split is not None
        assert split.target == "llama-v2"
        nowhere = r.split("llama", headers={}, tenant=f"t{i}", rng=rng, holds=lambda t: False)
        assert nowhere is not None
        assert nowhere.target == "llama-v1"


def test_a_continuation_whose_version_has_no_usable_endpoint_stays_unready_not_moved() -> None:
    """The version storing the response has no usable endpoint: the split keeps it, marked
    ``unready`` (answered 503), with no fallback; a new request's draw still moves (since s49)."""
    r = rules([("llama-v1", 50), ("llama-v2", 50)])
    rng = random.Random(5)
    down = {"llama-v2"}
    for _ in range(100):
        split = r.split(
            "llama",
            headers={},
            tenant=None,
            rng=rng,
            holds=lambda t: t == "llama-v2",
            usable=lambda t: t not in down,
        )
        assert split is not None
        assert (split.target, split.unready, split.fallback_from) == ("llama-v2", True, None)
        fresh = r.split(
            "llama", headers={}, tenant=None, rng=rng, holds=lambda t: False, usable=lambda t: t not in down
        )
        assert fresh is not None
        assert (fresh.target, fresh.unready) == ("llama-v1", False)
