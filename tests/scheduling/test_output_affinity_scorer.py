"""``output-affinity-scorer``: on one kind of hardware, a pod whose requests in flight ask for answers
about as long as this request's (``max_tokens``) scores higher; elsewhere, and before any
``max_tokens`` has been seen, it abstains."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from igw.config.model import Weights
from igw.scheduling.builtin import REGISTRY
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import DEFAULT_WEIGHTS, effective_weights, scheduler_from_weights
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.output_affinity_scorer import (
    DEFAULT_MAX_DECODE_SHARE,
    MAX_TRACKED,
    MEAN_WINDOW,
    SPAN,
    TYPE,
    OutputAffinityScorer,
    factory,
)
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointView, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ctx
from tests.scheduling.helpers import ep as bare_ep

PROMPT = 20_000
"""The tests' prompt: long enough that their answers (at most 3,000 tokens) stay under the decode
share gate's default (1/16 of the tokens), except where a test sets its own."""


def ep(key: str, *, waiting: int | None = 1, **kw: Any) -> EndpointView:
    """A test endpoint with a request waiting in its engine by default: the scorer's queue gate
    (``onlyWhileQueued``) open, as under the bursts it is meant for."""
    return bare_ep(key, waiting=waiting, **kw)


def request(
    rid: str = "r", *, max_tokens: int | None = 100, adapter: str | None = None, prompt_tokens: int = PROMPT
) -> RoutingRequest:
    return RoutingRequest(
        request_id=rid,
        model=adapter or "m",
        base_model="m",
        prefix_text="",
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        adapter=adapter,
    )


def place(
    scorer: OutputAffinityScorer,
    rid: str,
    endpoint: EndpointView,
    max_tokens: int | None,
    prompt_tokens: int = PROMPT,
) -> None:
    scorer.on_picked(ctx(request(rid, max_tokens=max_tokens, prompt_tokens=prompt_tokens)), endpoint)


def done(scorer: OutputAffinityScorer, rid: str, key: str) -> None:
    scorer.on_complete(RequestOutcome(request_id=rid, endpoint=key, ok=True), now=0.0)


def one_kind_scores(
    scorer: OutputAffinityScorer,
    endpoints: list[EndpointView],
    *,
    matched: dict[str, float] | None = None,
    adapter: str | None = None,
) -> list[float | None]:
    c = ctx(request("new", adapter=adapter))
    c.state[STATE_ONE_KIND] = endpoints
    if matched is not None:
        c.state[STATE_MATCH] = matched
    return scorer.score(c, endpoints)


def pods_with(scorer: OutputAffinityScorer, answers: list[list[int]]) -> list[EndpointView]:
    """Endpoints e0, e1 ... with this router's requests in flight asking for the given answers."""
    endpoints = [ep(f"e{i}") for i in range(len(answers))]
    for i, lengths in enumerate(answers):
        for j, tokens in enumerate(lengths):
            place(scorer, f"e{i}-{j}", endpoints[i], tokens)
    return endpoints


def expected(a: float, t: float, f: float = 1.0) -> float:
    return 1.0 - f * min(1.0, abs(math.log((a + 1) / (t + 1))) / math.log(SPAN))


@pytest.mark.parametrize(
    ("answers", "new", "matched", "want", "why"),
    [
        ([[200, 200], [10, 30], [200]], 200, None, [1.0, expected(20, 200), 1.0], "same length: 1"),
        ([[200, 200], [10, 30], [200]], 20, None, [expected(200, 20), 1.0, expected(200, 20)], "short: e1"),
        ([[3000], [10], [200]], 200, None, [expected(3000, 200), 0.0, 1.0], "16 times shorter or more: 0"),
        ([[200], [20]], 20, {"e0": 0.9}, [expected(200, 20, 0.1), 1.0], "a 90 % prefix match leaves a tenth"),
        ([[200], [20]], 20, {"e0": 1.0}, [1.0, 1.0], "a whole-prompt match: the prefix scorer decides"),
    ],
)
def test_the_distance_between_answer_lengths(
    answers: list[list[int]], new: int, matched: dict[str, float] | None, want: list[float], why: str
) -> None:
    scorer = OutputAffinityScorer()
    endpoints = pods_with(scorer, answers)
    c = ctx(request("new", max_tokens=new))
    c.state[STATE_ONE_KIND] = endpoints
    if matched is not None:
        c.state[STATE_MATCH] = matched
    assert scorer.score(c, endpoints) == pytest.approx(want), why


