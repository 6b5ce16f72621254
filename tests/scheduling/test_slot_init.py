"""``slot_constructor``: the per-pick records made by slot writes equal the constructor's, and
classes it cannot write safely get their own constructor back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from igw.scheduling import scheduler
from igw.scheduling.plugins import backlog_ttft_scorer, predicted_ttft_scorer
from igw.scheduling.plugins.backlog_ttft_scorer import Predictions
from igw.scheduling.plugins.predicted_ttft_scorer import PublishedScores
from igw.scheduling.slot_init import slot_constructor
from igw.scheduling.types import DecisionKind, RoutingDecision
from tests.compiled.tree import compiled
from tests.scheduling.helpers import ep

_FLOATS = st.lists(st.floats(allow_nan=False), max_size=4)


def _same(made: object, built: object) -> None:
    assert type(made) is type(built)
    assert made == built
    for f in dataclasses.fields(built):  # type: ignore[arg-type]  # a dataclass instance
        assert getattr(made, f.name) is getattr(built, f.name)


@given(
    endpoint=st.one_of(st.none(), st.text(max_size=5)),
    fallbacks=st.lists(st.text(max_size=3), max_size=3).map(tuple),
    reason=st.text(max_size=5),
    retry=st.one_of(st.none(), st.floats(allow_nan=False)),
)
def test_decisions_made_by_slot_writes_equal_the_constructors(
    endpoint: str | None, fallbacks: tuple[str, ...], reason: str, retry: float | None
) -> None:
    scores = {"a": {"total": 1.0}}
    removed = {"b": "stale"}
    made = scheduler._decision(DecisionKind.PICKED, endpoint, fallbacks, scores, retry, reason, removed)
    built = RoutingDecision(
        kind=DecisionKind.PICKED,
        endpoint=endpoint,
        fallbacks=fallbacks,
        scores=scores,
        retry_after_s=retry,
        reason=reason,
        removed=removed,
    )
    _same(made, built)
    # On the sources the slot writes are in use (else RoutingDecision's fields changed: see slot_init);
    # a compiled (native) class is made by its own constructor.
    assert (scheduler._decision is RoutingDecision) == compiled("igw.scheduling.values")


@given(seconds=_FLOATS, idle=_FLOATS, measured=st.lists(st.booleans(), max_size=4))
def test_published_records_made_by_slot_writes_equal_the_constructors(
    seconds: list[float], idle: list[float], measured: list[bool]
) -> None:
    views = [ep("a"), ep("b")]
    _same(predicted_ttft_scorer._published(views, seconds), PublishedScores(views, seconds))
    _same(
        backlog_ttft_scorer._predictions(views, seconds, idle, measured),
        Predictions(views, seconds, idle, measured),
    )
    native = compiled("igw.scheduling.plugins.predicted_ttft_scorer")  # then each its own constructor
    assert (predicted_ttft_scorer._published is PublishedScores) == native
    assert (backlog_ttft_scorer._predictions is Predictions) == compiled(
        "igw.scheduling.plugins.backlog_ttft_scorer"
    )


@dataclass(frozen=True, slots=True)
class _WithPostInit:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("negative")


@dataclass(frozen=True, slots=True)
class _NotInInit:
    a: int
    b: list[int] = field(default_factory=list, init=False)


@dataclass(frozen=True)
class _NoSlots:
    a: int


class _Plain:
    __slots__ = ("a",)


def test_classes_the_slot_writes_would_get_wrong_keep_their_constructor() -> None:
    """A ``__post_init__`` (its checks would be skipped), a field outside ``__init__`` (its default
    would be missing), no slots, not a dataclass: the class itself comes back."""
    for cls in (_WithPostInit, _NotInInit, _NoSlots, _Plain):
        assert slot_constructor(cls) is cls


@dataclass(frozen=True, slots=True)
class _Three:
    a: int
    b: str
    c: float = 0.5


def test_every_field_is_written_in_declaration_order() -> None:
    make = slot_constructor(_Three)
    assert make is not _Three
    _same(make(1, "x", 2.0), _Three(1, "x", 2.0))
