"""Order a profile's plugins by the per-pick state they declare they read and write.

Plugins that cooperate within one pick do so through :attr:`CycleContext.state`: the prefix scorer
writes its block hashes and whether any candidate had a hit, the no-hit-LRU scorer reads the hit
flag. A reader that runs before its writer sees no value and silently behaves differently (the LRU
scorer would treat a warm request as cold), so the order cannot be left to the configuration file.

Each plugin declares the state keys it reads (``consumes``) and writes (``produces``) as class
attributes; :class:`~igw.scheduling.framework.PluginHooks` supplies empty defaults, so a plugin that
shares no state declares nothing. From these declarations the framework:

* keeps the stages in their fixed order (filters, then scorers, then the picker);
* within a stage, places every plugin after the plugins of that stage that write what it reads - a
  stable topological sort, so a configuration that is already in data-flow order keeps its order and
  its decisions exactly;
* rejects, with the configuration path of both plugins, a read of a key that only a *later* stage
  writes (a filter reading a scorer's output) and a cycle within a stage.

A key that no plugin in the profile writes is allowed: the reader documents what it does without it
(the LRU scorer counts every request as cold when no prefix scorer is configured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from igw.scheduling.errors import SchedulerConfigError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
F = TypeVar("F")
S = TypeVar("S")

STAGES = ("filter", "scorer", "picker")
"""The fixed order of the stages of one pick."""


def consumes(plugin: object) -> frozenset[str]:
    """State keys ``plugin`` reads (empty for a plugin that declares nothing)."""
    return frozenset(getattr(plugin, "consumes", ()))


def produces(plugin: object) -> frozenset[str]:
    """State keys ``plugin`` writes (empty for a plugin that declares nothing)."""
    return frozenset(getattr(plugin, "produces", ()))


@dataclass(frozen=True, slots=True)
class Placed(Generic[T_co]):
    """One entry of a profile as configured: the entry (a filter, a weighted scorer...), the plugin
    that declares its data flow, and the configuration path used in error messages."""

    entry: T_co
    plugin: object
    path: str


def _describe(p: Placed[object]) -> str:
    name = getattr(p.plugin, "name", type(p.plugin).__name__)
    return f"{name!r} ({p.path})"


def _sort_stage(items: Sequence[Placed[T]], problems: list[str]) -> list[Placed[T]]:
    """Stable topological sort: each item after the same-stage items writing a key it reads."""
    writers: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        for key in produces(item.plugin):
            writers.setdefault(key, []).append(i)
    after: list[set[int]] = [
        {w for key in consumes(item.plugin) for w in writers.get(key, ()) if w != i}
        for i, item in enumerate(items)
    ]
    placed: list[int] = []
    done: set[int] = set()
    while len(placed) < len(items):
        ready = next((i for i in range(len(items)) if i not in done and after[i] <= done), None)
        if ready is None:
            stuck = [items[i] for i in range(len(items)) if i not in done]
            problems.append(
                f"{stuck[0].path}: plugins read each other's per-pick state in a cycle: "
                + ", ".join(
                    f"{_describe(p)} reads {sorted(consumes(p.plugin))}, writes {sorted(produces(p.plugin))}"
                    for p in stuck
                )
            )
            return list(items)
        placed.append(ready)
        done.add(ready)
    return [items[i] for i in placed]


def _check_later_stages(stages: Sequence[Sequence[Placed[object]]], problems: list[str]) -> None:
    for s, stage in enumerate(stages):
        later = [p for later_stage in stages[s + 1 :] for p in later_stage]
        for reader in stage:
            for key in sorted(consumes(reader.plugin)):
                same_stage = any(key in produces(p.plugin) for p in stage if p is not reader)
                late = [p for p in later if key in produces(p.plugin)]
                if late and not same_stage:
                    problems.append(
                        f"{reader.path}: {_describe(reader)} reads per-pick state {key!r}, which only "
                        f"{_describe(late[0])} writes, and a {STAGES[s]} runs before every "
                        + " and ".join(STAGES[s + 1 :])
                    )


def order_by_data_flow(
    filters: Sequence[Placed[F]], scorers: Sequence[Placed[S]], picker: Placed[object] | None
) -> tuple[list[F], list[S]]:
    """The filters and scorers in an order where every reader runs after its writers.

    ``SchedulerConfigError`` naming the configuration paths when no such order exists.
    """
    problems: list[str] = []
    stages: list[Sequence[Placed[object]]] = [filters, scorers, [picker] if picker is not None else []]
    _check_later_stages(stages, problems)
    ordered_filters = _sort_stage(filters, problems)
    ordered_scorers = _sort_stage(scorers, problems)
    if problems:
        raise SchedulerConfigError(problems)
    return [p.entry for p in ordered_filters], [p.entry for p in ordered_scorers]


def require_data_flow_order(filters: Sequence[object], scorers: Sequence[object], picker: object) -> None:
    """``SchedulerConfigError`` unless the plugins, as given, already run in data-flow order.

    The builders order profiles with :func:`order_by_data_flow`; this guards a profile assembled by
    hand, which would otherwise silently let a reader run before its writer.
    """
    placed_filters = [Placed(f, f, f"filters[{i}]") for i, f in enumerate(filters)]
    placed_scorers = [Placed(s, s, f"scorers[{i}]") for i, s in enumerate(scorers)]
    ordered_filters, ordered_scorers = order_by_data_flow(
        placed_filters, placed_scorers, Placed(picker, picker, "picker")
    )
    for given, ordered, stage in (
        (filters, ordered_filters, "filters"),
        (scorers, ordered_scorers, "scorers"),
    ):
        if any(a is not b for a, b in zip(given, ordered, strict=True)):
            names = ", ".join(str(getattr(p, "name", p)) for p in ordered)
            raise SchedulerConfigError(
                [
                    f"profile.{stage}: a plugin runs before the plugin that writes the state it reads; "
                    f"data-flow order is: {names}"
                ]
            )
