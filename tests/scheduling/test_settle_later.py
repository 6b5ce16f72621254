"""A pick made with ``settle_later`` keeps its own bookkeeping (the dispatch ledger's record,
``on_picked``, the pick notes) until :meth:`Scheduler.settle` - which every later call that reads
that state runs first - and so decides exactly as a pick that settles at once."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from igw.config.model import LabelSelector, SchedulerSpec
from igw.scheduling.factory import scheduler_from_picker_config, scheduler_from_spec
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.scheduler import PENDING_SCORES, Scheduler
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import DecisionKind, EndpointKey, RequestOutcome, RoutingDecision
from igw.sim.spec import PodSpec
from tests.scheduling.helpers import Recording, ep, req, run_loaded_mixed_fleet

PROMPT = "You are a careful assistant. Answer in one line. " * 8


def _scheduler(seed: int) -> Scheduler:
    spec = SchedulerSpec(name="s", model_selector=LabelSelector(), model_name="m")
    return scheduler_from_spec(spec, rng=random.Random(seed))


def test_picks_settled_later_decide_exactly_as_picks_settled_at_once_on_a_loaded_fleet() -> None:
    later, at_once = Recording(_scheduler(7), settle_later=True), Recording(_scheduler(7), settle_later=False)
    run_loaded_mixed_fleet(later, seed=3)
    run_loaded_mixed_fleet(at_once, seed=3)
    assert len(later.decisions) == len(at_once.decisions) == 480
    assert later.decisions == at_once.decisions  # pick, fallbacks, every weighted score, reason
    assert later.left_unsettled > 100  # the next pick, not an outcome, settled many of them
    assert at_once.left_unsettled == 0
    prefix = [d.scores[d.endpoint].get("prefix-cache-scorer", 0.0) for d in later.decisions if d.endpoint]
    assert max(prefix) > 0  # the deferred prefix inserts were there for the picks after them


def test_interleaved_first_tokens_outcomes_and_utilisation_see_the_same_state() -> None:
    """Random picks (fresh scrapes, dispatches between them), first tokens, outcomes and
    ``utilisation`` reads in a random order: every answer the same with and without settling later."""
    rng = random.Random(11)
    later, at_once = _scheduler(5), _scheduler(5)
    keys = [f"10.0.0.{i}:8000" for i in range(4)]
    picked: list[tuple[str, EndpointKey]] = []
    now = 100.0
    for step in range(400):
        now += rng.choice((0.001, 0.01, 0.05))
        views = [
            ep(
                k,
                waiting=rng.randrange(4),
                running=rng.randrange(8),
                kv=rng.random() * 0.6,
                scraped_at=now - 0.02,
            )
            for k in keys
        ]
        op = rng.random()
        if op < 0.55 or not picked:
            rid = f"r{step}"
            request = req(PROMPT[: rng.randrange(40, len(PROMPT))] + str(rng.randrange(6)), request_id=rid)
            a = later.pick(request, views, now=now, settle_later=True)
            b = at_once.pick(request, views, now=now)
            assert a == b, step
            if a.endpoint is not None:
                picked.append((rid, a.endpoint))
        elif op < 0.75:
            rid, key = picked[rng.randrange(len(picked))]
            outcome = RequestOutcome(request_id=rid, endpoint=key, ok=True, ttft_s=rng.random() / 10)
            later.on_first_token(outcome, now=now)
            at_once.on_first_token(outcome, now=now)
        elif op < 0.9:
            rid, key = picked.pop(rng.randrange(len(picked)))
            outcome = RequestOutcome(
                request_id=rid,
                endpoint=key,
                ok=True,
                ttft_s=rng.random() / 10,
                prompt_tokens=100,
                output_tokens=20,
            )
            later.on_complete(outcome, now=now)
            at_once.on_complete(outcome, now=now)
        else:
            assert later.utilisation(views, now=now) == at_once.utilisation(views, now=now), step


def _recorded(sched: Scheduler) -> int:
    """Dispatches in the ledger (the bookkeeping's first part) for every endpoint."""
    assert sched.ledger is not None
    return sum(len(times) for times in sched.ledger._pending.values())


SETTLING: dict[str, Callable[[Scheduler, EndpointKey], object]] = {
    "settle": lambda s, key: s.settle(),
    "next pick": lambda s, key: s.pick(req("other", request_id="r2"), [ep(key, scraped_at=10.0)], now=10.2),
    "first token": lambda s, key: s.on_first_token(
        RequestOutcome(request_id="r1", endpoint=key, ok=True, ttft_s=0.05), now=10.1
    ),
    "outcome": lambda s, key: s.on_complete(RequestOutcome(request_id="r1", endpoint=key, ok=True), now=10.1),
    "utilisation": lambda s, key: s.utilisation([ep(key, scraped_at=10.0)], now=10.1),
    "endpoints removed": lambda s, key: s.on_endpoints_removed(["gone:1"]),
    "pick sharing on": lambda s, key: s.share_picks(),
    "learning picks": lambda s, key: s.learn_picks([], now=10.1),
}


@pytest.mark.parametrize("call", sorted(SETTLING))
def test_a_pick_settled_later_runs_its_bookkeeping_at_the_first_call_that_reads_it(call: str) -> None:
    sched = _scheduler(1)
    key = "a:1"
    decision = sched.pick(
        req(PROMPT, request_id="r1"), [ep(key, scraped_at=10.0)], now=10.0, settle_later=True
    )
    assert decision.endpoint == key
    assert _recorded(sched) == 0  # not yet: the ledger has no record of it
    assert sched._unsettled is not None
    SETTLING[call](sched, key)
    assert sched._unsettled is None
    assert _recorded(sched) == (2 if call == "next pick" else 1)  # recorded now (and the next pick's own)


def test_a_pick_settled_at_once_runs_its_bookkeeping_in_the_pick() -> None:
    sched = _scheduler(1)
    sched.pick(req(PROMPT, request_id="r1"), [ep("a:1", scraped_at=10.0)], now=10.0)
    assert _recorded(sched) == 1
    assert sched._unsettled is None
    sched.settle()  # nothing due: no second record
    assert _recorded(sched) == 1


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param([PodSpec(preset="llama-3.1-8b/h100", name="only")], id="one pod"),
        pytest.param(None, id="mixed fleet"),
    ],
)
def test_forced_choices_settled_later_decide_and_score_exactly_as_picks_settled_at_once(
    pods: list[PodSpec] | None,
) -> None:
    """The DES with every pick settled later and forced choices scored at settling
    (``on_decided``): on one pod (every pick from fresh metrics a forced choice) and on the mixed
    fleet (almost none), the same decisions - pick, fallbacks, every weighted score, reason - as
    settling at once."""
    later = Recording(_scheduler(7), settle_later=True, forced=True)
    at_once = Recording(_scheduler(7), settle_later=False)
    run_loaded_mixed_fleet(later, seed=3, pods=pods)
    run_loaded_mixed_fleet(at_once, seed=3, pods=pods)
    later.scheduler.settle()  # the run's last pick
    assert len(later.decisions) == len(at_once.decisions) == 480
    assert later.decisions == at_once.decisions
    # forced: one candidate scored, from fresh metrics (the all-stale fallback ranks in the pick)
    forced = [
        d
        for d in at_once.decisions
        if d.kind is DecisionKind.PICKED and len(d.scores) == 1 and "stale or failing" not in d.reason
    ]
    assert later.forced_picks == len(forced)
    assert len(forced) > (400 if pods else 0)


