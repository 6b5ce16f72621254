"""Splitting the slowest Critical requests of a live overload run by where their time went."""

from __future__ import annotations

import pytest

from igw.bench.overload_live import LiveArm, live_requests
from igw.bench.overload_report import critical_tail
from igw.bench.overload_tail import (
    TailRow,
    access_records,
    mean_parts,
    request_id,
    slowest,
    split,
    tail_markdown,
)
from igw.bench.stats import RequestSample
from igw.sim.engine import EngineRequest
from igw.sim.server import PodArrival


def _pod(
    arrival: float,
    scheduled: float,
    token: float,
    *,
    running: int = 7,
    waiting: int = 1,
    written: float = 0.0,
) -> PodArrival:
    """A pod's record: taken in at ``arrival``, started at ``scheduled``, first token at ``token`` on
    the engine's clock, written ``written`` seconds after that on the wall clock."""
    req = EngineRequest(
        request_id="cmpl-pod-1",
        prompt_tokens=3,
        max_output_tokens=32,
        block_hashes=(),
        adapter=None,
        arrival=arrival,
    )
    req.first_scheduled_at, req.first_token_at = scheduled, token
    return PodArrival(req, running, waiting, taken_s=arrival, first_token_s=token + written)


def test_access_records_are_read_by_request_id_and_other_lines_skipped() -> None:
    lines = [
        "serving 1 scheduler(s) at http://127.0.0.1:1234",
        'INFO igw.access {"request_id": "ovl-3", "ttft_ms": 41.5, "queue_ms": 12.0}',
        '{"request_id": "ovl-4", "ttft_ms": 9.0}',
        '{"no_id": 1}',
        "{not json",
    ]
    records = access_records(lines)
    assert set(records) == {"ovl-3", "ovl-4"}
    assert records["ovl-3"]["queue_ms"] == 12.0


def test_a_request_is_split_into_its_parts_which_add_up_to_the_clients_ttft() -> None:
    # Client 60 ms; the gateway saw 50 ms of it, 12 in its queue; the pod took it in at 100.000 s,
    # started it at 100.020 and had its first token at 100.027.
    row = split(5, 1.5, 0.060, {"ttft_ms": 50.0, "queue_ms": 12.0}, _pod(100.0, 100.020, 100.027))
    assert row.queue_s == pytest.approx(0.012)
    assert row.pod_queue_s == pytest.approx(0.020)
    assert row.first_step_s == pytest.approx(0.007)
    assert row.gateway_s == pytest.approx(0.050 - 0.012 - 0.027)
    assert row.client_side_s == pytest.approx(0.010)
    parts = [row.queue_s, row.gateway_s, row.pod_queue_s, row.first_step_s, row.client_side_s]
    assert sum(p for p in parts if p is not None) == pytest.approx(row.client_s)
    assert (row.running, row.waiting) == (7, 1)


def test_the_pods_part_is_its_wall_clock_time_to_the_written_token_and_the_step_its_engine_length() -> None:
    # The engine's clock ran behind the wall and dated the step before the arrival; the token was
    # written 2 ms after the engine's first-token time.
    pod = _pod(10.0, 9.995, 10.004, written=0.002)
    row = split(1, 0.0, 0.030, {"ttft_ms": 25.0}, pod)
    assert row.first_step_s == pytest.approx(0.009)
    assert row.pod_queue_s == 0.0  # never negative
    assert row.gateway_s == pytest.approx(0.025 - 0.006)
    late = split(1, 0.0, 0.050, {"ttft_ms": 45.0}, _pod(10.0, 10.020, 10.027, written=0.003))
    assert late.pod_queue_s == pytest.approx(0.023)  # the queue, and the wait for the write
    unwritten = _pod(10.0, 10.0, 10.007)
    unwritten.first_token_s = None  # an answer that was not streamed
    assert split(1, 0.0, 0.030, {"ttft_ms": 25.0}, unwritten).pod_queue_s is None


def test_a_request_not_queued_by_the_gateway_has_no_queue_time_and_unknown_parts_stay_unknown() -> None:
    row = split(1, 0.0, 0.030, {"ttft_ms": 25.0}, None)
    assert row.queue_s == 0.0
    assert (row.gateway_s, row.pod_queue_s, row.first_step_s, row.running) == (None, None, None, None)
    assert row.client_side_s == pytest.approx(0.005)
    missing = split(2, 0.0, 0.030, None, _pod(1.0, 1.0, 1.007))
    assert (missing.queue_s, missing.gateway_s, missing.client_side_s) == (None, None, None)
    assert missing.first_step_s == pytest.approx(0.007)


def test_slowest_takes_the_top_percent_at_least_one_slowest_first() -> None:
    ttfts = {i: i / 1000 for i in range(250)}
    assert slowest(ttfts) == [249, 248, 247]  # ceil(1 % of 250)
    assert slowest({7: 0.1}) == [7]
    assert slowest({}) == []
    assert slowest({1: 0.2, 2: 0.2, 3: 0.1}, fraction=0.5) == [1, 2]  # ties: the lower index first


def test_means_leave_out_unknown_parts_and_the_table_says_who_found_the_batch_full() -> None:
    rows = [
        TailRow(0, 0.0, 0.1, 0.0, 0.01, 0.05, 0.007, 0.003, 8, 0),
        TailRow(1, 0.1, 0.2, 0.1, None, None, None, 0.004, None, None),
        TailRow(2, 0.2, 0.05, 0.0, 0.01, 0.001, 0.007, 0.002, 3, 0),
    ]
    means = mean_parts(rows)
    assert means["queue_s"] == pytest.approx(0.1 / 3)
    assert means["pod_queue_s"] == pytest.approx((0.05 + 0.001) / 2)
    assert mean_parts([])["queue_s"] is None
    text = "\n".join(tail_markdown("flow-control", rows[:1], rows, batch=8))
    assert "| ovl-0 | 0.00 | 100.0 | 0.0 | 10.0 | 50.0 | 7.0 | 3.0 | 8 / 0 |" in text
    assert "| mean of the tail | | 100.0 |" in text
    assert "100% found the batch full" in text  # the tail's one row
    assert "50% found the batch full" in text  # of the two rows whose pod state is known


def test_critical_tail_joins_samples_access_log_and_pod_by_request_id() -> None:
    requests = live_requests(40.0, 20.0, seed=3)
    samples, access, arrivals = [], {}, {}
    for i, r in enumerate(requests):
        critical = dict(r.headers)["x-gateway-inference-objective"] == "Critical"
        ttft = 0.5 + i / 1000 if critical and i % 50 == 0 else 0.02
        samples.append(RequestSample("gw", True, r.at_s, ttft, 0.2, 0.005))
        access[request_id(i)] = {"request_id": request_id(i), "ttft_ms": ttft * 1000 - 1}
        arrivals[request_id(i)] = _pod(10.0, 10.001, 10.008)
    arm = LiveArm("flow-control", 1.5, requests, samples, access, arrivals)
    tail, every = critical_tail(arm)
    critical_indexes = [i for i, r in enumerate(requests) if arm.band_of(r) == 1]
    assert len(every) == len(critical_indexes)
    assert len(tail) == max(1, -(-len(critical_indexes) // 100))
    assert tail[0].client_s == max(r.client_s for r in every)
    assert all(dict(requests[r.index].headers)["x-request-id"] == request_id(r.index) for r in tail)
    assert tail[0].client_side_s == pytest.approx(0.001)
