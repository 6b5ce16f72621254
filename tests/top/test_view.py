"""``igw top``'s arithmetic: rates, shares, quantiles and flags from two scrapes (table-tested)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

import igw.top.view
from igw.gateway.worker_metrics import merge_pages
from igw.top.view import READ_METRICS, ScrapeError, build_view, counter_delta, parse_scrape

PAGE = """\
# TYPE igw_requests counter
igw_requests_total{{model="llama",code="200"}} {ok}
igw_requests_total{{model="llama",code="503"}} {failed}
# TYPE igw_tokens counter
igw_tokens_total{{model="llama",direction="out"}} {tokens}
igw_tokens_total{{model="llama",direction="in"}} 999
# TYPE igw_time_to_first_token_seconds histogram
igw_time_to_first_token_seconds_bucket{{model="llama",le="0.1"}} {fast}
igw_time_to_first_token_seconds_bucket{{model="llama",le="1.0"}} {slow}
igw_time_to_first_token_seconds_bucket{{model="llama",le="+Inf"}} {slow}
igw_time_to_first_token_seconds_count{{model="llama"}} {slow}
igw_time_to_first_token_seconds_sum{{model="llama"}} 1
# TYPE igw_endpoint_picks counter
igw_endpoint_picks_total{{scheduler="pool",endpoint="a:1"}} {picks_a}
igw_endpoint_picks_total{{scheduler="pool",endpoint="b:1"}} {picks_b}
# TYPE igw_upstream_retries counter
igw_upstream_retries_total{{scheduler="pool",cause="unavailable"}} {retries_503}
igw_upstream_retries_total{{scheduler="pool",cause="connect-failure"}} {retries_connect}
# TYPE igw_endpoint_kv_cache_usage gauge
igw_endpoint_kv_cache_usage{{scheduler="pool",endpoint="a:1"}} 0.25
igw_endpoint_kv_cache_usage{{scheduler="pool",endpoint="b:1"}} 0.75
# TYPE igw_endpoint_queue_depth gauge
igw_endpoint_queue_depth{{scheduler="pool",endpoint="a:1"}} 2
igw_endpoint_queue_depth{{scheduler="pool",endpoint="b:1"}} 3
# TYPE igw_endpoint_scrape_failing gauge
igw_endpoint_scrape_failing{{scheduler="pool",endpoint="a:1"}} 0
igw_endpoint_scrape_failing{{scheduler="pool",endpoint="b:1"}} 1
# TYPE igw_endpoint_signal_missing gauge
igw_endpoint_signal_missing{{scheduler="pool",endpoint="b:1",signal="vllm:lora_requests_info"}} 1
# TYPE igw_endpoint_ejected_seconds gauge
igw_endpoint_ejected_seconds{{scheduler="pool",endpoint="b:1"}} 12.5
# TYPE inference_pool_ready_pods gauge
inference_pool_ready_pods{{name="pool"}} 1
# TYPE igw_pool_stale_endpoints gauge
igw_pool_stale_endpoints{{scheduler="pool"}} 1
"""

READY: dict[str, Any] = {
    "schedulers": {
        "pool": {
            "model": "llama",
            "endpoints": {
                "a:1": {"fresh": True, "adapters": ["sql-lora"]},
                "b:1": {"fresh": False, "adapters": None},
            },
        }
    }
}


def scrape(at: float, **counts: float) -> Any:
    values = {
        "ok": 0,
        "failed": 0,
        "tokens": 0,
        "fast": 0,
        "slow": 0,
        "picks_a": 0,
        "picks_b": 0,
        "retries_503": 0,
        "retries_connect": 0,
    }
    return parse_scrape(PAGE.format(**{**values, **counts}), READY, at=at)


@pytest.mark.parametrize(
    ("previous", "current", "delta"),
    [(None, 5.0, 5.0), (2.0, 5.0, 3.0), (5.0, 5.0, 0.0), (9.0, 4.0, 4.0)],  # the last: a restart
)
def test_counter_delta(previous: float | None, current: float, delta: float) -> None:
    assert counter_delta(previous, current) == delta


def test_first_scrape_has_gauges_but_no_rates() -> None:
    view = build_view(None, scrape(10.0, ok=4, picks_a=3))
    assert view.interval_s is None
    assert view.models == ()
    (pool,) = view.pools
    assert (pool.model, pool.ready_pods, pool.pods, pool.picks_per_s) == ("llama", 1, 2, None)
    assert pool.stale_endpoints == 1
    assert pool.kv_average == pytest.approx(0.5)
    assert pool.queue_total == 5
    a, b = view.pods
    assert (a.endpoint, a.kv, a.queue, a.adapters, a.pick_share, a.flags) == (
        "a:1",
        0.25,
        2,
        ("sql-lora",),
        None,
        (),
    )
    assert b.adapters is None
    assert b.flags == ("stale", "failing", "ejected", "missing vllm:lora_requests_info")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        # (counts at t=10, counts at t=12, (req/s, 5xx ratio, out tok/s, picks/s, share of a))
        ({}, {"ok": 8, "failed": 2, "tokens": 40, "picks_a": 6, "picks_b": 2}, (5.0, 0.2, 20.0, 4.0, 0.75)),
        ({"ok": 8, "picks_a": 6}, {"ok": 8, "picks_a": 6}, (0.0, None, 0.0, 0.0, None)),
        ({"ok": 50, "picks_a": 50}, {"ok": 4, "picks_a": 1, "picks_b": 1}, (2.0, 0.0, 0.0, 1.0, 0.5)),
    ],
    ids=["traffic", "idle", "gateway-restarted"],
)
def test_rates_and_shares_over_the_interval(
    before: dict[str, float], after: dict[str, float], expected: tuple[Any, ...]
) -> None:
    view = build_view(scrape(10.0, **before), scrape(12.0, **after))
    assert view.interval_s == 2.0
    (model,) = view.models
    (pool,) = view.pools
    a = view.pods[0]
    got = (model.requests_per_s, model.error_ratio, model.output_tokens_per_s, pool.picks_per_s, a.pick_share)
    assert got == pytest.approx(expected)


def test_retries_per_second_sum_every_cause_of_the_pool_over_the_interval() -> None:
    first = scrape(10.0, retries_503=4, retries_connect=1)
    assert build_view(None, first).pools[0].retries_per_s is None
    view = build_view(first, scrape(12.0, retries_503=7, retries_connect=2))
    assert view.pools[0].retries_per_s == pytest.approx((3 + 1) / 2)
    restarted = build_view(first, scrape(12.0, retries_503=2, retries_connect=0))
    assert restarted.pools[0].retries_per_s == pytest.approx(2 / 2)  # a counter that went down restarted


def test_ttft_quantiles_come_from_the_interval_buckets_only() -> None:
    # Before: 100 fast first tokens. In the interval: 10 more, all between 0.1 s and 1 s.
    view = build_view(scrape(0.0, fast=100, slow=100), scrape(1.0, fast=100, slow=110))
    (model,) = view.models
    assert model.ttft_p50_s == pytest.approx(0.1 + 0.9 * 0.5)
    assert model.ttft_p99_s == pytest.approx(0.1 + 0.9 * 0.99)
    assert model.latency_p99_s is None  # no duration buckets on the page


def test_no_streams_in_the_interval_means_no_quantile() -> None:
    view = build_view(scrape(0.0, ok=1, fast=3, slow=3), scrape(1.0, ok=2, fast=3, slow=3))
    (model,) = view.models
    assert model.requests_per_s == 1.0
    assert (model.ttft_p50_s, model.ttft_p90_s, model.ttft_p99_s) == (None, None, None)


def test_out_of_order_scrapes_and_bad_pages_are_errors() -> None:
    with pytest.raises(ScrapeError, match="out of order"):
        build_view(scrape(5.0), scrape(5.0))
    with pytest.raises(ScrapeError, match="not a Prometheus text page"):
        parse_scrape("igw_requests_total{model=} nonsense\n", {}, at=0.0)


OTHER_FAMILIES = """\
# HELP tenant_requests_total Requests by tenant.
# TYPE tenant_requests_total counter
tenant_requests_total{tenant="t-0",adapter="a-0"} 1
tenant_requests_total{tenant="t-1",adapter="a-1"} 2
  igw_requests_total_extra{model="x"} 5
