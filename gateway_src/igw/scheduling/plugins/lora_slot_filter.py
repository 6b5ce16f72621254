"""``lora-slot-filter``: send an adapter request only where it can start without waiting for a slot.

Why: the GIE ``lora-affinity-scorer`` gives a pod whose LoRA slots are all busy with *other*
adapters 0.0 against 0.8 for a free slot, but with weight 1 next to queue 2 / kvCache 2 /
predictedLatency 1 a slightly less loaded pod still wins, and the request then waits there until one
of the other adapters fully drains, which with popular adapters may take tens of seconds
(docs/scheduler-design.md). Such a pod is nearly unschedulable for the
request, so this is a filter, not a score.

Rule, per request with adapter ``a`` (tiers by the GIE scorer's categories):

1. endpoints where ``a`` is running or a slot is free *and* no other adapter is waiting there for a
   slot (see "starvation" below);
2. endpoints where ``a`` is running or a slot is free;
3. endpoints where ``a`` is already waiting (it will be loaded together);
4. every endpoint (nothing better exists; the scorers decide).

The first non-empty tier is kept. An endpoint where ``a`` is the *drain victim* (below) is left out
of every tier unless it is the only endpoint. An endpoint without LoRA metrics (no
``vllm:lora_requests_info``, or one the parser could not trust) is left out whenever some candidate
reports them *and* it has answered a request that a later scrape reflects: a vLLM with LoRA publishes
them from its first step on, so one that has run requests and still publishes none runs without LoRA
and answers every adapter request 404 (until session s28 such a pod was kept in the first tier, and
since a request failing at once leaves its pod looking idle, a mixed fleet sent it 96 % of the
adapter requests; docs/gateway.md). One that has answered nothing yet (a pod just started, a
scale-out) is kept: it cannot have published them, and in session s28's version, which left it out
too, a pool serving only adapter requests never sent a new pod any (found by probing, session s29).
When no candidate reports LoRA metrics (an engine without them) every endpoint is kept, as before.
Base-model requests pass unfiltered. Parameters: none.

**Endpoints that answered 404 for the adapter.** An adapter loaded on some pods only (a rollout, a
pod started without it) looks alike everywhere in the scrapes until it runs, and a pod without it
answers 404 at once, so it looks idle and drew most of that adapter's requests (in the DES with
``chat-lora`` on two pods of four, 113 of its 183 requests failed; round-robin 90). Since session
s29 the scheduler is told of each such 404 (``on_model_missing``) and the endpoint is left out for
that adapter for :data:`MISSING_MEMORY_S`, unless its scrape shows the adapter running or waiting
(then it has it) or no other candidate is left. With ``igw serve --workers`` the scheduler passes
each such 404 on to the other workers (a pick note, :mod:`igw.scheduling.pick_notes`).

**Slots claimed since the scrape.** Between two scrapes every pick sees the same adapter sets, so a pod
showing one free slot would receive *every* cold adapter of that scrape window. The filter therefore
remembers which adapters it sent to each endpoint at or after that endpoint's scrape and counts them as
waiting (they claim slots the scrape cannot show yet), the same idea as the scheduler's dispatch ledger for
queue counts.

**Starvation.** An engine loads a waiting adapter only when one of its slots is free of running
requests. A pod whose slots hold adapters that the router keeps feeding never frees one, so an
adapter queued there waits until traffic stops. Two rules break this. Tier 1
sends other adapters' requests to pods where nothing starves whenever they can run there. And when
they cannot (every pod's slots are full, the adapter runs only on the blocked pod), the blocked pod
names one *drain victim*, the running adapter with the fewest of this scheduler's unfinished
requests there (it frees its slot soonest; counted from ``on_picked`` / ``on_complete``), and the
victim's new requests go elsewhere, so its slot frees and the starving adapter loads.

Measurements of each rule: docs/scheduler-design.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.lora_affinity_scorer import FREE_SLOT, WAITING, adapter_affinity
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

TYPE = "lora-slot-filter"
MISSING_MEMORY_S: Final = 60.0
"""How long an endpoint that answered 404 for an adapter is left out for it: the gateway's period
for re-reading a pod's ``/v1/models`` too, time enough for an adapter loaded at run time to appear;
then one request finds out again."""


class LoraSlotFilter(PluginHooks):
    type_name = TYPE

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name
        self._sent: dict[EndpointKey, dict[str, float]] = {}
        """Per endpoint, adapter -> when this filter's scheduler last sent it a request."""
        self._inflight: dict[str, tuple[EndpointKey, str]] = {}
        """Request id -> (endpoint, adapter) of this scheduler's unfinished adapter requests."""
        self._counts: dict[tuple[EndpointKey, str], int] = {}
        """(endpoint, adapter) -> how many of them are unfinished."""
        self._answered: dict[EndpointKey, float] = {}
        """Endpoint -> when it first completed a request of this scheduler (``on_complete``, ok)."""
        self._missing: dict[tuple[EndpointKey, str], float] = {}
        """(endpoint, adapter) -> until when the endpoint is taken not to serve the adapter (it
        answered 404 for it)."""

    def drain_victim(self, endpoint: EndpointView) -> str | None:
        """The running adapter that stops getting new requests on ``endpoint`` while another adapter
        starves there: the one with the fewest of this scheduler's unfinished requests (it frees
        its slot soonest); ``None`` when nothing starves there."""
        m = endpoint.metrics
        if m is None or m.max_lora is None or not m.active_adapters or not m.waiting_adapters:
            return None
        active = m.active_adapters
        if all(w in active for w in m.waiting_adapters):
            return None
        counts = self._counts
        return min(sorted(active), key=lambda a: counts.get((endpoint.key, a), 0))

    def unreflected(self, endpoint: EndpointView) -> frozenset[str]:
        """Adapters sent to ``endpoint`` at or after its scrape (the scrape cannot show them yet)."""
        sent = self._sent.get(endpoint.key)
        if not sent:
            return frozenset()
        scraped = endpoint.scraped_at
        if scraped is None:
            return frozenset(sent)
        stale = [a for a, t in sent.items() if t < scraped]
        for a in stale:
            del sent[a]
        return frozenset(sent)

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        adapter = ctx.request.adapter
        if adapter is None:
            return
        self._sent.setdefault(endpoint.key, {})[adapter] = ctx.now
        slot = (endpoint.key, adapter)
        previous = self._inflight.get(ctx.request.request_id)
        if previous is not None:  # a retry of the same request: it left the other endpoint
            self._release(previous)
        self._inflight[ctx.request.request_id] = slot
        self._counts[slot] = self._counts.get(slot, 0) + 1

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        slot = self._inflight.pop(outcome.request_id, None)
        if slot is not None:
            self._release(slot)
        if outcome.ok and outcome.endpoint not in self._answered:
            self._answered[outcome.endpoint] = now

    def on_not_sent(self, request_id: str, endpoint: EndpointKey, *, sent_to: EndpointView | None) -> bool:
        """Take the adapter request ``request_id`` off ``endpoint``'s unfinished requests (the pod
        never got it), and with ``sent_to`` count it there, its slot claimed there since the pick.

        Left in place, a pick whose request never came back (flow control gave it back and the
        client left, or no attempt connected) stayed counted there for as long as the pod stayed in
        the pool (it held the adapter away from being the pod's drain victim, and one entry of
        memory per such request), and a pick sent elsewhere (steered, or its connection failed)
        claimed no slot on the pod that loads the adapter for it (until session s41). The claim on
        ``endpoint`` stays until its next scrape: another request may have claimed the same slot."""
        slot = self._inflight.get(request_id)
        if slot is None or slot[0] != endpoint:
            return False
        del self._inflight[request_id]
        self._release(slot)
        if sent_to is not None:
            adapter = slot[1]
            claimed = self._sent.get(endpoint, {}).get(adapter)
            if claimed is not None:
                self._sent.setdefault(sent_to.key, {})[adapter] = claimed
            moved = (sent_to.key, adapter)
            self._inflight[request_id] = moved
            self._counts[moved] = self._counts.get(moved, 0) + 1
        return True

    def _runs_without_lora(self, endpoint: EndpointView) -> bool:
        """``endpoint`` publishes no LoRA metrics although a scrape taken after it answered a request
        would show them (an engine with LoRA publishes them from its first step on)."""
        answered = self._answered.get(endpoint.key)
        scraped = endpoint.scraped_at
        return answered is not None and scraped is not None and scraped > answered

    def _release(self, slot: tuple[EndpointKey, str]) -> None:
        left = self._counts.get(slot, 0) - 1
        if left > 0:
            self._counts[slot] = left
        else:
            self._counts.pop(slot, None)

    def on_model_missing(self, endpoint: EndpointKey, model: str, *, now: float) -> None:
        self._missing[(endpoint, model)] = now + MISSING_MEMORY_S

    def missing_in_force(self, now: float) -> list[tuple[EndpointKey, str, float]]:
        """Every 404 still remembered at ``now``, as ``(endpoint, adapter, when it was answered)``:
        what a worker of ``igw serve --workers`` that joins late is told (the 404's own note is
        older than the stale threshold after a second, while the memory lasts a minute)."""
        return sorted(
            (key, model, until - MISSING_MEMORY_S)
            for (key, model), until in self._missing.items()
            if until > now
        )

    def _without_missing(
        self, adapter: str, endpoints: Sequence[EndpointView], now: float
    ) -> Sequence[EndpointView]:
        """``endpoints`` less those that answered 404 for ``adapter`` within the memory, unless the
        scrape shows it there (then the memory is dropped) or none would be left."""
        missing = self._missing
        absent: set[EndpointKey] = set()
        for e in endpoints:
            slot = (e.key, adapter)
            until = missing.get(slot)
            if until is None:
                continue
            m = e.metrics
            shown = m is not None and (
                adapter in (m.active_adapters or ()) or adapter in (m.waiting_adapters or ())
            )
            if until <= now or shown:
                del missing[slot]
            else:
                absent.add(e.key)
        if not absent or len(absent) == len(endpoints):
            return endpoints
        return [e for e in endpoints if e.key not in absent]

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        gone = set(keys)
        for key in gone:
            self._sent.pop(key, None)
            self._answered.pop(key, None)
        for slot in [slot for slot in self._missing if slot[0] in gone]:
            del self._missing[slot]
        for request_id, slot in list(self._inflight.items()):
            if slot[0] in gone:
                del self._inflight[request_id]
                self._release(slot)

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]:
        adapter = ctx.request.adapter
        if adapter is None:
            return list(endpoints)
        if self._missing:
            endpoints = self._without_missing(adapter, endpoints, ctx.now)
        scores = [adapter_affinity(adapter, e, unreflected=self.unreflected(e)) for e in endpoints]
        # An endpoint where this adapter is the drain victim is unschedulable for it in every tier
        # that would keep its slot busy, unless no other endpoint exists.
        pairs = list(zip(endpoints, scores, strict=True))
        if any(s is not None for s in scores):  # LoRA-capable pods known: none that runs without LoRA
            pairs = [(e, s) for e, s in pairs if s is not None or not self._runs_without_lora(e)]
        usable = [(e, s) for e, s in pairs if self.drain_victim(e) != adapter] or pairs
        unblocked = [
            e for e, s in usable if (s is None or s >= FREE_SLOT) and not starves_other_adapter(adapter, e)
        ]
        if unblocked:
            return unblocked
        for floor in (FREE_SLOT, WAITING):
            kept = [e for e, s in usable if s is None or s >= floor]
            if kept:
                return kept
        return [e for e, _ in usable]


def starves_other_adapter(adapter: str, endpoint: EndpointView) -> bool:
    """True when another adapter waits on ``endpoint`` for a LoRA slot that ``adapter`` holds or
    would take: sending more ``adapter`` work there keeps that slot busy and the other one waiting."""
    m = endpoint.metrics
    if m is None or m.max_lora is None or not m.waiting_adapters:
        return False
    active = m.active_adapters or frozenset()
    return any(w != adapter and w not in active for w in m.waiting_adapters)


def factory(name: str, params: Mapping[str, Any], path: str) -> LoraSlotFilter:
    ParamReader(params, path=path).finish()
    return LoraSlotFilter(name=name)