def test_a_forced_choice_returns_its_endpoint_at_once_and_its_decision_at_settling() -> None:
    sched = _scheduler(1)
    decided: list[RoutingDecision] = []
    views = [ep("a:1", scraped_at=10.0), ep("b:1", scraped_at=1.0)]  # b: stale, so one candidate
    decision = sched.pick(
        req(PROMPT, request_id="r1"), views, now=10.0, settle_later=True, on_decided=decided.append
    )
    assert (decision.kind, decision.endpoint, decision.fallbacks) == (DecisionKind.PICKED, "a:1", ())
    assert decision.scores is PENDING_SCORES
    assert decision.removed == {"b:1": "stale or failing metrics"}
    assert decided == []  # nothing scored
    assert _recorded(sched) == 0  # nor recorded yet
    sched.settle()
    at_once = _scheduler(1).pick(req(PROMPT, request_id="r1"), views, now=10.0)
    assert decided == [at_once]  # scores, reason ("1 stale endpoints excluded"), removed
    assert "stale endpoints excluded" in at_once.reason
    assert _recorded(sched) == 1
    sched.settle()
    assert len(decided) == 1  # settled once


def test_no_forced_choice_for_more_than_one_candidate_or_without_on_decided() -> None:
    decided: list[RoutingDecision] = []
    two = [ep("a:1", scraped_at=10.0), ep("b:1", scraped_at=10.0)]
    sched = _scheduler(1)
    decision = sched.pick(req(PROMPT), two, now=10.0, settle_later=True, on_decided=decided.append)
    assert decision.scores is not PENDING_SCORES
    assert decision.scores
    one = [ep("a:1", scraped_at=10.0)]
    assert sched.pick(req(PROMPT), one, now=10.1, settle_later=True).scores is not PENDING_SCORES
    sched.settle()
    assert decided == []


def test_no_forced_choice_with_a_picker_that_draws_for_one_candidate() -> None:
    """The random pickers draw from the shared random stream even for one candidate: their
    ranking stays in order (a later draw would move every other draw after it)."""
    doc = {"plugins": [{"type": "queue-scorer"}, {"type": "weighted-random-picker"}]}
    sched = scheduler_from_picker_config(doc, routing=RoutingSettings(), rng=random.Random(1))
    assert not isinstance(sched.profile.picker, MaxScorePicker)
    decided: list[RoutingDecision] = []
    one = [ep("a:1", scraped_at=10.0)]
    decision = sched.pick(req(PROMPT), one, now=10.0, settle_later=True, on_decided=decided.append)
    assert decision.scores is not PENDING_SCORES
    sched.settle()
    assert decided == []
