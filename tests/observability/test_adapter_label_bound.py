"""The ``adapter`` label of ``igw_endpoint_lora_adapter`` is bounded although pods choose the names.

A pod's ``vllm:lora_requests_info`` lists up to 1,024 adapter names per state, read anew every
scrape: until session s48 each name was a series, so a hostile or broken pod listing new names every
scrape made up to 2,048 new series per scrape. The adapters the scheduler routes to keep their name,
then up to ``UNCONFIGURED_ADAPTER_LABELS`` others, each slot freed once no pod has reported its name
for ``ADAPTER_SLOT_GRACE_S`` (since session s49); the rest are summed as ``adapter="other"``, which
no real adapter shares. Routing still reads every name."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.guards import OpenGuard
from igw.gateway.metrics_parser import VLLM, parse_page
from igw.gateway.state import GatewayState
from igw.gateway.telemetry import (
    ADAPTER_SLOT_GRACE_S,
    OTHER_ADAPTER,
    UNCONFIGURED_ADAPTER_LABELS,
    AdapterLabels,
)
from igw.scheduling.plugins.lora_affinity_scorer import adapter_affinity
from tests.gateway.support import config_doc, scheduler

SCRAPES = 3
RUNNING, WAITING = 1000, 667  # each under the parser's 1,024 per state: 5,001 names in 3 scrapes
CAP = (1 + UNCONFIGURED_ADAPTER_LABELS + 1) * 2  # sql, first-seen others, other; per state


def _page(scrape: int) -> str:
    running = ["sql"] + [f"r{scrape}-{i}" for i in range(RUNNING - 1)]
    waiting = [f"w{scrape}-{i}" for i in range(WAITING)]
    return (
        f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{",".join(running)}",'
        f'waiting_lora_adapters="{",".join(waiting)}"}} 1.9e9\n'
    )


def _adapter_series(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.labels["adapter"], s.labels["state"]): s.value
        for f in registry.collect()
        for s in f.samples
        if s.name == "igw_endpoint_lora_adapter"
    }


def test_a_pod_naming_thousands_of_adapters_makes_a_bounded_stable_set_of_series() -> None:
    config = build_gateway_config(config_doc([scheduler("p", "m", loraAdapters=["sql"])]))
    state = GatewayState(config, guard=OpenGuard(), clock=lambda: 0.0, rng=random.Random(0))
    state.apply_endpoints("p", [DiscoveredEndpoint("10.0.0.1:8000")])
    sr = state.runtime.schedulers["p"]
    (endpoint,) = sr.pool.states.values()
    seen: set[tuple[str, str]] = set()
    for scrape in range(SCRAPES):
        endpoint.metrics = parse_page(_page(scrape), VLLM).metrics
        endpoint.scraped_at = 0.0
        series = _adapter_series(state.metrics.registry)
        seen |= series.keys()
        assert len(series) <= CAP, len(series)
        # nothing is lost: the values still add up to every name the page listed
        assert sum(v for (_, st), v in series.items() if st == "running") == RUNNING
        assert sum(v for (_, st), v in series.items() if st == "waiting") == WAITING
        assert series[("sql", "running")] == 1.0  # the adapter the scheduler routes to, by name
        assert series[(OTHER_ADAPTER, "running")] > 0
        # routing reads every name of this scrape, the folded ones included
        (view,) = sr.pool.views()
        assert view.metrics is not None
        assert view.metrics.active_adapters is not None
        assert len(view.metrics.active_adapters) == RUNNING
        assert adapter_affinity(f"r{scrape}-{RUNNING - 2}", view) == 1.0
        assert adapter_affinity(f"w{scrape}-{WAITING - 1}", view) == 0.6
    # over all scrapes the label values are the same bounded set, not one per name
    assert len(seen) <= CAP, len(seen)
    assert {adapter for adapter, _ in seen} <= {"sql", OTHER_ADAPTER} | {
        f"r0-{i}" for i in range(RUNNING)
    } | {f"w0-{i}" for i in range(WAITING)}


class _Pods:
    """One scheduler ``p`` (routing to ``sql``) over two pods whose adapter lists each scrape sets,
    and a clock the test moves: a scripted sequence of scrapes and collections."""

    def __init__(self) -> None:
        self.now = 0.0
        config = build_gateway_config(config_doc([scheduler("p", "m", loraAdapters=["sql"])]))
        self.state = GatewayState(config, guard=OpenGuard(), clock=lambda: self.now, rng=random.Random(0))
        self.state.apply_endpoints(
            "p", [DiscoveredEndpoint("10.0.0.1:8000"), DiscoveredEndpoint("10.0.0.2:8000")]
        )
        self.endpoints = sorted(self.state.runtime.schedulers["p"].pool.states.values(), key=lambda e: e.key)

    def scrape(self, at: float, *pods: list[str]) -> dict[str, float]:
        """Each pod reports its list running at ``at``; the running series collected then, by label."""
        self.now = at
        for endpoint, names in zip(self.endpoints, pods, strict=True):
            page = (
                f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{",".join(names)}"}} 1.9e9\n'
            )
            endpoint.metrics = parse_page(page, VLLM).metrics
            endpoint.scraped_at = at
        labels: dict[str, float] = {}
        for family in self.state.metrics.registry.collect():
            for s in family.samples:
                if s.name == "igw_endpoint_lora_adapter":
                    assert s.labels["state"] == "running"
                    labels[s.labels["adapter"]] = labels.get(s.labels["adapter"], 0.0) + s.value
        return labels


def test_a_slot_unreported_for_the_grace_period_goes_to_an_adapter_that_came_later() -> None:
    """A pod lists 8 names once and never again; a real adapter loaded later gets their freed slot
    after ADAPTER_SLOT_GRACE_S (summed as ``other`` before that, not for the life of the process),
    while a name still reported keeps its own."""
    pods = _Pods()
    junk = [f"junk-{i}" for i in range(UNCONFIGURED_ADAPTER_LABELS - 1)]
    assert set(pods.scrape(0.0, ["sql", "kept", *junk], [])) == {"sql", "kept", *junk}
    # the junk is gone from every page, "late" arrives: every slot is still held
    assert pods.scrape(60.0, ["kept"], ["late"]) == {"kept": 1.0, OTHER_ADAPTER: 1.0}
    assert pods.scrape(ADAPTER_SLOT_GRACE_S - 1, ["kept"], ["late"]) == {"kept": 1.0, OTHER_ADAPTER: 1.0}
    # the junk unreported for the grace period: its slots are free, "late" takes one
    assert pods.scrape(ADAPTER_SLOT_GRACE_S, ["kept"], ["late"]) == {"kept": 1.0, "late": 1.0}
    # long after: "kept" and "late", reported all along, still have theirs
    assert pods.scrape(10 * ADAPTER_SLOT_GRACE_S, ["kept"], ["late"]) == {"kept": 1.0, "late": 1.0}


def test_a_free_slot_goes_to_the_adapter_most_pods_report() -> None:
    """A hostile pod listing many names as a real adapter (served by both pods) appears: the real
    one takes a free slot first, though its name sorts after every other."""
    pods = _Pods()
    hostile = [f"a-{i:04d}" for i in range(500)]
    got = pods.scrape(0.0, [*hostile, "zz-real"], ["zz-real"])
    assert got["zz-real"] == 2.0
    assert len(got) == 1 + UNCONFIGURED_ADAPTER_LABELS  # the real one, 7 hostile names, other
    assert got[OTHER_ADAPTER] == len(hostile) - (UNCONFIGURED_ADAPTER_LABELS - 1)


def test_an_adapter_named_other_is_not_summed_into_the_overflow() -> None:
    """Names are the engines' own (vLLM and SGLang take any name; only a comma cannot be listed): a
    real adapter named ``other`` (routed or not) is labelled ``~other``, as tenants are, so
    ``adapter="other"`` is the overflow alone; ``~`` names are escaped too, so labels stay distinct."""
    config = build_gateway_config(config_doc([scheduler("p", "m", loraAdapters=["other"])]))
    state = GatewayState(config, guard=OpenGuard(), clock=lambda: 0.0, rng=random.Random(0))
    state.apply_endpoints("p", [DiscoveredEndpoint("10.0.0.1:8000")])
    (endpoint,) = state.runtime.schedulers["p"].pool.states.values()
    overflow = [f"n{i}" for i in range(UNCONFIGURED_ADAPTER_LABELS + 3)]
    names = ["other", "~other", "~x", *overflow]
    for listed in (names[:3], names):  # the escaped names first seen alone: they hold a slot
        page = f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{",".join(listed)}"}} 1.9e9\n'
        endpoint.metrics = parse_page(page, VLLM).metrics
        endpoint.scraped_at = 0.0
        series = _adapter_series(state.metrics.registry)
    assert series[("~other", "running")] == 1.0  # the routed adapter named "other"
    assert series[("~~other", "running")] == 1.0
    assert series[("~~x", "running")] == 1.0
    # the overflow: the names beyond the slots (two of which the escaped names took), nothing else
    assert series[(OTHER_ADAPTER, "running")] == len(overflow) - (UNCONFIGURED_ADAPTER_LABELS - 2)
    assert sum(series.values()) == len(names)


def test_an_adapter_routed_after_it_took_a_slot_gives_the_slot_up() -> None:
    """A reload makes an adapter that held one of the unconfigured slots a routed one: it keeps its
    name as a routed adapter, and its slot goes to another unconfigured adapter. Before session s50
    the routed adapter, still reported, held the slot for good, so one fewer unconfigured adapter
    than :data:`UNCONFIGURED_ADAPTER_LABELS` kept its name."""
    labels = AdapterLabels(unconfigured=2)
    assert labels.observe({"p": {"a": 1, "b": 1}}, {}, 0.0) == {"p": frozenset({"a", "b"})}
    routed = {"p": frozenset({"a"})}
    given = labels.observe({"p": {"a": 1, "b": 1, "c": 1}}, routed, 1.0)
    assert given == {"p": frozenset({"b", "c"})}
    assert AdapterLabels.counts(["a", "b", "c"], routed["p"], given["p"]) == {"a": 1, "b": 1, "c": 1}