igw_requests_totally{model="x"} 6
process_cpu_seconds_total 1.5
"""


def test_only_the_lines_top_reads_go_through_the_prometheus_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser is pure Python: a page of many other series (tenants, adapters; a hostile page of
    a million names) took it seconds per refresh (2.8 s for 19 MB) before session s50. What it reads
    is the same as when it parsed the whole page."""
    page = OTHER_FAMILIES + scrape_page(ok=3, picks_a=2) + OTHER_FAMILIES
    parsed: list[str] = []

    def recording(text: str) -> Iterable[Metric]:
        parsed.append(text)
        return text_string_to_metric_families(text)

    monkeypatch.setattr(igw.top.view, "text_string_to_metric_families", recording)
    samples = parse_scrape(page, READY, at=0.0).samples
    (text,) = parsed
    for unread in ("tenant", "process_cpu", "totally", "_extra", "# "):
        assert unread not in text
    assert samples == reference_samples(text_string_to_metric_families(page))
    assert len(samples) == len([line for line in PAGE.splitlines() if line.split("{")[0] in READ_METRICS])


def scrape_page(**counts: float) -> str:
    names = ("ok", "failed", "tokens", "fast", "slow", "picks_a", "picks_b", "retries_503", "retries_connect")
    return PAGE.format(**{**dict.fromkeys(names, 0.0), **counts})


