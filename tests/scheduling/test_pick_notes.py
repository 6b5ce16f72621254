"""Pick notes: what a plugin tells the other workers after a pick, and what they learn from it."""

from __future__ import annotations

import random
from dataclasses import replace

import orjson
import pytest

from igw.scheduling.dispatch_ledger import LEDGER_NOTES
from igw.scheduling.factory import default_weights, scheduler_from_weights
from igw.scheduling.framework import SharesPicks
from igw.scheduling.pick_notes import LearnCounts, PickNoteOutbox, sharing_plugins
from igw.scheduling.plugins.backlog_ttft_scorer import BacklogTtftScorer
from igw.scheduling.plugins.lora_slot_filter import LoraSlotFilter
from igw.scheduling.plugins.no_hit_lru_scorer import NoHitLruScorer
from igw.scheduling.plugins.prefill_collision_scorer import PrefillCollisionScorer
from igw.scheduling.plugins.prefix_cache_scorer import STATE_ANY_HIT, PrefixCacheScorer
from igw.scheduling.plugins.prefix_index import prefix_hashes
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import EndpointView, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ctx, ep, req

PROMPT = "You are a careful assistant. " * 20
SECRET = "sk-live-do-not-share"


def test_a_prefix_learned_from_another_scorer_scores_the_same_there() -> None:
    sender, learner = PrefixCacheScorer(auto_tune=False), PrefixCacheScorer(auto_tune=False)
    eps = [ep("a:1"), ep("b:1")]
    picked = ctx(req(PROMPT))
    sender.score(picked, eps)
    sender.on_picked(picked, eps[1])
    note = sender.pick_note(picked, eps[1])
    assert learner.score(ctx(req(PROMPT)), eps) == [0.0, 0.0]
    learner.learn_pick("b:1", orjson.loads(orjson.dumps(note)))  # as it crosses the channel
    expected = sender.score(ctx(req(PROMPT)), eps)
    assert expected == [0.0, 1.0]
    assert learner.score(ctx(req(PROMPT)), eps) == expected


def test_a_prefix_note_holds_hashes_and_capacity_never_the_text() -> None:
    scorer = PrefixCacheScorer(auto_tune=True)
    pod = ep("a:1", block_size=16, num_gpu_blocks=1234)
    picked = ctx(req(PROMPT + SECRET))
    scorer.on_picked(picked, pod)
    note = scorer.pick_note(picked, pod)
    assert isinstance(note, dict)
    assert note["c"] == 1234
    assert note["h"] == picked.state["prefix.hashes"]
    encoded = orjson.dumps(note)
    assert b"careful" not in encoded
    assert SECRET.encode() not in encoded
    assert scorer.pick_note(ctx(req("too short")), pod) is None  # under one block: nothing to share


@pytest.mark.parametrize(
    ("note", "field"),
    [
        pytest.param([1, 2], "is an object", id="not-an-object"),
        pytest.param({"h": "abc", "c": 5}, "field 'h'", id="hashes-not-a-list"),
        pytest.param({"h": [1, "x"], "c": 5}, "field 'h'", id="hash-not-an-int"),
        pytest.param({"h": [1, True], "c": 5}, "field 'h'", id="hash-a-bool"),
        pytest.param({"h": [1], "c": 0}, "field 'c'", id="capacity-zero"),
        pytest.param({"h": [1]}, "field 'c'", id="capacity-missing"),
    ],
)
def test_a_malformed_prefix_note_is_refused_by_field(note: object, field: str) -> None:
    scorer = PrefixCacheScorer()
    with pytest.raises(ValueError, match=field):
        scorer.learn_pick("a:1", note)
    assert scorer.index.entries() == 0


