"""One cluster's heartbeat from its gateway replicas' documents (pure: an injected clock)."""

from __future__ import annotations

import dataclasses

import pytest

from igw.gateway.heartbeat_message import Heartbeat, PoolLoad
from igw.global_router.replicas import ReplicaMerge, merged
from tests.global_router.support import beat


def test_one_replica_is_its_own_cluster_state_with_the_merged_seq() -> None:
    merge = ReplicaMerge(staleness_s=3.0)
    got = merge.merge({"gw-1": beat("a", seq=41, saturation=0.3, ttft_p99=0.2)}, now=0.0)
    assert got == dataclasses.replace(beat("a", seq=41, saturation=0.3, ttft_p99=0.2), seq=1)
    assert merge.merge({}, now=1.0) is None


def test_replicas_merge_counts_as_largest_rates_as_sums_saturation_as_mean_ttft_as_largest() -> None:
    pool = PoolLoad(model="llama", endpoints_total=4, endpoints_fresh=4, saturation=0.5, queue_depth=3)
    one = dataclasses.replace(
        beat("a", saturation=0.2, ttft_p99=0.4, models=("llama",)),
        endpoints_total=4, endpoints_fresh=4, queue_depth=3, requests_per_s=10.0, rate_429_per_s=1.0,
        ttft_p50_s=0.1, sent_at=100.0, pools={"llama": pool},
    )  # fmt: skip
    two = dataclasses.replace(
        beat("a", saturation=0.6, ttft_p99=None, models=("llama", "llama-lora")),
        endpoints_total=4, endpoints_fresh=2, queue_depth=7, requests_per_s=30.0, rate_429_per_s=0.5,
        ttft_p50_s=0.3, sent_at=101.0,
        pools={"llama": dataclasses.replace(pool, endpoints_fresh=2, saturation=1.0, queue_depth=7)},
    )  # fmt: skip
    got = merged([one, two], seq=9, draining=False)
    assert (got.seq, got.sent_at, got.models) == (9, 101.0, ("llama", "llama-lora"))
    assert (got.endpoints_total, got.endpoints_fresh, got.queue_depth) == (4, 4, 7)
    assert got.saturation == pytest.approx(0.4)
    assert (got.ttft_p50_s, got.ttft_p90_s, got.ttft_p99_s) == (0.3, None, 0.4)
    assert (got.requests_per_s, got.rate_429_per_s) == (40.0, 1.5)
    assert got.pools == {
        "llama": PoolLoad(model="llama", endpoints_total=4, endpoints_fresh=4, saturation=0.75, queue_depth=7)
    }


def test_the_cluster_stays_fresh_while_any_replica_is_and_a_silent_replica_stops_counting() -> None:
    merge = ReplicaMerge(staleness_s=3.0)
    first = merge.merge({"gw-1": beat("a", seq=1, saturation=0.9), "gw-2": beat("a", seq=1)}, now=0.0)
    assert first is not None
    assert first.saturation == pytest.approx(0.45)
    # gw-1 was killed: its field stays behind with the same seq; gw-2 goes on.
    later = merge.merge({"gw-1": beat("a", seq=1, saturation=0.9), "gw-2": beat("a", seq=2)}, now=2.0)
    assert later is not None
    assert later.seq == 2
    assert later.saturation == pytest.approx(0.45)  # gw-1 still within the staleness
    after = merge.merge({"gw-1": beat("a", seq=1, saturation=0.9), "gw-2": beat("a", seq=3)}, now=3.5)
    assert after is not None
    assert (after.seq, after.saturation) == (3, 0.0)  # gw-1 stale: left out


def test_when_no_replica_changes_the_merged_seq_stops_so_the_cluster_goes_stale() -> None:
    merge = ReplicaMerge(staleness_s=3.0)
    beats = {"gw-1": beat("a", seq=5), "gw-2": beat("a", seq=8)}
    assert merge.merge(beats, now=0.0) is not None
    for now in (1.0, 4.0, 60.0):
        still = merge.merge(beats, now=now)
        assert still is not None
        assert still.seq == 1


def test_a_replica_draining_in_a_rolling_update_does_not_drain_the_cluster_but_the_last_ones_do() -> None:
    merge = ReplicaMerge(staleness_s=3.0)
    rolling = merge.merge(
        {"gw-1": beat("a", seq=1, draining=True, saturation=1.0), "gw-2": beat("a", seq=1, saturation=0.2)},
        now=0.0,
    )
    assert rolling is not None
    assert not rolling.draining
    assert rolling.saturation == 0.2  # the draining replica takes no new requests: not in the load
    down = merge.merge(
        {"gw-1": beat("a", seq=2, draining=True), "gw-2": beat("a", seq=2, draining=True)}, now=1.0
    )
    assert down is not None
    assert down.draining


def test_a_replica_whose_field_is_gone_is_forgotten_and_a_new_one_counts_as_news() -> None:
    merge = ReplicaMerge(staleness_s=3.0)
    merge.merge({"gw-1": beat("a", seq=7)}, now=0.0)
    # gw-1 stopped (its field removed); gw-3 starts with a seq another replica once had.
    got = merge.merge({"gw-3": beat("a", seq=7)}, now=5.0)
    assert isinstance(got, Heartbeat)
    assert got.seq == 2
