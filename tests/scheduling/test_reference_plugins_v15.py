"""The reference endpoint picker's v1.5 plugins: token-load scorer, random picker, utilization detector."""

from __future__ import annotations

import collections
import random
from dataclasses import replace

import pytest

from igw.scheduling.builtin import REGISTRY
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.plugins.random_picker import RandomPicker
from igw.scheduling.plugins.token_load_scorer import TokenLoadScorer
from igw.scheduling.plugins.utilization_detector import UtilizationDetector
from igw.scheduling.scheduler import Profile, Scheduler, WeightedScorer
from igw.scheduling.types import DecisionKind, EndpointView
from tests.scheduling.helpers import ctx, ep, req


@pytest.mark.parametrize(
    ("tokens", "threshold", "expected"),
    [
        ([0, 0], 1000, [1.0, 1.0]),  # nothing in flight: 1.0
        ([250, 500], 1000, [0.75, 0.5]),
        ([1000, 5000], 1000, [0.0, 0.0]),  # at and past the threshold: 0
        ([0, 4_194_304], 4_194_304, [1.0, 0.0]),  # the reference default T
        ([-3, 10], 10, [1.0, 0.0]),  # a negative count is treated as none
    ],
)
def test_token_load_scorer_table(tokens: list[int], threshold: int, expected: list[float]) -> None:
    views = [replace(ep(f"p{i}"), inflight_tokens=t) for i, t in enumerate(tokens)]
    assert TokenLoadScorer(threshold_tokens=threshold).score(ctx(), views) == pytest.approx(expected)


def test_token_load_scorer_parameters() -> None:
    plugin = REGISTRY.create("token-load-scorer", params={"queueThresholdTokens": 2048}, path="p")
    assert isinstance(plugin, TokenLoadScorer)
    assert plugin.threshold_tokens == 2048
    with pytest.raises(SchedulerConfigError, match=r"p.parameters.queueThresholdTokens: must be >= 1"):
        REGISTRY.create("token-load-scorer", params={"queueThresholdTokens": 0}, path="p")


@pytest.mark.parametrize(("n", "k", "length"), [(5, 3, 3), (2, 3, 2), (1, 1, 1), (0, 3, 0)])
def test_random_picker_returns_distinct_indices(n: int, k: int, length: int) -> None:
    ranked = RandomPicker(max_endpoints=k).rank(ctx(), [0.0] * n)
    assert len(ranked) == length
    assert len(set(ranked)) == length
    assert all(0 <= i < n for i in ranked)