def test_a_pod_with_nothing_in_flight_counts_as_holding_the_mean_answer() -> None:
    scorer = OutputAffinityScorer()
    endpoints = [*pods_with(scorer, [[100, 300]]), ep("idle")]
    assert scorer.mean_max_tokens == pytest.approx(200.0)
    for new, want_idle in ((200, 1.0), (20, expected(200, 20))):
        c = ctx(request("new", max_tokens=new))
        c.state[STATE_ONE_KIND] = endpoints
        assert scorer.score(c, endpoints)[1] == pytest.approx(want_idle)


def test_dispatches_add_their_max_tokens_and_completions_take_them_off() -> None:
    scorer = OutputAffinityScorer()
    e0, e1 = ep("e0"), ep("e1")
    place(scorer, "a", e0, 300)
    place(scorer, "b", e1, 100)
    place(scorer, "c", e1, 200)
    assert scorer.owed == {"e0": 300.0, "e1": 300.0}
    assert scorer.count == {"e0": 1, "e1": 2}
    assert scorer.mean_owed == {"e0": 300.0, "e1": 150.0}
    done(scorer, "c", "e1")
    assert scorer.owed == {"e0": 300.0, "e1": 100.0}
    assert scorer.count == {"e0": 1, "e1": 1}
    assert scorer.mean_owed == {"e0": 300.0, "e1": 100.0}
    done(scorer, "c", "e1")  # a second outcome for the same request changes nothing
    done(scorer, "unknown", "e0")
    assert scorer.owed == {"e0": 300.0, "e1": 100.0}
    done(scorer, "a", "e0")
    done(scorer, "b", "e1")
    assert scorer.owed == {}
    assert scorer.count == {}
    assert scorer.mean_owed == {}
    assert not scorer.tracked


def test_a_request_without_max_tokens_counts_the_running_mean() -> None:
    scorer = OutputAffinityScorer()
    place(scorer, "a", ep("e0"), 100)
    place(scorer, "b", ep("e0"), 300)
    assert scorer.mean_max_tokens == pytest.approx(200.0)
    place(scorer, "c", ep("e1"), None)
    assert scorer.owed["e1"] == pytest.approx(200.0)
    assert scorer.mean_max_tokens == pytest.approx(200.0), "no max_tokens: nothing to learn"


def test_the_running_mean_weighs_a_new_value_one_in_64_after_the_first_64() -> None:
    scorer = OutputAffinityScorer()
    for _ in range(MEAN_WINDOW):
        scorer.learn(100)
    assert scorer.mean_max_tokens == pytest.approx(100.0)
    scorer.learn(100 + MEAN_WINDOW)
    assert scorer.mean_max_tokens == pytest.approx(101.0)


def test_a_retried_request_id_moves_its_tokens() -> None:
    scorer = OutputAffinityScorer()
    place(scorer, "a", ep("e0"), 100)
    place(scorer, "a", ep("e1"), 100)
    assert scorer.owed == {"e1": 100.0}
    assert scorer.count == {"e1": 1}


def test_the_oldest_forgotten_request_leaves_its_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("igw.scheduling.plugins.output_affinity_scorer.MAX_TRACKED", 2)
    scorer = OutputAffinityScorer()
    place(scorer, "a", ep("e0"), 100)
    place(scorer, "b", ep("e1"), 50)
    place(scorer, "c", ep("e1"), 70)
    assert list(scorer.tracked) == ["b", "c"]
    assert scorer.owed == {"e1": 120.0}
    assert scorer.count == {"e1": 2}
    assert MAX_TRACKED >= 2


