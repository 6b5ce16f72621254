"""``lora-slot-filter``: an adapter request goes only where it can start without waiting for a slot."""

from __future__ import annotations

import pytest

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import profile_from_weights
from igw.scheduling.plugins.lora_slot_filter import MISSING_MEMORY_S, LoraSlotFilter, factory
from igw.scheduling.types import EndpointView, RequestOutcome
from tests.scheduling.helpers import ctx, ep, req

A = frozenset({"a"})
OTHERS = frozenset({"x", "y"})


def lora_ep(key: str, *, active: frozenset[str], waiting: frozenset[str] = frozenset()) -> EndpointView:
    return ep(key, active=active, waiting_adapters=waiting, max_lora=2)


@pytest.mark.parametrize(
    ("endpoints", "adapter", "kept"),
    [
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("running", active=A)],
            "a",
            ["running"],
            id="slots-full-of-others-dropped-when-adapter-runs-elsewhere",
        ),
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("free", active=frozenset({"x"}))],
            "a",
            ["free"],
            id="free-slot-beats-busy",
        ),
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("queued", active=OTHERS, waiting=A)],
            "a",
            ["queued"],
            id="adapter-already-waiting-is-second-tier",
        ),
        pytest.param(
            [lora_ep("b1", active=OTHERS), lora_ep("b2", active=OTHERS)],
            "a",
            ["b1", "b2"],
            id="nothing-better-keeps-all",
        ),
        pytest.param(
            [lora_ep("free", active=frozenset({"x"})), ep("no-lora-metrics")],
            "a",
            ["free", "no-lora-metrics"],
            id="a-pod-without-lora-metrics-that-answered-nothing-yet-is-kept",
        ),
        pytest.param(
            [ep("no-lora-1"), ep("no-lora-2")],
            "a",
            ["no-lora-1", "no-lora-2"],
            id="no-candidate-reports-lora-metrics-keeps-all",
        ),
        pytest.param(
            [
                lora_ep("blocked", active=A | {"x"}, waiting=frozenset({"rare"})),
                lora_ep("clear", active=A | {"y"}),
            ],
            "a",
            ["clear"],
            id="pod-where-another-adapter-starves-is-avoided",
        ),
        pytest.param(
            [
                lora_ep("blocked", active=A | {"x"}, waiting=frozenset({"x", "a"})),
                lora_ep("clear", active=A | {"y"}),
            ],
            "a",
            ["blocked", "clear"],
            id="waiting-for-batch-space-is-not-starvation",
        ),
        pytest.param(
            [lora_ep("rare-waits", active=OTHERS, waiting=frozenset({"rare"}))],
            "rare",
            ["rare-waits"],
            id="the-starving-adapter-itself-still-joins-its-queue",
        ),
        pytest.param(
            [lora_ep("busy", active=OTHERS), lora_ep("running", active=A)],
            None,
            ["busy", "running"],
            id="base-model-request-unfiltered",
        ),
    ],
)
def test_filter(endpoints: list[EndpointView], adapter: str | None, kept: list[str]) -> None:
    out = LoraSlotFilter().filter(ctx(req("q", adapter=adapter)), endpoints)
    assert [e.key for e in out] == kept


@pytest.mark.parametrize(
    ("weights", "has_filter"),
    [
        pytest.param({"queue": 2, "loraAffinity": 1}, True, id="lora-affinity-enables-it"),
        pytest.param({"queue": 2, "loraAffinity": 0}, False, id="lora-affinity-off"),
        pytest.param({"queue": 2}, False, id="no-adapters-configured"),
    ],
)
def test_weights_profile_includes_the_filter_with_lora_affinity(
    weights: dict[str, float], has_filter: bool
) -> None:
    filters = profile_from_weights(weights).filters
    assert [f.type_name for f in filters] == (["lora-slot-filter"] if has_filter else [])


def test_factory_takes_no_parameters() -> None:
    assert factory("f", {}, "plugins[0].parameters").name == "f"
    with pytest.raises(SchedulerConfigError, match=r"unknown"):
        factory("f", {"x": 1}, "plugins[0].parameters")