def test_no_hit_lru_shares_cold_picks_only_and_learns_them() -> None:
    sender, learner = NoHitLruScorer(), NoHitLruScorer()
    eps = [ep("a:1"), ep("b:1")]
    cold = ctx(req("x"))
    cold.state[STATE_ANY_HIT] = False
    warm = ctx(req("y"))
    warm.state[STATE_ANY_HIT] = True
    assert sender.pick_note(cold, eps[0]) is True
    assert sender.pick_note(warm, eps[0]) is None
    assert learner.score(ctx(req("z")), eps) == [1.0, 1.0]
    learner.learn_pick("a:1", True)  # a:1 just got a cold request elsewhere: prefer b:1
    assert learner.score(ctx(req("z")), eps) == [0.0, 1.0]
    with pytest.raises(ValueError, match="pick note is true"):
        learner.learn_pick("b:1", 1)


def test_only_plugins_whose_state_is_built_by_picks_alone_share() -> None:
    assert isinstance(PrefixCacheScorer(), SharesPicks)
    assert isinstance(NoHitLruScorer(), SharesPicks)
    # Each of these counts work that completes only in the worker that dispatched it.
    assert not isinstance(LoraSlotFilter(), SharesPicks)
    assert not isinstance(PrefillCollisionScorer(), SharesPicks)
    # Its backlog drains by time alone, so another worker's dispatches may join it (its fits,
    # which pair a dispatch with its own first token, are not shared).
    assert isinstance(BacklogTtftScorer(), SharesPicks)


def test_another_workers_dispatch_counts_in_this_workers_ledger_until_a_scrape_shows_it() -> None:
    """The ledger's notes: worker B counts worker A's dispatch since the pod's scrape (what keeps N
    workers from herding onto one pod between scrapes), and forgets it once a later scrape shows it."""
    a, b, eps, outbox = _two_sharing_workers()
    chosen = a.pick(req(PROMPT, request_id="from-a"), eps, now=10.01).endpoint
    assert chosen is not None
    assert b.ledger is not None
    view = next(e for e in eps if e.key == chosen)
    assert b.ledger.unreflected(view, now=10.02) == 0
    counts = b.learn_picks(outbox.drain(), now=10.02)
    assert (counts.learned, counts.malformed) == (3, 0)
    assert b.ledger.unreflected(view, now=10.02) == 1
    # A scrape after the dispatch reflects it: no longer counted.
    assert b.ledger.unreflected(replace(view, scraped_at=10.015), now=10.02) == 0


@pytest.mark.parametrize("note", ["10.0", None, float("nan"), float("inf"), True, [10.0]])
def test_a_ledger_note_that_is_not_a_finite_time_is_refused(note: object) -> None:
    sched = _scheduler(0)
    counts = sched.learn_picks([[10.0, LEDGER_NOTES, "a:1", note]], now=10.0)
    assert (counts.learned, counts.malformed) == (0, 1)
    assert sched.ledger is not None
    assert sched.ledger.unreflected(ep("a:1", scraped_at=9.0), now=10.0) == 0


def _two_sharing_workers() -> tuple[Scheduler, Scheduler, list[EndpointView], PickNoteOutbox]:
    """Two workers' schedulers sharing their picks over the same two pods, and the first's outbox."""
    a, b = _scheduler(0), _scheduler(1)
    eps = [ep("a:1", scraped_at=10.0), ep("b:1", scraped_at=10.0)]
    outbox = a.share_picks()
    b.share_picks()
    return a, b, eps, outbox


def _scheduler(seed: int) -> Scheduler:
    return scheduler_from_weights(
        default_weights(lora_adapters=False), routing=RoutingSettings(), rng=random.Random(seed)
    )