def test_removed_endpoints_are_forgotten() -> None:
    scorer = OutputAffinityScorer()
    place(scorer, "a", ep("e0"), 100)
    place(scorer, "b", ep("e1"), 100)
    scorer.on_endpoints_removed(["e0"])
    assert scorer.owed == {"e1": 100.0}
    assert scorer.count == {"e1": 1}
    assert scorer.mean_owed == {"e1": 100.0}
    assert list(scorer.tracked) == ["b"]
    assert "e0" not in scorer.moved, "a removed pod is not kept until the next scored pick"
    assert scorer.pod_slot == {"e1": 1}
    done(scorer, "a", "e0")
    assert scorer.owed == {"e1": 100.0}


@pytest.mark.parametrize(
    ("pods", "lengths", "why"),
    [
        (8, [5, 90, 700], "a small pool: one pass"),
        (64, [5, 90, 700], "a large pool whose means repeat: the table of distinct means"),
        (64, list(range(1, 4000, 7)), "a large pool of distinct means: one pass"),
    ],
)
def test_the_scores_are_the_formula_s_floats_bit_for_bit(pods: int, lengths: list[int], why: str) -> None:
    """Per candidate, the module doc's formula from that pod's ``owed / count`` at pick time (the
    running mean for an empty pod), compared with ``==``: the cached means and the table of distinct
    means change the cost, not a bit of the result."""
    rng = random.Random(pods + len(lengths))
    scorer = OutputAffinityScorer(max_decode_share=1.0)
    endpoints = [ep(f"e{i}") for i in range(pods)]
    for i, e in enumerate(endpoints[:-2]):  # the last two pods hold nothing
        for j in range(rng.randrange(1, 4)):
            place(scorer, f"{i}-{j}", e, rng.choice(lengths))
        if i % 3 == 0:
            done(scorer, f"{i}-0", e.key)
    matched = {"e0": 0.25}
    got = one_kind_scores(scorer, endpoints, matched=matched)
    t1 = 100 + 1.0
    m = scorer.mean_max_tokens
    want = []
    for e in endpoints:
        n = scorer.count.get(e.key, 0)
        a = scorer.owed[e.key] / n if n else m
        want.append(1.0 - 0.75 * min(1.0, abs(math.log((a + 1.0) / t1)) / math.log(SPAN)))
    assert got == want, why


def formula_scores(scorer: OutputAffinityScorer, endpoints: list[EndpointView], new: int) -> list[float]:
    """The module doc's formula per candidate from ``owed / count`` now (no match, ``f`` 1)."""
    m = scorer.mean_max_tokens
    out = []
    for e in endpoints:
        n = scorer.count.get(e.key, 0)
        a = scorer.owed[e.key] / n if n else m
        out.append(1.0 - min(1.0, abs(math.log((a + 1.0) / (new + 1.0))) / math.log(SPAN)))
    return out