def test_adapters_sent_since_the_scrape_claim_slots() -> None:
    """Two cold adapters inside one scrape window must not both be sent to the pod showing one free
    slot (the second one would wait there for a slot)."""
    filt = LoraSlotFilter()
    one_free = lora_ep("one-free", active=frozenset({"x"}), waiting=frozenset())
    other_free = lora_ep("other-free", active=frozenset({"y"}), waiting=frozenset())
    first = ctx(req("q", adapter="a"), now=0.01)
    assert [e.key for e in filt.filter(first, [one_free])] == ["one-free"]
    filt.on_picked(first, one_free)
    second = ctx(req("q", adapter="b"), now=0.02)
    assert [e.key for e in filt.filter(second, [one_free, other_free])] == ["other-free"]
    # With the free slot elsewhere taken too, the same adapter joins the one it was sent to (tier 3:
    # it will be loaded together), not a pod where it would need yet another slot.
    filt.on_picked(second, other_free)
    again = ctx(req("q", adapter="a"), now=0.03)
    assert [e.key for e in filt.filter(again, [one_free, other_free])] == ["one-free"]


def test_a_newer_scrape_replaces_what_the_filter_remembers() -> None:
    filt = LoraSlotFilter()
    before = lora_ep("p", active=frozenset({"x"}), waiting=frozenset())
    filt.on_picked(ctx(req("q", adapter="a"), now=0.01), before)
    assert filt.unreflected(before) == frozenset({"a"})
    rescraped = ep(
        "p", active=frozenset({"x", "a"}), waiting_adapters=frozenset(), max_lora=2, scraped_at=0.05
    )
    assert filt.unreflected(rescraped) == frozenset()
    # b still fits: the scrape shows a running, one slot per adapter.
    out = filt.filter(ctx(req("q", adapter="b"), now=0.06), [rescraped])
    assert [e.key for e in out] == ["p"]


def test_removed_endpoints_are_forgotten() -> None:
    filt = LoraSlotFilter()
    view = lora_ep("p", active=frozenset({"x"}))
    filt.on_picked(ctx(req("q", adapter="a"), now=0.01), view)
    filt.on_endpoints_removed(["p"])
    assert filt.unreflected(view) == frozenset()


def test_base_model_picks_are_not_remembered() -> None:
    filt = LoraSlotFilter()
    view = lora_ep("p", active=frozenset({"x"}))
    filt.on_picked(ctx(req("q"), now=0.01), view)
    assert filt.unreflected(view) == frozenset()


def _send(filt: LoraSlotFilter, view: EndpointView, adapter: str, request_id: str) -> None:
    filt.on_picked(ctx(req("q", adapter=adapter, request_id=request_id), now=0.0), view)


def test_every_pod_blocked_the_drain_victim_stops_feeding_its_slot() -> None:
    """Regression (lora-multi-adapter, seed 1: one adapter waited up to 60 s on a pod whose three
    slots held rare adapters that ran nowhere else): the running adapter with the fewest unfinished
    requests there gets no new ones there, so its slot frees and the starving adapter loads."""
    filt = LoraSlotFilter()
    starving = ep(
        "p", active=frozenset({"x", "y"}), waiting_adapters=frozenset({"rare"}), max_lora=2, scraped_at=-1.0
    )
    other = lora_ep("q", active=frozenset({"u", "v"}))
    _send(filt, starving, "x", "r1")
    _send(filt, starving, "x", "r2")
    _send(filt, starving, "y", "r3")
    assert filt.drain_victim(starving) == "y"
    # y runs only on p: it is sent elsewhere (to wait for a slot there) rather than keep p's slot.
    assert [e.key for e in filt.filter(ctx(req("q", adapter="y")), [starving, other])] == ["q"]
    # x is not the victim and runs only on p: it keeps going there.
    assert [e.key for e in filt.filter(ctx(req("q", adapter="x")), [starving, other])] == ["p"]
    # Once y's requests finish elsewhere counts drop, the victim is recomputed from what is left.
    filt.on_complete(RequestOutcome(request_id="r1", endpoint="p", ok=True), now=1.0)
    filt.on_complete(RequestOutcome(request_id="r2", endpoint="p", ok=True), now=1.0)
    assert filt.drain_victim(starving) == "x"