def test_random_picker_ignores_scores_and_is_uniform() -> None:
    picker = RandomPicker(max_endpoints=1)
    c = ctx(seed=5)
    counts = collections.Counter(picker.rank(c, [10.0, 0.0, 0.0, 0.0])[0] for _ in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert all(850 < counts[i] < 1150 for i in range(4))


def test_random_picker_same_seed_same_order() -> None:
    a = [RandomPicker().rank(ctx(seed=9), [0.1] * 6) for _ in range(3)]
    assert a[0] == a[1] == a[2]


NOW = 1.0


def _at(name: str, *, waiting: int, kv: float, age: float = 0.0) -> EndpointView:
    return ep(name, waiting=waiting, kv=kv, scraped_at=NOW - age)


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        pytest.param([], 1.0, id="empty-set-is-saturated"),
        pytest.param([ep("a", waiting=0, kv=0.0, scraped_at=NOW)], 0.0, id="idle"),
        pytest.param([ep("a", waiting=5, kv=0.4, scraped_at=NOW)], 1.0, id="queue-at-threshold"),
        pytest.param([ep("a", waiting=1, kv=0.4, scraped_at=NOW)], 0.5, id="kv-dominates"),
        pytest.param([ep("a", waiting=10, kv=0.0, scraped_at=NOW)], 2.0, id="over"),
        pytest.param(
            [ep("a", waiting=0, kv=0.0, scraped_at=NOW), ep("b", waiting=0, kv=0.0, scraped_at=NOW - 0.5)],
            0.5,
            id="stale-counts-as-one",
        ),
        pytest.param([ep("a", no_metrics=True)], 1.0, id="no-metrics-counts-as-one"),
        pytest.param([ep("a", waiting=None, kv=0.4, scraped_at=NOW)], 0.5, id="missing-queue-signal"),
        pytest.param([ep("a", waiting=2, kv=0.0, scraped_at=NOW, failing=True)], 1.0, id="failing-scrape"),
    ],
)
def test_utilization_saturation_table(endpoints: list[EndpointView], expected: float) -> None:
    assert UtilizationDetector().saturation(endpoints, now=NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("headroom", "endpoints", "kept"),
    [
        (0.0, [_at("a", waiting=4, kv=0.79), _at("b", waiting=5, kv=0.1)], ["a"]),
        (0.0, [_at("a", waiting=0, kv=0.8), _at("b", waiting=0, kv=0.1)], ["b"]),
        (0.2, [_at("a", waiting=5, kv=0.9), _at("b", waiting=6, kv=0.1)], ["a"]),
        (0.0, [_at("a", waiting=0, kv=0.0, age=1.0), _at("b", waiting=1, kv=0.0)], ["b"]),  # a is stale
        (0.0, [_at("a", waiting=9, kv=0.0), _at("b", waiting=9, kv=0.0)], ["a", "b"]),  # none would be left
    ],
)  # fmt: skip
def test_utilization_filter_table(headroom: float, endpoints: list[EndpointView], kept: list[str]) -> None:
    out = UtilizationDetector(headroom=headroom).filter(ctx(now=NOW), endpoints)
    assert [e.key for e in out] == kept


def test_utilization_detector_parameters_and_validation() -> None:
    plugin = REGISTRY.create(
        "utilization-detector",
        params={"queueDepthThreshold": 3, "kvCacheUtilThreshold": 0.9, "metricsStalenessThreshold": "1s"},
        path="p",
    )
    assert isinstance(plugin, UtilizationDetector)
    assert (plugin.queue_depth, plugin.kv_util, plugin.staleness_s) == (3, 0.9, 1.0)
    with pytest.raises(SchedulerConfigError, match=r"metricsStalenessThreshold: invalid duration"):
        REGISTRY.create("utilization-detector", params={"metricsStalenessThreshold": "soon"}, path="p")
    with pytest.raises(SchedulerConfigError, match=r"kvCacheUtilThreshold: must be <= 1.0"):
        REGISTRY.create("utilization-detector", params={"kvCacheUtilThreshold": 1.5}, path="p")


def test_the_scheduler_admits_by_the_detector_when_the_profile_names_one() -> None:
    """Mean saturation decides, not "any pod with room": pods at queue 4 and 6 (0.8 and 1.2, mean 1.0)
    are saturated under the detector although the built-in rule would still admit (4 <= 5)."""
    detector = UtilizationDetector(staleness_s=0.5)
    profile = Profile(filters=(), scorers=(WeightedScorer(TokenLoadScorer(), 1.0),), picker=RandomPicker(),
                      detector=detector)  # fmt: skip
    sched = Scheduler(name="s", profile=profile, rng=random.Random(1), compensate_dispatches=False)
    without = Scheduler(name="s", profile=replace(profile, detector=None), rng=random.Random(1),
                        compensate_dispatches=False)  # fmt: skip
    open_pool = [ep("a", waiting=3, kv=0.2, scraped_at=NOW), ep("b", waiting=3, kv=0.2, scraped_at=NOW)]
    assert sched.pick(req(), open_pool, now=NOW).kind is DecisionKind.PICKED
    busy = [ep("a", waiting=4, kv=0.2, scraped_at=NOW), ep("b", waiting=6, kv=0.2, scraped_at=NOW)]
    decision = sched.pick(req(), busy, now=NOW)
    assert decision.kind is DecisionKind.SATURATED
    assert decision.reason == "utilization-detector: saturation 1.00 >= 1.0 over 2 endpoints"
    assert decision.retry_after_s is not None
    assert without.pick(req(), busy, now=NOW).kind is DecisionKind.PICKED
