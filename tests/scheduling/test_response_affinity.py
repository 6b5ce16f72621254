"""A Responses API request continuing a stored response (``previous_response_id``) is picked among
the endpoint that stored it alone: the memory, its bound, the pin, and the notes between workers."""

from __future__ import annotations

import random

import pytest

from igw.scheduling.factory import scheduler_from_weights
from igw.scheduling.response_affinity import DISOWNED, RESPONSE_NOTES, ResponseAffinity
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.types import DecisionKind, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ep


def continuation(previous: str | None, request_id: str = "r2") -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id,
        model="base",
        base_model="base",
        prefix_text="the next turn",
        prompt_tokens=4,
        previous_response_id=previous,
    )


def scheduler(seed: int = 1) -> Scheduler:
    return scheduler_from_weights({"queue": 1}, rng=random.Random(seed))


def stored(s: Scheduler, endpoint: str, response_id: str, *, ok: bool = True, now: float = 0.0) -> None:
    s.on_complete(RequestOutcome("r1", endpoint, ok=ok, response_id=response_id), now=now)


POOL = [ep("idle", waiting=0), ep("busy", waiting=3), ep("other", waiting=2)]


def test_a_continuation_goes_to_the_endpoint_that_stored_its_response_whatever_its_queue() -> None:
    s = scheduler()
    assert s.pick(continuation("resp_1"), POOL, now=0.0).endpoint == "idle"  # unknown: by load
    stored(s, "busy", "resp_1")
    decision = s.pick(continuation("resp_1"), POOL, now=1.0)
    assert (decision.kind, decision.endpoint, decision.fallbacks) == (DecisionKind.PICKED, "busy", ())
    assert decision.removed == {
        "idle": "the previous response is stored elsewhere",
        "other": "the previous response is stored elsewhere",
    }
    assert s.pick(continuation(None), POOL, now=1.0).endpoint == "idle"  # a new conversation: by load


def test_a_full_holder_answers_429_rather_than_a_certain_404_elsewhere() -> None:
    s = scheduler()
    stored(s, "busy", "resp_1")
    full = [ep("idle", waiting=0), ep("busy", waiting=500)]
    decision = s.pick(continuation("resp_1"), full, now=1.0)
    assert decision.kind is DecisionKind.SATURATED
    assert decision.retry_after_s is not None


def test_what_is_not_remembered() -> None:
    s = scheduler()
    stored(s, "busy", "resp_failed", ok=False)  # a failed answer stored nothing
    assert s.pick(continuation("resp_failed"), POOL, now=1.0).endpoint == "idle"
    stored(s, "gone", "resp_gone")  # its endpoint is not in the pool any more
    assert s.pick(continuation("resp_gone"), POOL, now=1.0).endpoint == "idle"
    stored(s, "busy", "resp_3")
    s.on_endpoints_removed(["busy"])  # a pod that comes back has an empty store
    assert s.responses.endpoint_of("resp_3") is None


def test_the_memory_is_bounded_and_forgets_the_least_recently_used() -> None:
    memory = ResponseAffinity(capacity=2)
    memory.remember("a", "p1")
    memory.remember("b", "p2")
    assert memory.endpoint_of("a") == "p1"  # a continuation keeps its id recent
    memory.remember("c", "p3")
    assert (memory.endpoint_of("a"), memory.endpoint_of("b"), memory.endpoint_of("c")) == ("p1", None, "p3")
    assert len(memory) == 2
    with pytest.raises(ValueError, match="capacity"):
        ResponseAffinity(capacity=0)


def test_a_disowned_endpoint_is_forgotten_by_the_other_workers_too() -> None:
    """``igw serve --workers N``: the worker whose poll found the remembered pod answering with
    another response forgets it there, and tells the others (since session s46; before, each worker
    forgot it alone, and the others kept sending that response's polls to the lying pod)."""
    a, b = scheduler(1), scheduler(2)
    a.share_picks()
    b.share_picks()
    stored(a, "busy", "resp_1", now=5.0)
    assert a.pick_notes is not None
    assert b.pick_notes is not None
    b.learn_picks(a.pick_notes.drain(), now=5.1)
    assert b.responses.endpoint_of("resp_1") == "busy"
    a.disown_response("resp_1", "idle", now=6.0)  # not the one remembered: nothing forgotten, nothing told
    assert [n for n in a.pick_notes.drain() if n[1] == RESPONSE_NOTES] == []
    a.disown_response("resp_1", "busy", now=6.0)
    notes = [n for n in a.pick_notes.drain() if n[1] == RESPONSE_NOTES]
    assert notes == [(6.0, RESPONSE_NOTES, "busy", ["resp_1", DISOWNED])]
    assert a.responses.endpoint_of("resp_1") is None
    assert b.learn_picks(notes, now=6.1).learned == 1
    assert b.responses.endpoint_of("resp_1") is None  # b's next poll searches too
    stored(b, "other", "resp_2", now=7.0)
    assert b.learn_picks([(7.0, RESPONSE_NOTES, "busy", ["resp_2", DISOWNED])], now=7.1).learned == 1
    assert b.responses.endpoint_of("resp_2") == "other"  # another endpoint's disowning: kept


def test_a_reload_that_rebuilds_the_scheduler_keeps_the_memory() -> None:
    old, new = scheduler(1), scheduler(2)
    stored(old, "busy", "resp_1")
    new.responses.adopt(old.responses)
    assert new.pick(continuation("resp_1"), POOL, now=1.0).endpoint == "busy"


def test_a_stored_response_travels_to_the_other_workers() -> None:
    """``igw serve --workers N``: a conversation's turns come over different connections, so to
    different workers; each must know where the previous turn was stored."""
    a, b = scheduler(1), scheduler(2)
    a.share_picks()
    b.share_picks()
    stored(a, "busy", "resp_1", now=5.0)
    assert a.pick_notes is not None
    notes = [n for n in a.pick_notes.drain() if n[1] == RESPONSE_NOTES]
    assert notes == [(5.0, RESPONSE_NOTES, "busy", ["resp_1"])]
    assert b.learn_picks(notes, now=5.1).learned == 1
    assert b.pick(continuation("resp_1"), POOL, now=5.2).endpoint == "busy"
    assert b.pick_notes is not None
    assert all(n[1] != RESPONSE_NOTES for n in b.pick_notes.drain())  # learned, not sent on again
    for bad in ([], [""], [5], ["a", "b"], ["", DISOWNED], ["a", DISOWNED, 1], "resp_1"):
        assert b.learn_picks([(5.0, RESPONSE_NOTES, "x", bad)], now=5.1).malformed == 1