def test_no_victim_without_a_starving_adapter() -> None:
    filt = LoraSlotFilter()
    assert filt.drain_victim(lora_ep("p", active=OTHERS)) is None
    assert filt.drain_victim(lora_ep("p", active=OTHERS, waiting=frozenset({"x"}))) is None


def test_a_lone_endpoint_still_serves_its_victim_adapter() -> None:
    filt = LoraSlotFilter()
    only = ep("p", active=frozenset({"x", "y"}), waiting_adapters=frozenset({"rare"}), max_lora=2)
    assert filt.drain_victim(only) == "x"
    assert [e.key for e in filt.filter(ctx(req("q", adapter="x")), [only])] == ["p"]


def test_retries_and_removed_endpoints_release_counts() -> None:
    filt = LoraSlotFilter()
    p, q = lora_ep("p", active=A), lora_ep("q", active=A)
    _send(filt, p, "a", "r1")
    _send(filt, q, "a", "r1")  # the same request retried on q
    assert filt._counts == {("q", "a"): 1}
    filt.on_endpoints_removed(["q"])
    assert filt._counts == {}
    assert filt._inflight == {}


def answered(f: LoraSlotFilter, key: str, *, at: float) -> None:
    f.on_complete(RequestOutcome(request_id=f"done-{key}", endpoint=key, ok=True), now=at)


@pytest.mark.parametrize(
    ("scraped_at", "kept"),
    [
        pytest.param(2.0, ["free"], id="scraped-after-it-answered:-runs-without-lora"),
        pytest.param(0.5, ["free", "old-vllm"], id="its-scrape-predates-the-answer:-kept"),
    ],
)
def test_a_pod_that_answered_and_still_publishes_no_lora_metrics_is_left_out(
    scraped_at: float, kept: list[str]
) -> None:
    """Session s28's rule, kept for a pod known to run without LoRA: an engine with LoRA publishes
    its LoRA metrics from its first step on."""
    f = LoraSlotFilter()
    answered(f, "old-vllm", at=1.0)
    pool = [lora_ep("free", active=frozenset({"x"})), ep("old-vllm", scraped_at=scraped_at)]
    assert [e.key for e in f.filter(ctx(req("q", adapter="a"), now=3.0), pool)] == kept


def test_a_new_pod_of_an_adapter_only_pool_is_not_left_out() -> None:
    """Session s28's rule left out every pod without LoRA metrics while others published them; a
    scale-out pod of a pool that serves only adapter requests then never got one, so it never
    published them (found by probing, session s29)."""
    f = LoraSlotFilter()
    answered(f, "serving", at=1.0)
    pool = [lora_ep("serving", active=A), ep("new", scraped_at=5.0)]
    assert [e.key for e in f.filter(ctx(req("q", adapter="a"), now=6.0), pool)] == ["serving", "new"]


def test_a_pod_that_answered_404_for_an_adapter_is_left_out_for_that_adapter_a_while() -> None:
    f = LoraSlotFilter()
    pool = [lora_ep("has-it", active=frozenset()), lora_ep("lacks-it", active=frozenset())]
    f.on_model_missing("lacks-it", "chat", now=10.0)

    def kept(adapter: str, now: float, endpoints: list[EndpointView] = pool) -> list[str]:
        return [e.key for e in f.filter(ctx(req("q", adapter=adapter), now=now), endpoints)]

    assert kept("chat", 11.0) == ["has-it"]
    assert kept("sql", 11.0) == ["has-it", "lacks-it"]  # per adapter
    assert kept("chat", 11.0, [pool[1]]) == ["lacks-it"]  # never the last candidate
    assert kept("chat", 10.0 + MISSING_MEMORY_S) == ["has-it", "lacks-it"]  # the memory ran out
    f.on_model_missing("lacks-it", "chat", now=100.0)
    shown = [pool[0], lora_ep("lacks-it", active=frozenset({"chat"}))]
    assert kept("chat", 101.0, shown) == ["has-it", "lacks-it"]  # its scrape shows it running it now
    assert kept("chat", 101.0) == ["has-it", "lacks-it"]  # and that dropped the memory
    f.on_model_missing("gone", "chat", now=0.0)
    f.on_endpoints_removed(["gone"])
    assert f._missing == {}