def test_a_scheduler_notes_its_picks_once_sharing_is_on() -> None:
    sched = _scheduler(0)
    eps = [ep("a:1", scraped_at=10.0), ep("b:1", scraped_at=10.0)]
    sched.pick(req(PROMPT, request_id="before"), eps, now=10.0)
    outbox = sched.share_picks()
    assert sched.share_picks() is outbox
    decision = sched.pick(req(PROMPT, request_id="after"), eps, now=10.1)
    notes = outbox.drain()
    plugins = {plugin for _at, plugin, _key, _note in notes}
    # The default profile's sharing plugins (no-hit-lru-scorer is off by default), and the
    # scheduler's dispatch ledger.
    sharing = {"prefix-cache-scorer", "backlog-ttft-scorer"}
    assert set(sharing_plugins(ws.scorer for ws in sched.profile.scorers)) == sharing
    assert plugins == {*sharing, LEDGER_NOTES}
    assert len(notes) == 3  # one per sharer; the pick before sharing was on is not noted
    assert all(at == 10.1 and key == decision.endpoint for at, _plugin, key, _note in notes)
    assert outbox.drain() == []


def test_the_outbox_wakes_its_transport_once_per_drain_at_the_first_note() -> None:
    """``wake`` runs when a pick puts the first note into an empty outbox, not for every note, and
    again only after a drain (the transport sleeps while there is nothing to send)."""
    sched = _scheduler(0)
    eps = [ep("a:1", scraped_at=10.0), ep("b:1", scraped_at=10.0)]
    outbox = sched.share_picks()
    woken: list[int] = []
    outbox.wake = lambda: woken.append(1)
    sched.pick(req(PROMPT, request_id="one"), eps, now=10.0)
    sched.pick(req(PROMPT + " more", request_id="two"), eps, now=10.1)
    assert woken == [1]
    assert len(outbox.drain()) == 6  # two sharing plugins and the ledger, two picks
    sched.pick(req(PROMPT, request_id="three"), eps, now=10.2)
    assert woken == [1, 1]
    assert len(outbox.drain()) == 3
    sched.pick(req(PROMPT, request_id="alone"), eps[:1], now=10.3)  # one endpoint: no note, no wake
    assert woken == [1, 1]


def test_a_pool_of_one_endpoint_notes_nothing_until_it_grows() -> None:
    sched = _scheduler(0)
    outbox = sched.share_picks()
    lone = [ep("a:1", scraped_at=10.0)]
    for i in range(5):
        assert sched.pick(req(PROMPT + str(i), request_id=f"one-{i}"), lone, now=10.0).endpoint == "a:1"
    # All metrics stale: the in-flight fallback ranks the one endpoint, still nothing to tell.
    assert sched.pick(req(PROMPT, request_id="stale"), lone, now=99.0).endpoint == "a:1"
    assert outbox.drain() == []
    assert outbox.dropped == 0
    grown = [*lone, ep("b:1", scraped_at=10.0)]
    decision = sched.pick(req(PROMPT + "grown", request_id="two"), grown, now=10.1)
    notes = outbox.drain()
    assert {plugin for _at, plugin, _key, _note in notes} == {
        "prefix-cache-scorer",
        "backlog-ttft-scorer",
        LEDGER_NOTES,
    }
    assert all(key == decision.endpoint for _at, _plugin, key, _note in notes)
    # Back to one endpoint (b removed): quiet again.
    sched.pick(req(PROMPT + "shrunk", request_id="one-again"), lone, now=10.2)
    assert outbox.drain() == []


def test_a_pool_narrowed_by_the_request_is_still_noted() -> None:
    """The pool, not what one request's context window leaves of it, decides: another request of the
    same pool could fit both endpoints, so the others' indexes must learn this pick."""
    sched = _scheduler(0)
    outbox = sched.share_picks()
    eps = [
        replace(ep("a:1", scraped_at=10.0), max_model_len=100_000),
        replace(ep("b:1", scraped_at=10.0), max_model_len=64),
    ]
    decision = sched.pick(req(PROMPT, request_id="long"), eps, now=10.0)
    assert decision.endpoint == "a:1"
    assert {key for _at, _plugin, key, _note in outbox.drain()} == {"a:1"}