def reference_samples(families: Iterable[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families
        for s in family.samples
        if s.name in READ_METRICS
    }


@pytest.mark.parametrize(
    ("page", "line"),
    [
        ("<html><body>502 Bad Gateway</body></html>\n", 1),
        ('igw_requests_total{model="m"} 1\n{"error": "not metrics"}\n', 2),
    ],
)
def test_a_page_of_html_or_json_is_still_not_a_prometheus_page(page: str, line: int) -> None:
    with pytest.raises(ScrapeError, match=f"not a Prometheus text page \\(line {line}: "):
        parse_scrape(page, {}, at=0.0)


def test_pages_without_readiness_still_show_pods() -> None:
    text = 'igw_endpoint_queue_depth{scheduler="s",endpoint="e:1"} 4\n'
    view = build_view(None, parse_scrape(text, {}, at=0.0))
    (pod,) = view.pods
    assert (pod.pool, pod.endpoint, pod.queue, pod.adapters, pod.flags) == ("s", "e:1", 4.0, None, ())
    (pool,) = view.pools
    assert (pool.model, pool.ready_pods) == (None, 0)


ENTRY: dict[str, Any] = {
    "time": 1_900_000_000.0,
    "request_id": "r1",
    "scheduler": "pool",
    "model": "llama",
    "outcome": "picked",
    "chosen": "b:1",
    "fallbacks": ["a:1"],
    "candidates": 3,
    "scored": [
        {"endpoint": "b:1", "rank": 0, "scores": {"queue": 0.2, "prefix-cache": 0.5, "total": 0.7}},
        {"endpoint": "a:1", "rank": 1, "scores": {"queue": 0.6, "prefix-cache": 0.0, "total": 0.6}},
    ],
    "removed": [{"endpoint": "c:1", "by": "stale or failing metrics"}],
    "reason": "highest score",
    "decision_us": 41.5,
}


def test_a_decision_row_names_the_scorer_that_carried_the_chosen_pod() -> None:
    view = build_view(None, parse_scrape("", {}, at=0.0, decisions=[ENTRY]))
    (row,) = view.decisions
    assert (row.pool, row.model, row.outcome, row.chosen) == ("pool", "llama", "picked", "b:1")
    assert (row.candidates, row.removed, row.leading_scorer, row.decision_us) == (3, 1, "prefix-cache", 41.5)


def test_a_decision_row_counts_every_removed_endpoint_not_only_those_listed() -> None:
    """The gateway lists at most 32 removed endpoints per entry and counts them all in
    ``removed_total`` (:data:`igw.gateway.decision_log.ENTRY_TOP_N`); an older gateway's entry has
    no count and lists them all."""
    listed = [{"endpoint": f"s:{i}", "by": "stale or failing metrics"} for i in range(32)]
    (row,) = build_view(
        None, parse_scrape("", {}, at=0.0, decisions=[{**ENTRY, "removed": listed, "removed_total": 300}])
    ).decisions
    assert row.removed == 300


@pytest.mark.parametrize(
    ("change", "leading"),
    [({"outcome": "saturated", "chosen": None}, None), ({"scored": []}, None)],
    ids=["nothing-chosen", "nothing-scored"],
)
def test_a_decision_without_scores_has_no_leading_scorer(change: dict[str, Any], leading: None) -> None:
    (row,) = build_view(None, parse_scrape("", {}, at=0.0, decisions=[{**ENTRY, **change}])).decisions
    assert row.leading_scorer is leading


def test_a_malformed_decision_entry_names_the_field() -> None:
    broken = {k: v for k, v in ENTRY.items() if k != "candidates"}
    with pytest.raises(ScrapeError, match="/debug/decisions: an entry lacks or mistypes 'candidates'"):
        build_view(None, parse_scrape("", {}, at=0.0, decisions=[broken]))


WORKER_PAGE = """\
# TYPE igw_requests counter
igw_requests_total{{model="llama",code="200"}} {ok}
# TYPE igw_endpoint_picks counter
igw_endpoint_picks_total{{scheduler="pool",endpoint="a:1"}} {picks_a}
igw_endpoint_picks_total{{scheduler="pool",endpoint="b:1"}} {picks_b}
# TYPE igw_endpoint_queue_depth gauge
igw_endpoint_queue_depth{{scheduler="pool",endpoint="a:1"}} 2
# TYPE igw_endpoint_inflight_requests gauge
igw_endpoint_inflight_requests{{scheduler="pool",endpoint="a:1"}} {inflight}
# TYPE igw_endpoint_scrape_age_seconds gauge
igw_endpoint_scrape_age_seconds{{scheduler="pool",endpoint="a:1"}} {age}
# TYPE igw_endpoint_scrape_failing gauge
igw_endpoint_scrape_failing{{scheduler="pool",endpoint="a:1"}} {failing}
# TYPE igw_endpoint_signal_missing gauge
igw_endpoint_signal_missing{{scheduler="pool",endpoint="a:1",signal="vllm:lora_requests_info"}} 1
# TYPE igw_pool_stale_endpoints gauge
igw_pool_stale_endpoints{{scheduler="pool"}} {stale}
"""


def _group_scrape(at: float, workers: list[dict[str, float]]) -> Any:
    """The page a worker group answers: each worker's page labelled and merged as the gateway does."""
    pages = [(i, WORKER_PAGE.format(**values).encode()) for i, values in enumerate(workers)]
    return parse_scrape(merge_pages(pages).decode(), {}, at=at)


def test_a_worker_group_s_pods_sum_the_workers_picks_and_requests_in_flight() -> None:
    """Each worker of ``igw serve --workers N`` counts its own picks and requests in flight; the
    scrape age and flags are the worst any worker routes on; a signal missing is named once."""
    quiet = {"ok": 0, "picks_a": 0, "picks_b": 0, "inflight": 0, "age": 0.05, "failing": 0, "stale": 0}
    before = _group_scrape(10.0, [quiet, quiet])
    after = _group_scrape(
        12.0,
        [
            {"ok": 6, "picks_a": 4, "picks_b": 2, "inflight": 3, "age": 0.02, "failing": 0, "stale": 0},
            {"ok": 10, "picks_a": 6, "picks_b": 0, "inflight": 5, "age": 0.4, "failing": 1, "stale": 2},
        ],
    )
    view = build_view(before, after)
    (pool,) = view.pools
    assert pool.picks_per_s == pytest.approx(6.0)  # (4 + 2 + 6) picks in 2 s
    assert pool.stale_endpoints == 2  # the worst worker's: its copy of the scrapes is behind
    a = next(p for p in view.pods if p.endpoint == "a:1")
    assert a.pick_share == pytest.approx(10 / 12)
    assert a.inflight == 8
    assert a.queue == 2
    assert a.scrape_age_s == pytest.approx(0.4)
    assert a.flags == ("failing", "missing vllm:lora_requests_info")
    (model,) = view.models
    assert model.requests_per_s == pytest.approx(8.0)
