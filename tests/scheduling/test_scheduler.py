from __future__ import annotations

import math
import random

import pytest

from igw.scheduling.factory import scheduler_from_picker_config, scheduler_from_weights
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import DecisionKind, EndpointView, RequestOutcome, RoutingPolicy
from tests.scheduling.helpers import ep, req

SETTINGS = RoutingSettings(stale_threshold_s=1.0)


def sched(weights: dict[str, float] | None = None, *, seed: int = 1) -> Scheduler:
    return scheduler_from_weights(
        weights or {"queue": 2, "kvCache": 2, "prefix": 3}, routing=SETTINGS, rng=random.Random(seed)
    )


def test_scheduler_implements_the_shared_routing_policy() -> None:
    assert isinstance(sched(), RoutingPolicy)


def test_no_endpoints_is_503_kind() -> None:
    assert sched().pick(req(), [], now=0.0).kind is DecisionKind.NO_ENDPOINTS


def test_weighted_sum_picks_least_loaded_and_reports_scores() -> None:
    d = sched().pick(req(), [ep("busy", waiting=4, kv=0.5), ep("idle", waiting=0, kv=0.1)], now=0.5)
    assert d.kind is DecisionKind.PICKED
    assert d.endpoint == "idle"
    assert d.fallbacks == ("busy",)
    assert d.scores["idle"] == pytest.approx(
        {"queue-scorer": 2.0, "kv-cache-utilization-scorer": 1.8, "prefix-cache-scorer": 0.0, "total": 3.8}
    )
    assert d.scores["busy"]["total"] == pytest.approx(0.0 + 1.0)


def test_prefix_affinity_is_learned_on_pick() -> None:
    s = sched({"prefix": 3, "queue": 1})
    text = "system prompt " * 40
    eps = [ep("e1"), ep("e2"), ep("e3")]
    first = s.pick(req(text), eps, now=0.0).endpoint
    assert all(s.pick(req(text + f" q{i}"), eps, now=0.0).endpoint == first for i in range(10))


@pytest.mark.parametrize(
    ("endpoint_kwargs", "why"),
    [
        pytest.param({"scraped_at": -1.5}, "older than the threshold", id="stale"),
        pytest.param({"failing": True}, "last scrape failed", id="failing"),
        pytest.param({"no_metrics": True}, "never scraped", id="never-scraped"),
    ],
)
def test_ineligible_endpoint_is_excluded(endpoint_kwargs: dict[str, object], why: str) -> None:
    bad = ep("bad", waiting=0, kv=0.0, **endpoint_kwargs)  # type: ignore[arg-type]
    good = ep("good", waiting=4, kv=0.7)
    for _ in range(20):
        d = sched().pick(req(), [bad, good], now=0.0)
        assert d.endpoint == "good", why
        assert "bad" not in d.fallbacks
    assert "1 stale endpoints excluded" in d.reason


def test_stale_endpoint_recovers_when_fresh_metrics_arrive() -> None:
    s = sched()
    good = ep("other", waiting=3, kv=0.5)
    assert s.pick(req(), [ep("idle", scraped_at=0.0), good], now=2.0).endpoint == "other"
    assert s.pick(req(), [ep("idle", scraped_at=2.0), good], now=2.0).endpoint == "idle"


def test_all_stale_falls_back_to_own_inflight_counts() -> None:
    eps = [
        ep("a", scraped_at=-9, inflight=5),
        ep("b", failing=True, inflight=1),
        ep("c", no_metrics=True, inflight=3),
    ]
    d = sched().pick(req(), eps, now=0.0)
    assert d.kind is DecisionKind.PICKED
    assert d.endpoint == "b"
    assert "ranked by the gateway's own in-flight counts" in d.reason


def test_saturated_pool_gives_429_kind_with_bounded_retry_after() -> None:
    eps = [ep("a", waiting=9), ep("b", kv=0.95), ep("stale-idle", scraped_at=-5)]
    d = sched().pick(req(), eps, now=0.0)
    assert d.kind is DecisionKind.SATURATED
    assert d.retry_after_s == SETTINGS.retry_after_max_s  # nothing drained yet: upper bound


def test_retry_after_follows_observed_drain_rate() -> None:
    s = sched()
    for i in range(20):  # "a" completed 2 requests per second over 10 s
        s.on_complete(RequestOutcome(request_id=str(i), endpoint="a", ok=True), now=i * 0.5)
    d = s.pick(req(), [ep("a", waiting=9, scraped_at=10.0)], now=10.0)
    # needs (9 - 5) + 1 = 5 completions at ~2/s -> 3 s (rounded up)
    assert d.kind is DecisionKind.SATURATED
    assert d.retry_after_s == 3.0


