"""The dispatch ledger: which of the router's own dispatches a scrape cannot show yet."""

from __future__ import annotations

import pytest

from igw.scheduling.dispatch_ledger import DispatchLedger
from igw.scheduling.types import RequestOutcome
from tests.scheduling.helpers import ep


def ttft_outcome(key: str, ttft: float | None, *, ok: bool = True) -> RequestOutcome:
    return RequestOutcome(request_id="r", endpoint=key, ok=ok, ttft_s=ttft)


@pytest.mark.parametrize(
    ("dispatches", "scraped_at", "ttft", "now", "expected"),
    [
        pytest.param([0.10, 0.12], 0.11, None, 0.13, 1, id="only-after-the-scrape"),
        pytest.param([0.10, 0.12], 0.10, None, 0.13, 2, id="at-the-scrape-instant-counts"),
        pytest.param([0.10, 0.12, 0.125], 0.0, 0.02, 0.13, 2, id="older-than-measured-ttft-is-admitted"),
        pytest.param([0.10, 0.12], 0.0, 0.5, 0.13, 2, id="slow-endpoint-keeps-them-longer"),
        pytest.param([0.10], None, None, 0.5, 1, id="never-scraped-within-horizon"),
        pytest.param([0.10], None, None, 2.0, 0, id="never-scraped-past-horizon"),
        pytest.param([], 0.0, None, 0.1, 0, id="nothing-dispatched"),
    ],
)
def test_unreflected_count(
    dispatches: list[float], scraped_at: float | None, ttft: float | None, now: float, expected: int
) -> None:
    ledger = DispatchLedger(horizon_s=1.0)
    for t in dispatches:
        ledger.record("e1", now=t)
    if ttft is not None:
        ledger.on_complete(ttft_outcome("e1", ttft))
    assert ledger.unreflected(ep("e1", scraped_at=scraped_at), now=now) == expected


def test_annotate_only_touches_endpoints_with_dispatches_and_prunes() -> None:
    ledger = DispatchLedger(horizon_s=1.0)
    ledger.record("e1", now=0.2)
    ledger.record("e1", now=0.3)
    views = ledger.annotate([ep("e1", scraped_at=0.1), ep("e2", scraped_at=0.1)], now=0.35)
    assert [v.unreflected_dispatches for v in views] == [2, 0]
    # A newer scrape reflects both dispatches: they are dropped for good.
    assert ledger.unreflected(ep("e1", scraped_at=0.31), now=0.35) == 0
    assert ledger.unreflected(ep("e1", scraped_at=0.0), now=0.35) == 0


@pytest.mark.parametrize(
    ("outcome", "learned"),
    [
        pytest.param(ttft_outcome("e1", 0.05), 0.05, id="ok-outcome-learned"),
        pytest.param(ttft_outcome("e1", 0.05, ok=False), None, id="failed-ignored"),
        pytest.param(ttft_outcome("e1", None), None, id="no-ttft-ignored"),
    ],
)
def test_ttft_learning(outcome: RequestOutcome, learned: float | None) -> None:
    ledger = DispatchLedger(horizon_s=1.0)
    ledger.on_complete(outcome)
    assert ledger.ttft.get("e1") == learned


def test_forget_drops_dispatches_and_ttft() -> None:
    ledger = DispatchLedger(horizon_s=1.0)
    ledger.record("e1", now=0.2)
    ledger.on_complete(ttft_outcome("e1", 0.5))
    ledger.forget(["e1"])
    assert ledger.ttft.get("e1") is None
    assert ledger.unreflected(ep("e1", scraped_at=0.0), now=0.3) == 0


def test_annotated_view_keeps_every_other_field() -> None:
    """The annotation copies the view field by field (for speed): a field added to EndpointView and
    not copied there would be lost, which this catches."""
    import dataclasses

    from igw.scheduling.dispatch_ledger import _with_unreflected
    from igw.scheduling.types import EndpointView, EngineMetrics

    values = {
        "key": "e1",
        "metrics": EngineMetrics(waiting=1),
        "scraped_at": 0.5,
        "scrape_failing": True,
        "inflight": 3,
        "inflight_tokens": 900,
        "labels": {"gpu": "h100"},
        "max_model_len": 8192,
        "unreflected_dispatches": 1,
    }
    assert {f.name for f in dataclasses.fields(EndpointView)} == set(values)
    view = EndpointView(**values)  # type: ignore[arg-type]
    assert _with_unreflected(view, 4) == dataclasses.replace(view, unreflected_dispatches=4)


def test_a_released_dispatch_is_no_longer_counted() -> None:
    # A queued request's client went away in the turn its pick was handed over: nothing was sent.
    ledger = DispatchLedger(horizon_s=1.0)
    ledger.record("e1", now=0.10)
    ledger.record("e1", now=0.12)
    assert ledger.release("e1", now=0.12)
    assert ledger.unreflected(ep("e1", scraped_at=0.0), now=0.13) == 1
    assert not ledger.release("e1", now=0.05)  # none made by then
    assert ledger.release("e1", now=0.13)
    assert not ledger.release("e1", now=0.13)  # nothing left to release
    assert not ledger.release("e2", now=0.13)
    assert ledger.unreflected(ep("e1", scraped_at=0.0), now=0.14) == 0


def test_a_moved_dispatch_counts_at_its_new_endpoint_only() -> None:
    # Flow control sends a Critical pick to another candidate: the pick's endpoint must not carry it
    # as phantom load until its next scrape.
    ledger = DispatchLedger(horizon_s=1.0)
    ledger.record("e1", now=0.10)
    ledger.record("e1", now=0.12)
    ledger.move("e1", "e2", now=0.12)
    assert ledger.unreflected(ep("e1", scraped_at=0.0), now=0.13) == 1
    assert ledger.unreflected(ep("e2", scraped_at=0.0), now=0.13) == 1
    ledger.move("e1", "e2", now=0.13)
    ledger.move("e1", "e2", now=0.13)  # nothing left at e1: only counted at e2
    assert ledger.unreflected(ep("e1", scraped_at=0.0), now=0.14) == 0
    assert ledger.unreflected(ep("e2", scraped_at=0.0), now=0.14) == 3