@pytest.mark.parametrize("pool", [40, 300])
def test_the_slot_column_follows_every_change_between_picks(pool: int) -> None:
    """Picks interleaved with dispatches, completions, retries, removed pods and changing candidate
    lists (the whole pool, a reordered copy, a subset of fewer candidates than slots, a key listed
    twice): every pick's scores equal the formula's floats from the pods' state at that moment, so
    the slots and the column kept between picks change the cost, not a bit of the result."""
    rng = random.Random(pool)
    scorer = OutputAffinityScorer(max_decode_share=1.0)
    endpoints = [ep(f"e{i}") for i in range(pool)]
    live: list[tuple[str, str]] = []
    lists = [endpoints, endpoints[::-1], endpoints[: pool // 8], [*endpoints[:5], endpoints[0]]]
    candidates = endpoints
    for step in range(3000):
        op = rng.random()
        if op < 0.45:
            e = rng.choice(endpoints)
            rid = f"r{step}" if rng.random() < 0.9 or not live else live[0][0]  # sometimes a retry
            live = [x for x in live if x[0] != rid]
            place(scorer, rid, e, rng.choice([2, 3, 5, 8, 20, 60, 200, 900]))
            live.append((rid, e.key))
        elif op < 0.8 and live:
            rid, key = live.pop(rng.randrange(len(live)))
            done(scorer, rid, key)
        elif op < 0.81:
            gone = rng.choice(endpoints)
            scorer.on_endpoints_removed([gone.key])
            live = [x for x in live if x[1] != gone.key]
        elif op < 0.85:
            candidates = rng.choice(lists)
        if scorer.mean_max_tokens > 0:
            new = rng.choice([2, 20, 200])
            c = ctx(request("new", max_tokens=new))
            c.state[STATE_ONE_KIND] = candidates
            assert scorer.score(c, candidates) == formula_scores(scorer, candidates, new), step
    assert scorer.slot_refs[0] == 0
    assert sum(scorer.slot_refs) == len(scorer.pod_slot) == len(scorer.mean_owed)
    assert {scorer.slot_mean[s] for s in scorer.pod_slot.values()} == set(scorer.mean_owed.values())
    assert len(scorer.slot_of) == len(set(scorer.mean_owed.values())), "a slot no pod holds is freed"


@pytest.mark.parametrize(
    ("one_kind", "adapter", "learned", "scraped", "why"),
    [
        (False, None, True, True, "not one kind of hardware"),
        (True, "ad", True, True, "an adapter request: left to the LoRA scorers"),
        (True, None, False, True, "no max_tokens seen yet"),
        (True, None, True, False, "a candidate not scraped yet"),
    ],
)
def test_it_abstains(one_kind: bool, adapter: str | None, learned: bool, scraped: bool, why: str) -> None:
    endpoints = [ep("e0"), ep("e1", no_metrics=not scraped)]
    scorer = OutputAffinityScorer()
    if learned:
        place(scorer, "a", endpoints[0], 100)
    c = ctx(request("new", adapter=adapter))
    if one_kind:
        c.state[STATE_ONE_KIND] = endpoints
    assert scorer.score(c, endpoints) == [None, None], why


def test_a_one_kind_verdict_for_other_candidates_is_not_taken() -> None:
    endpoints = [ep("e0"), ep("e1")]
    scorer = OutputAffinityScorer()
    place(scorer, "a", endpoints[0], 100)
    c = ctx(request("new"))
    c.state[STATE_ONE_KIND] = list(endpoints)  # equal, but another pick's list
    assert scorer.score(c, endpoints) == [None, None]


@pytest.mark.parametrize(
    ("prompt", "answer", "max_share", "acts", "why"),
    [
        (2000, 20, None, True, "burst-235b's shape: the mean answer 2.4 % of the tokens"),
        (1000, 80, None, False, "burst-70b's shape: 16.7 %, the rule abstains"),
        (1000, 80, 1.0, True, "maxDecodeShare 1: no gate (round 16's form)"),
        (1500, 40, None, True, "exactly 1/16: still acts"),
        (1499, 40, None, False, "just over 1/16: abstains"),
        (1000, 80, 0.2, True, "a wider gate set by the operator"),
    ],
)
def test_the_decode_share_gate(
    prompt: int, answer: int, max_share: float | None, acts: bool, why: str
) -> None:
    """e0 holds an answer as long as the new request's, e1 one four times longer; the means are
    2.5 x ``answer`` and ``prompt``."""
    scorer = OutputAffinityScorer() if max_share is None else OutputAffinityScorer(max_decode_share=max_share)
    endpoints = [ep("e0"), ep("e1")]
    place(scorer, "a", endpoints[0], answer, prompt)
    place(scorer, "b", endpoints[1], answer * 4, prompt)
    assert scorer.decode_share() == pytest.approx(2.5 * answer / (2.5 * answer + prompt))
    c = ctx(request("new", max_tokens=answer, prompt_tokens=prompt))
    c.state[STATE_ONE_KIND] = endpoints
    got = scorer.score(c, endpoints)
    if acts:
        assert got == pytest.approx([1.0, expected(4 * answer, answer)]), why
    else:
        assert got == [None, None], why


def test_the_prompt_mean_learns_only_from_requests_with_max_tokens() -> None:
    scorer = OutputAffinityScorer()
    assert scorer.decode_share() == 0.0
    place(scorer, "a", ep("e0"), 100, 900)
    place(scorer, "b", ep("e0"), None, 1_000_000)  # no max_tokens: neither mean moves
    assert scorer.mean_prompt_tokens == pytest.approx(900.0)
    assert scorer.decode_share() == pytest.approx(0.1)
    for _ in range(MEAN_WINDOW):
        scorer.learn(100, 900)
    scorer.learn(100, 900 + MEAN_WINDOW)  # one in 64 after the first 64, as for max_tokens
    assert scorer.mean_prompt_tokens == pytest.approx(901.0)


def test_it_is_registered_and_takes_only_max_decode_share() -> None:
    assert TYPE in REGISTRY.types()
    assert pytest.approx(1.0 / SPAN) == DEFAULT_MAX_DECODE_SHARE
    assert factory("o", {}, "p").max_decode_share == pytest.approx(1.0 / SPAN)
    assert factory("o", {"maxDecodeShare": 0.25}, "p").max_decode_share == pytest.approx(0.25)
    assert factory("o", {"maxDecodeShare": 1}, "p").max_decode_share == 1.0
    assert factory("o", {}, "p").only_while_queued is True
    assert factory("o", {"onlyWhileQueued": False}, "p").only_while_queued is False
    with pytest.raises(SchedulerConfigError, match="mean"):
        factory("o", {"mean": 1}, "plugins[0].parameters")
    for bad in (0, -0.1, 1.5, "x", True):
        with pytest.raises(SchedulerConfigError, match="maxDecodeShare"):
            factory("o", {"maxDecodeShare": bad}, "plugins[0].parameters")


@pytest.mark.parametrize(
    ("waiting", "only_while_queued", "acts", "why"),
    [
        ([1, 1], True, True, "every candidate has a request waiting: prompts queue, it acts"),
        ([3, 0], True, False, "one candidate with nothing waiting: a prompt sent there starts at once"),
        ([0, 0], True, False, "nothing waiting anywhere (a light load): it abstains"),
        ([1, None], True, False, "a candidate without the waiting gauge: the gate cannot be read"),
        ([0, 0], False, True, "onlyWhileQueued false: round 17's form acts at any load"),
    ],
)
def test_the_queue_gate(waiting: list[int | None], only_while_queued: bool, acts: bool, why: str) -> None:
    scorer = OutputAffinityScorer(only_while_queued=only_while_queued)
    endpoints = [ep("e0", waiting=waiting[0]), ep("e1", waiting=waiting[1])]
    place(scorer, "a", endpoints[0], 100)
    place(scorer, "b", endpoints[1], 400)
    got = one_kind_scores(scorer, endpoints)
    if acts:
        assert got == pytest.approx([1.0, expected(400, 100)]), why
    else:
        assert got == [None, None], why


@pytest.mark.parametrize("lora_adapters", [False, True])
def test_it_is_a_default_scorer_at_weight_2_switched_off_with_predicted_latency(lora_adapters: bool) -> None:
    """In the default profile since session s18 (docs/benchmark.md, routing round 18), with and without
    LoRA adapters; like the other scorers that read ``backlog-ttft-scorer``'s verdict it goes with
    ``predictedLatency: 0``, and an explicit ``weights`` map that leaves it out keeps it."""
    assert DEFAULT_WEIGHTS[TYPE] == 2.0
    assert effective_weights(None, lora_adapters=lora_adapters)[TYPE] == 2.0
    assert effective_weights(Weights(queue=1), lora_adapters=lora_adapters)[TYPE] == 2.0
    assert TYPE not in effective_weights(Weights(predicted_latency=0), lora_adapters=lora_adapters)
    s = scheduler_from_weights(DEFAULT_WEIGHTS, rng=random.Random(0))
    assert s.profile.describe()[TYPE] == 2.0


WITHOUT_IT = {k: v for k, v in DEFAULT_WEIGHTS.items() if k != TYPE}


def profile_picks(
    new: int, prompt_tokens: int = PROMPT, weights: dict[str, float] | None = None, waiting: int = 1
) -> set[str | None]:
    """The default profile (``weights``, when given, instead), over 20 tie-break seeds: three
    identical pods (every scraped signal equal, ``waiting`` requests queued on each), each with one
    request of ours in flight asking for 500, 20 and 120 tokens; the pods the new request goes to."""
    weights = dict(DEFAULT_WEIGHTS) if weights is None else weights
    picks = set()
    for seed in range(20):
        s = scheduler_from_weights(weights, rng=random.Random(seed))
        endpoints = [
            ep(
                f"e{i}",
                waiting=waiting,
                inflight=1,
                block_size=16,
                num_gpu_blocks=20_000,
                labels={"gpu": "h100"},
            )
            for i in range(3)
        ]
        for i, tokens in enumerate([500, 20, 120]):
            old = request(f"old{i}", max_tokens=tokens, prompt_tokens=prompt_tokens)
            s.pick(old, [endpoints[i]], now=0.0)
        new_request = request("new", max_tokens=new, prompt_tokens=prompt_tokens)
        picks.add(s.pick(new_request, endpoints, now=0.0).endpoint)
    return picks


def test_in_a_profile_it_groups_requests_by_answer_length() -> None:
    """Without the scorer the default profile cannot tell the pods apart (a random tie-break); with
    it (the default) a short answer goes to the pod serving short answers and a long one to the pod
    serving long ones."""
    assert len(profile_picks(15, weights=WITHOUT_IT)) > 1
    assert profile_picks(15) == {"e1"}
    assert profile_picks(400) == {"e0"}


def test_in_a_profile_the_gate_leaves_answer_heavy_traffic_to_the_other_scorers() -> None:
    """The same with prompts of 1,000 tokens (the answers 10-40 % of the tokens, above the gate):
    the scorer abstains and the pick is the other scorers' random tie-break, as without it."""
    picks = profile_picks(15, prompt_tokens=1000)
    assert len(picks) > 1
    assert picks == profile_picks(15, prompt_tokens=1000, weights=WITHOUT_IT)


def test_in_a_profile_the_queue_gate_leaves_a_light_load_to_the_other_scorers() -> None:
    """The same pods with nothing waiting in their engines: the scorer abstains and the pick is the
    other scorers' random tie-break, as without it."""
    picks = profile_picks(15, waiting=0)
    assert len(picks) > 1
    assert picks == profile_picks(15, waiting=0, weights=WITHOUT_IT)


def test_a_pick_not_sent_leaves_no_answer_in_flight_on_its_pod() -> None:
    """A pick flow control gave back (its client then left) or that no attempt could send never gets
    an outcome: until session s41 its answer stayed in the pod's mean until 65,536 later picks."""
    s = OutputAffinityScorer()
    s.on_picked(
        ctx(
            RoutingRequest(
                request_id="sent", model="m", base_model="m", prefix_text="", prompt_tokens=10, max_tokens=10
            )
        ),
        bare_ep("a"),
    )
    s.on_picked(
        ctx(
            RoutingRequest(
                request_id="gone",
                model="m",
                base_model="m",
                prefix_text="",
                prompt_tokens=10,
                max_tokens=1000,
            )
        ),
        bare_ep("a"),
    )
    assert s.on_not_sent("gone", "a", sent_to=None)
    assert s.mean_owed == {"a": 10.0}
    assert not s.on_not_sent("gone", "a", sent_to=None)
    assert not s.on_not_sent("sent", "b", sent_to=None)  # not the pod it was picked for
    assert s.on_not_sent("sent", "a", sent_to=bare_ep("b"))  # steered: counted where it went
    assert s.mean_owed == {"b": 10.0}
    s.on_complete(RequestOutcome(request_id="sent", endpoint="b", ok=True), now=1.0)
    assert s.mean_owed == {}
    assert s.tracked == {}