def test_one_endpoint_with_capacity_means_not_saturated() -> None:
    d = sched().pick(req(), [ep("a", waiting=9), ep("b", waiting=5, kv=0.8)], now=0.0)
    assert d.endpoint == "b"


def test_missing_signal_is_imputed_and_reported_not_zeroed() -> None:
    # "old" runs vLLM 0.9.1 (no KV signal). A silent zero would make it look empty (score 2.0).
    eps = [ep("old", kv=None), ep("x", kv=0.2), ep("y", kv=0.6)]
    d = sched({"kvCache": 2}).pick(req(), eps, now=0.0)
    assert d.endpoint == "x"
    assert d.scores["old"]["kv-cache-utilization-scorer"] == pytest.approx(2 * 0.6)
    assert "kv_usage missing on 1 endpoints, imputed with the mean" in d.reason


def test_scorer_nobody_can_feed_is_left_out() -> None:
    d = sched({"kvCache": 2, "queue": 1}).pick(
        req(), [ep("a", kv=None), ep("b", kv=None, waiting=1)], now=0.0
    )
    assert d.endpoint == "a"
    assert "kv-cache-utilization-scorer" not in d.scores["a"]
    assert "no candidate publishes kv_usage" in d.reason


def test_removed_endpoints_drop_plugin_state() -> None:
    s = sched({"prefix": 3})
    text = "z" * 256
    s.pick(req(text), [ep("a")], now=0.0)
    s.on_endpoints_removed(["a"])
    d = s.pick(req(text), [ep("a"), ep("b")], now=0.0)
    assert d.endpoint is not None
    assert d.scores[d.endpoint]["prefix-cache-scorer"] == 0.0


@pytest.mark.parametrize(
    ("values", "in_range"),
    [
        ([0.0, 0.5, 1.0], True),
        ([], True),
        ([0.5, 1.0000001], False),
        ([-0.1, 0.5], False),
        ([0.5, float("inf")], False),
        ([0.5, None, 0.2], None),  # a missing signal: the imputing path
        ([None], None),
        ([None, None], None),
    ],
)
def test_unit_range_fast_path_rejects_out_of_range(values: list[float | None], in_range: bool | None) -> None:
    from igw.scheduling.scheduler import _in_unit_range

    assert _in_unit_range(values) is in_range


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([0.5, float("nan"), 0.2], id="nan-inside-min-max-sees-in-range"),
        pytest.param([float("nan"), 0.5, 0.2], id="nan-first"),
    ],
)
def test_nan_score_is_clamped_to_zero_even_when_the_range_check_misses_it(values: list[float]) -> None:
    """min/max do not reliably see a NaN; the NaN total it causes sends every column through the
    clamp, so the NaN endpoint scores 0 and the others keep their values."""
    from igw.scheduling.framework import CycleContext
    from igw.scheduling.scheduler import WeightedScorer

    class Nan:
        name = "nan"
        type_name = "nan"
        signal = ""

        def score(self, ctx: CycleContext, endpoints: object) -> list[float]:
            return list(values)

    s = sched({"queue": 1})
    d = s._score_and_pick(
        CycleContext(request=req(), now=0.5, rng=random.Random(1)),
        [ep("a"), ep("b"), ep("c")],
        (WeightedScorer(Nan(), 2.0),),  # type: ignore[arg-type]
        stale=0,
    )
    expected = {key: 0.0 if v != v else 2.0 * v for key, v in zip("abc", values, strict=True)}
    assert {key: per["nan"] for key, per in d.scores.items()} == expected
    assert d.endpoint == ("a" if values[0] == values[0] else "b")


def test_out_of_range_scores_are_clamped_before_weighting() -> None:
    from igw.scheduling.framework import CycleContext

    class Wild:
        name = "wild"
        type_name = "wild"
        signal = ""

        def score(self, ctx: CycleContext, endpoints: object) -> list[float]:
            return [float("nan"), 7.0, -3.0]

    from igw.scheduling.scheduler import WeightedScorer

    s = sched({"queue": 1})
    d = s._score_and_pick(
        CycleContext(request=req(), now=0.5, rng=random.Random(1)),
        [ep("a"), ep("b"), ep("c")],
        (WeightedScorer(Wild(), 2.0),),  # type: ignore[arg-type]
        stale=0,
    )
    assert d.endpoint == "b"
    assert d.scores["a"]["wild"] == 0.0
    assert d.scores["b"]["wild"] == 2.0
    assert d.scores["c"]["wild"] == 0.0