def test_another_scheduler_learns_the_notes_and_picks_the_same_pod() -> None:
    eps = [ep("a:1", scraped_at=10.0), ep("b:1", scraped_at=10.0)]
    for seed in range(6):  # whichever pod the first scheduler picks, the second follows
        first, second = _scheduler(seed), _scheduler(100 + seed)
        outbox = first.share_picks()
        chosen = first.pick(req(PROMPT + str(seed), request_id="a"), eps, now=10.0).endpoint
        counts = second.learn_picks(outbox.drain(), now=10.05)
        assert counts.learned >= 1
        assert counts.stale == counts.unknown == counts.malformed == 0
        again = second.pick(req(PROMPT + str(seed), request_id="b"), eps, now=10.06)
        assert chosen is not None
        assert again.endpoint == chosen
        assert again.scores[chosen]["prefix-cache-scorer"] > 0


def test_stale_unknown_and_malformed_notes_are_counted_not_learned() -> None:
    sched = _scheduler(0)
    threshold = sched.settings.stale_threshold_s
    note = {"h": [1, 2, 3], "c": 100}
    counts = sched.learn_picks(
        [
            [10.0 - threshold - 0.01, "prefix-cache-scorer", "a:1", note],  # older than the threshold
            [9.9, "no-such-plugin", "a:1", note],
            [9.9, "prefix-cache-scorer", "a:1", {"h": "x", "c": 1}],
            [9.9, "prefix-cache-scorer", "a:1"],
            ["late", "prefix-cache-scorer", "a:1", note],
            [9.9, "prefix-cache-scorer", "a:1", note],
        ],
        now=10.0,
    )
    assert counts == LearnCounts(learned=1, stale=1, unknown=1, malformed=3)
    [prefix] = [ws.scorer for ws in sched.profile.scorers if isinstance(ws.scorer, PrefixCacheScorer)]
    assert prefix.index.size("a:1") == 3


def test_a_full_outbox_drops_the_oldest_and_counts() -> None:
    scorer = PrefixCacheScorer(auto_tune=False)
    outbox = PickNoteOutbox([scorer], capacity=3)
    pod = ep("a:1")
    for i in range(5):
        outbox.record(ctx(req(f"{i}" * 64), now=float(i)), pod)
    assert outbox.dropped == 2
    assert [at for at, *_ in outbox.drain()] == [2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="capacity: must be at least 1"):
        PickNoteOutbox([scorer], capacity=0)


def sized(request: RoutingRequest, tokens: int) -> RoutingRequest:
    return replace(request, prompt_tokens=tokens)


def _backlog_scorer_with_a_model(key: str) -> BacklogTtftScorer:
    """A backlog scorer that has measured ``key`` (intercept 10 ms, 25 µs per prompt token), without
    the ``pendingFloor``: a note carries the backlog, not the pending dispatch, whose first token only
    the sender hears (the floor is of a worker's own dispatches)."""
    scorer = BacklogTtftScorer(pending_floor=0.0)
    for i in range(20):
        tokens = 100 + 97 * (i % 11)
        picked = ctx(sized(req("", request_id=f"m{i}"), tokens), now=1000.0 * (i + 1))
        scorer.on_picked(picked, ep(key))
        scorer.on_complete(
            RequestOutcome(
                request_id=f"m{i}", endpoint=key, ok=True, ttft_s=0.010 + 25e-6 * tokens, prompt_tokens=tokens
            ),
            now=1000.0 * (i + 1) + 1,
        )
    return scorer