def test_the_scheduler_tells_the_filter_of_a_404() -> None:
    from igw.scheduling.factory import scheduler_from_weights

    s = scheduler_from_weights({"queue": 1, "loraAffinity": 1}, rng=__import__("random").Random(1))
    pool = [lora_ep("has-it", active=frozenset()), lora_ep("lacks-it", active=frozenset())]
    s.on_model_missing("lacks-it", "chat", now=0.0)
    decision = s.pick(req("q", adapter="chat"), pool, now=0.0)
    assert decision.endpoint == "has-it"
    assert decision.removed == {"lacks-it": "filter lora-slot-filter"}


def test_a_404_for_an_adapter_travels_to_the_other_workers() -> None:
    """``igw serve --workers N``: without the note each worker paid its own 404 per pod and adapter."""
    import random

    from igw.scheduling.factory import scheduler_from_weights

    a, b = (scheduler_from_weights({"queue": 1, "loraAffinity": 1}, rng=random.Random(i)) for i in (1, 2))
    a.share_picks()
    b.share_picks()
    a.on_model_missing("lacks-it", "chat", now=5.0)
    assert a.pick_notes is not None
    notes = a.pick_notes.drain()
    assert notes == [(5.0, "@model-missing", "lacks-it", ["chat", 5.0])]
    assert b.learn_picks(notes, now=5.1).learned == 1
    pool = [lora_ep("has-it", active=frozenset()), lora_ep("lacks-it", active=frozenset())]
    assert b.pick(req("q", adapter="chat"), pool, now=5.2).endpoint == "has-it"
    assert b.pick_notes is not None
    assert all(n[1] != "@model-missing" for n in b.pick_notes.drain())  # learned, not sent on again
    for bad in (["chat"], [1, 5.0], ["chat", float("nan")], "chat"):
        assert b.learn_picks([(5.0, "@model-missing", "x", bad)], now=5.1).malformed == 1


def test_a_pick_not_sent_leaves_no_unfinished_request_on_its_pod() -> None:
    """Two y requests picked for p were never sent there (flow control gave the picks back and their
    clients left; or no attempt connected): no outcome ever comes for them. Until session s41 they
    stayed counted as unfinished on p for as long as p stayed in the pool, so y (really idle there)
    was never p's drain victim and the starving adapter kept waiting behind it."""
    filt = LoraSlotFilter()
    starving = ep(
        "p", active=frozenset({"x", "y"}), waiting_adapters=frozenset({"rare"}), max_lora=2, scraped_at=-1.0
    )
    _send(filt, starving, "x", "r1")
    for rid in ("g1", "g2"):
        _send(filt, starving, "y", rid)
        assert filt.on_not_sent(rid, "p", sent_to=None)
    assert filt.drain_victim(starving) == "y"
    assert not filt.on_not_sent("g1", "p", sent_to=None)  # once only
    assert not filt.on_not_sent("r1", "q", sent_to=None)  # not the pod it was picked for


def test_a_pick_sent_elsewhere_counts_on_the_pod_it_went_to() -> None:
    """A y request picked for p went to q instead (steered, or p refused the connection): q holds the
    unfinished request and the slot claim, and p neither (until session s41, p had both)."""
    filt = LoraSlotFilter()
    p = ep(
        "p", active=frozenset({"x", "y"}), waiting_adapters=frozenset({"rare"}), max_lora=2, scraped_at=-1.0
    )
    q = ep(
        "q", active=frozenset({"x", "y"}), waiting_adapters=frozenset({"rare"}), max_lora=2, scraped_at=-1.0
    )
    _send(filt, p, "x", "r1")
    _send(filt, q, "x", "r2")
    _send(filt, p, "y", "moved")
    assert filt.on_not_sent("moved", "p", sent_to=q)
    assert (filt.drain_victim(p), filt.drain_victim(q)) == ("y", "x")
    assert filt.unreflected(q) == frozenset({"x", "y"})
    filt.on_complete(RequestOutcome(request_id="moved", endpoint="q", ok=True), now=1.0)
    assert filt.drain_victim(q) == "y"