@pytest.mark.parametrize("count", range(9))
def test_weighted_sum_adds_columns_in_order_exactly(count: int) -> None:
    """One pass over every column gives bit for bit the sums of adding one column at a time, for
    weights of 1.0 (left out of the kernel), zero, negative and odd weights and special values."""
    from igw.scheduling.scheduler import _weighted_sum

    rng = random.Random(count)
    specials = [0.0, -0.0, 1.0, 1e-300, math.inf, -math.inf]
    columns = [
        (
            f"s{c}",
            rng.choice([0.5, 1.0, 2.0, 3.0, 0.0, -1.5, 0.1, 1e308]),
            [rng.choice(specials) if rng.random() < 0.2 else rng.random() for _ in range(50)],
        )
        for c in range(count)
    ]
    one_at_a_time = [0.0] * 50
    for _, w, values in columns:
        one_at_a_time = [t + v * w for t, v in zip(one_at_a_time, values, strict=True)]
    got = _weighted_sum(columns, 50)
    assert [repr(t) for t in got] == [repr(t) for t in one_at_a_time]  # bit for bit: NaN and -0.0 too


def test_weighted_sum_rejects_columns_of_different_lengths() -> None:
    from igw.scheduling.scheduler import _weighted_sum

    # zip(strict=True)'s message from the generated kernel, the native sum's own when compiled
    with pytest.raises(ValueError, match=r"zip|different lengths"):
        _weighted_sum([("a", 1.0, [0.5, 0.5]), ("b", 2.0, [0.5])], 2)


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        ([ep("a", waiting=0, kv=0.0)], 0.0),
        ([ep("a", waiting=3, kv=0.0)], 0.5),  # 3 of the 6 places before the queue threshold (5) is passed
        ([ep("a", waiting=6, kv=0.0)], 1.0),  # over the threshold: no spare capacity, as the 429 rule says
        ([ep("a", waiting=60, kv=0.0)], 1.0),  # capped: one overloaded pod is not worth more than full
        ([ep("a", waiting=0, kv=0.4)], 0.5),  # KV against its 0.8 threshold
        ([ep("a", waiting=3, kv=0.72)], 0.9),  # the larger of the two
        ([ep("a", waiting=6, kv=0.0), ep("b", waiting=0, kv=0.0)], 0.5),  # mean over the pool
        ([ep("a", waiting=0, kv=0.0), ep("b", waiting=60, kv=0.0, scraped_at=-5.0)], 0.0),  # stale: left out
        ([ep("a", waiting=0, kv=0.0, scraped_at=-5.0)], 1.0),  # nothing fresh: nothing to dispatch on
        ([ep("a", waiting=None, kv=None)], 0.0),  # signals missing: no evidence of load
    ],
)
def test_utilisation_is_the_pools_load_as_a_fraction_of_saturation(
    endpoints: list[EndpointView], expected: float
) -> None:
    assert sched().utilisation(endpoints, now=0.0) == pytest.approx(expected)


def test_utilisation_counts_dispatches_the_scrapes_have_not_shown() -> None:
    s = sched()
    pool = [ep("a", waiting=0, kv=0.0, scraped_at=0.0)]
    for i in range(3):
        decision = s.pick(req(request_id=f"r{i}"), pool, now=0.1)
        assert decision.endpoint == "a"
    assert s.utilisation(pool, now=0.1) == pytest.approx(0.5)  # 3 dispatches since the page
    assert (
        s.utilisation([ep("a", waiting=0, kv=0.0, scraped_at=0.2)], now=0.2) == 0.0
    )  # a new page shows them


def test_utilisation_with_a_saturation_detector_is_its_level_capped_at_one() -> None:
    s = scheduler_from_picker_config(
        {
            "plugins": [{"type": "queue-scorer"}, {"name": "sat", "type": "utilization-detector"}],
            "saturationDetector": {"pluginRef": "sat"},  # the reference's defaults: queue 5, KV 0.8
        },
        rng=random.Random(1),
    )
    pool = [ep("a", waiting=5, kv=0.0), ep("b", waiting=0, kv=0.4)]
    assert s.utilisation(pool, now=0.0) == pytest.approx(0.75)  # mean of 5/5 and 0.4/0.8
    assert s.utilisation([ep("a", waiting=40, kv=0.0)], now=0.0) == 1.0