def test_a_backlog_note_makes_the_learner_predict_the_senders_backlog() -> None:
    sender, learner = _backlog_scorer_with_a_model("a:1"), _backlog_scorer_with_a_model("a:1")
    t0 = 100_000.0
    picked = ctx(sized(req(PROMPT + SECRET, request_id="big"), 3000), now=t0)
    sender.on_picked(picked, ep("a:1"))
    note = sender.pick_note(picked, ep("a:1"))
    assert isinstance(note, dict)
    assert note["t"] == t0
    assert note["n"] == 3000.0
    encoded = orjson.dumps(note)
    assert SECRET.encode() not in encoded  # numbers only
    later = t0 + 0.02
    assert learner.predicted([ep("a:1")], tokens=500, now=later) != sender.predicted(
        [ep("a:1")], tokens=500, now=later
    )
    learner.learn_pick("a:1", orjson.loads(encoded))
    assert learner.predicted([ep("a:1")], tokens=500, now=later) == pytest.approx(
        sender.predicted([ep("a:1")], tokens=500, now=later)
    )


def test_a_late_backlog_note_adds_only_what_is_left_of_it() -> None:
    learner = _backlog_scorer_with_a_model("a:1")
    t0 = 100_000.0
    own = ctx(sized(req("", request_id="own"), 2000), now=t0 + 0.01)
    learner.predicted([ep("a:1")], tokens=2000, now=t0 + 0.01)  # the pick's own cycle, as scored
    learner.on_picked(own, ep("a:1"))
    drain = 25e-6 + 0.010 / max(learner.fits["a:1"].mean_x, 2000)
    before = learner.backlogs["a:1"].tokens
    learner.learn_pick("a:1", {"t": t0, "n": 1000, "d": 1.0})  # picked 10 ms before our own
    # Its 10 ms head start drained part of it; the sender's rate is not used when we have a model.
    assert learner.backlogs["a:1"].tokens == pytest.approx(before + 1000 - 0.01 / drain)
    learner.learn_pick("a:1", {"t": t0 - 10.0, "n": 1000, "d": 1.0})  # long drained
    assert learner.backlogs["a:1"].tokens == pytest.approx(before + 1000 - 0.01 / drain)


def test_a_backlog_note_for_an_unmeasured_pod_drains_at_the_senders_rate() -> None:
    learner = BacklogTtftScorer()
    learner.learn_pick("a:1", {"t": 10.0, "n": 1000, "d": 0.001})
    assert learner.backlogs["a:1"].now(10.5, 0.001) == pytest.approx(500.0)
    learner.learn_pick("a:1", {"t": 10.5, "n": 100, "d": 0.001})
    assert learner.backlogs["a:1"].tokens == pytest.approx(600.0)
    assert learner.backlogs["a:1"].at == 10.5


def test_no_backlog_note_while_the_candidates_are_one_kind_of_hardware() -> None:
    scorer = BacklogTtftScorer()
    alike = [ep("a:1", num_gpu_blocks=10_000, block_size=16), ep("b:1", num_gpu_blocks=10_000, block_size=16)]
    unlike = [ep("a:1", num_gpu_blocks=40_000, block_size=16), ep("b:1", num_gpu_blocks=5_000, block_size=16)]
    for candidates, noted in ((alike, False), (unlike, True)):
        picked = ctx(sized(req("", request_id=f"r{noted}"), 500), now=10.0)
        assert scorer.score(picked, candidates)
        scorer.on_picked(picked, candidates[0])
        assert (scorer.pick_note(picked, candidates[0]) is not None) is noted


@pytest.mark.parametrize(
    ("note", "field"),
    [
        pytest.param([1, 2, 3], "is an object", id="not-an-object"),
        pytest.param({"t": "now", "n": 1, "d": 0.1}, "field 't'", id="time-not-a-number"),
        pytest.param({"t": 1.0, "d": 0.1}, "field 'n'", id="tokens-missing"),
        pytest.param({"t": 1.0, "n": float("nan"), "d": 0.1}, "field 'n'", id="tokens-not-finite"),
        pytest.param({"t": 1.0, "n": True, "d": 0.1}, "field 'n'", id="tokens-a-bool"),
        pytest.param({"t": 1.0, "n": -5, "d": 0.1}, "must not be negative", id="negative-tokens"),
        pytest.param({"t": 1.0, "n": 5, "d": -0.1}, "must not be negative", id="negative-drain"),
    ],
)
def test_a_malformed_backlog_note_is_refused_by_field(note: object, field: str) -> None:
    scorer = BacklogTtftScorer()
    with pytest.raises(ValueError, match=field):
        scorer.learn_pick("a:1", note)
    assert scorer.backlogs == {}


def test_a_dispatch_moved_after_its_pick_is_noted_at_its_new_endpoint() -> None:
    """Flow control steers a pick to another endpoint: this worker's ledger moves the dispatch, and
    the ledger's note (not yet sent) names the new endpoint, so another worker's ledger agrees. The
    prefix index's note keeps the picked endpoint, as this worker's own index does."""
    a, b, eps, outbox = _two_sharing_workers()
    picked = a.pick(req(PROMPT, request_id="steered"), eps, now=10.01).endpoint
    assert picked is not None
    other = next(e.key for e in eps if e.key != picked)
    a.move_dispatch(picked, other, now=10.011)
    notes = outbox.drain()
    assert {(n[1], n[2]) for n in notes if n[1] == LEDGER_NOTES} == {(LEDGER_NOTES, other)}
    assert {n[2] for n in notes if n[1] != LEDGER_NOTES} == {picked}
    b.learn_picks(notes, now=10.02)
    assert a.ledger is not None
    assert b.ledger is not None
    for view in eps:
        assert b.ledger.unreflected(view, now=10.02) == a.ledger.unreflected(view, now=10.02)
    assert b.ledger.unreflected(next(e for e in eps if e.key == other), now=10.02) == 1


def test_a_released_dispatch_is_neither_counted_nor_noted() -> None:
    """A pick handed to a queued request whose client went away in that turn is never sent: this
    worker's ledger forgets it and its note, still in the outbox, is withdrawn, so another worker's
    ledger does not count it either. Without the pick's request id the prefix index's note stays, as
    this worker's index does."""
    a, b, eps, outbox = _two_sharing_workers()
    picked = a.pick(req(PROMPT, request_id="unsent"), eps, now=10.01).endpoint
    assert picked is not None
    a.release_dispatch(picked, now=10.011)
    notes = outbox.drain()
    assert [n for n in notes if n[1] == LEDGER_NOTES] == []
    assert {n[2] for n in notes if n[1] != LEDGER_NOTES} == {picked}
    b.learn_picks(notes, now=10.02)
    assert a.ledger is not None
    assert b.ledger is not None
    for view in eps:
        assert a.ledger.unreflected(view, now=10.02) == 0
        assert b.ledger.unreflected(view, now=10.02) == 0


def test_a_dispatch_no_pick_chose_is_counted_and_noted_in_a_pool_of_any_size() -> None:
    """Flow control's preemption sends a saturated pick's request to an endpoint without a pick: the
    ledger counts it, and so do the other workers' ledgers through its note (also in a one-endpoint
    pool, where picks are not noted: there flow control reads the same count)."""
    a, b, eps, outbox = _two_sharing_workers()
    a.record_dispatch("b:1", now=10.01)
    a.record_dispatch("a:1", now=10.012)
    notes = outbox.drain()
    assert notes == [(10.01, LEDGER_NOTES, "b:1", 10.01), (10.012, LEDGER_NOTES, "a:1", 10.012)]
    b.learn_picks(notes, now=10.02)
    assert a.ledger is not None
    assert b.ledger is not None
    for view in eps:
        assert a.ledger.unreflected(view, now=10.02) == 1
        assert b.ledger.unreflected(view, now=10.02) == 1


def test_a_request_sent_without_a_pick_is_learnt_as_a_pick_of_that_endpoint_alone() -> None:
    """A continuation's search sends a request to a pod of another canary version's pool
    (``Scheduler.pick_sent``): that pool's scheduler learns it as a pick there - the prefix index
    places the prompt on that pod, the ledger counts it - and, the pool having two pods, the other
    worker learns it through the notes. Taken back with its request id, nothing stays. A pod the
    pick would not choose (saturated) is counted by the ledger alone, as ``record_dispatch``."""
    a, b, eps, outbox = _two_sharing_workers()
    assert a.pick_sent(req(PROMPT, request_id="sent"), eps, "b:1", now=10.01) is True
    b.learn_picks(outbox.drain(), now=10.02)
    for sched in (a, b):
        (prefix,) = [p for p in sched.plugins if isinstance(p, PrefixCacheScorer)]
        assert (prefix.index.size("a:1"), prefix.index.size("b:1") > 0) == (0, True)
        assert sched.ledger is not None
        assert [sched.ledger.unreflected(v, now=10.02) for v in eps] == [0, 1]
    a.release_dispatch("b:1", now=10.03, request_id="sent")
    (prefix,) = [p for p in a.plugins if isinstance(p, PrefixCacheScorer)]
    assert a.ledger is not None
    assert (prefix.index.size("b:1"), a.ledger.unreflected(eps[1], now=10.03)) == (0, 0)
    full = [eps[0], ep("b:1", scraped_at=10.0, waiting=1000, kv=1.0)]
    assert a.pick_sent(req(PROMPT, request_id="full"), full, "b:1", now=10.04) is False
    assert (prefix.index.size("b:1"), a.ledger.unreflected(full[1], now=10.04)) == (0, 1)


def test_a_note_added_outside_a_pick_keeps_the_outbox_bounds_and_wakes_it_once() -> None:
    outbox = PickNoteOutbox([], capacity=2)
    woken: list[int] = []
    outbox.wake = lambda: woken.append(1)
    for at in (1.0, 2.0, 3.0):
        outbox.add(at, "p", "a", at)
    assert (outbox.dropped, woken) == (1, [1])
    assert outbox.drain() == [(2.0, "p", "a", 2.0), (3.0, "p", "a", 3.0)]
    outbox.add(4.0, "p", "a", 4.0)
    assert woken == [1, 1]


def test_retarget_changes_only_the_latest_note_of_that_plugin_and_endpoint() -> None:
    outbox = PickNoteOutbox([])
    outbox._notes.extend([(1.0, "p", "a", 1), (2.0, "q", "a", 2), (3.0, "p", "a", 3), (4.0, "p", "b", 4)])
    assert outbox.retarget("p", "a", "c")
    assert not outbox.retarget("p", "z", "c")
    assert outbox.drain() == [(1.0, "p", "a", 1), (2.0, "q", "a", 2), (3.0, "p", "c", 3), (4.0, "p", "b", 4)]


def _prefix_scorer(sched: Scheduler) -> PrefixCacheScorer:
    (scorer,) = [p for p in sched.plugins if isinstance(p, PrefixCacheScorer)]
    return scorer


@pytest.mark.parametrize("steered", [False, True], ids=["released", "steered"])
def test_a_pick_not_sent_where_it_was_picked_leaves_no_prefix_there_in_any_worker(steered: bool) -> None:
    """Given the pick's request id, a released pick's prefix note is withdrawn and the prompt taken
    out of this worker's index; a steered pick's is placed, in both workers, on the pod it went to."""
    a, b, eps, outbox = _two_sharing_workers()
    picked = a.pick(req(PROMPT, request_id="q"), eps, now=10.01).endpoint
    assert picked is not None
    other = next(e for e in eps if e.key != picked)
    if steered:
        a.move_dispatch(picked, other.key, now=10.011, request_id="q", sent_to=other)
    else:
        a.release_dispatch(picked, now=10.011, request_id="q")
    b.learn_picks(outbox.drain(), now=10.02)
    for sched in (a, b):
        holders = _prefix_scorer(sched).index.match(
            prefix_hashes("base", PROMPT, block_chars=64, max_blocks=256)
        )
        assert holders == ({other.key: len(PROMPT) // 64} if steered else {})
