"""``BacklogTtftScorer._ratios`` against the per-kind dictionary it replaced (kinds as ``(model,
label)`` tuples, each looked up again per use): the same floats in the same positions, and the same
``KeyError`` where a kind has no prediction below infinity (and ``ZeroDivisionError`` where a kind's
best is 0)."""

from __future__ import annotations

import math
import random

import pytest

from igw.scheduling.plugins import backlog_ttft_scorer
from igw.scheduling.plugins.backlog_ttft_scorer import BacklogTtftScorer, _preferred
from igw.scheduling.types import EndpointView
from tests.compiled.tree import skip_compiled


def _before(scorer: BacklogTtftScorer, predicted: list[float], endpoints: list[EndpointView]) -> list[float]:
    best = min(predicted, default=0.0)
    models, label = scorer._cycle_models, scorer.hardware_label
    kinds = [(models[e.key], e.labels.get(label) if label else None) for e in endpoints]
    best_of: dict[tuple[tuple[float, float], str | None], float] = {}
    for p, kind in zip(predicted, kinds, strict=True):
        if p < best_of.get(kind, math.inf):
            best_of[kind] = p
    exponent = scorer.prediction_exponent
    return [
        1.0 if p <= 0 else (best_of[kind] / p) ** exponent * (best / best_of[kind])
        for p, kind in zip(predicted, kinds, strict=True)
    ]


def _outcome(
    scorer: BacklogTtftScorer, predicted: list[float], endpoints: list[EndpointView], old: bool
) -> list[float] | str:
    try:
        return (_before if old else BacklogTtftScorer._ratios)(scorer, predicted, endpoints)
    except (KeyError, ZeroDivisionError, OverflowError) as failed:  # no finite best; a best of 0; huge
        return type(failed).__name__


def _same(a: list[float] | str, b: list[float] | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("label", ["", "gpu"])
def test_ratios_equal_the_per_kind_dictionary(label: str) -> None:
    rng = random.Random(7)
    specials = [0.0, -0.0, -1.0, math.inf, math.nan, 1e-300]
    checked = raised = 0
    for _ in range(3000):
        n = rng.randint(0, 12)
        scorer = BacklogTtftScorer(hardware_label=label, prediction_exponent=rng.choice([0.5, 2.0, 3.0]))
        shared = [(rng.random(), rng.random() * 1e-3) for _ in range(3)]
        endpoints = []
        predicted = []
        for _ in range(n):
            key = f"e{rng.randint(0, n)}"  # keys may repeat: the key's last model counts
            model = rng.choice(shared)
            if rng.random() < 0.3:
                model = (model[0], model[1])  # equal, not the same object
            scorer._cycle_models[key] = model
            labels = {"gpu": rng.choice(["h100", "a10g"])} if rng.random() < 0.7 else {}
            endpoints.append(EndpointView(key=key, metrics=None, scraped_at=None, labels=labels))
            predicted.append(rng.choice(specials) if rng.random() < 0.1 else rng.random() * 2)
        old, new = _outcome(scorer, predicted, endpoints, True), _outcome(scorer, predicted, endpoints, False)
        assert _same(old, new), (predicted, old, new)
        checked += 1
        raised += old == "KeyError"
    assert checked == 3000
    assert raised > 0  # the failing case was reached, and fails alike


def test_ratios_compare_models_by_value_not_identity() -> None:
    """Two candidates whose models are equal but distinct tuples are one kind (sharpened together)."""
    scorer = BacklogTtftScorer(hardware_label="", prediction_exponent=2.0)
    scorer._cycle_models = {"a": (0.1, 0.001), "b": (0.1, 0.001), "c": (0.2, 0.002)}
    endpoints = [EndpointView(key=k, metrics=None, scraped_at=None) for k in "abc"]
    predicted = [1.0, 2.0, 4.0]
    # a and b one kind: b's ratio within it sharpened, (1/2)**2 x 1/1; c alone: 1 x (1/4)
    assert scorer._ratios(predicted, endpoints) == [1.0, 0.25, 0.25]


def _bits(values: list[float] | str) -> list[str] | str:
    """Each float's exact bits (``float.hex``: tells -0.0 from 0.0; every NaN reads ``nan``); the
    ``repr`` of anything else (``**`` of a negative base and a fractional exponent is complex)."""
    if isinstance(values, str):
        return values
    return [v.hex() if isinstance(v, float) else repr(v) for v in values]


@skip_compiled(
    "igw.scheduling.plugins.backlog_ttft_scorer",
    "the test switches the module's NATIVE_POW to take both ways, a flag compiled code bound at build time",
)
@pytest.mark.parametrize("label", ["", "gpu"])
def test_ratios_with_math_pow_are_the_power_operator_s_floats(label: str) -> None:
    """The compiled build's ``_ratios`` raises with ``math.pow`` where the base is finite and
    positive (``NATIVE_POW``): run here both ways, the same bits, the same exceptions, on the
    default exponent 4 and others (infinite and NaN exponents take ``**`` either way). Fails with
    ``math.pow`` for a zero or negative base, or with ``base * base * base * base`` for 4."""
    rng = random.Random(15)
    specials = [0.0, -0.0, -1.0, math.inf, math.nan, 1e-300, 1e300]
    exponents = [4.0, 4.0, 1.0, 0.5, 2.0, 3.0, 1e6, -2.0, math.inf, math.nan]
    powered = 0
    for _ in range(3000):
        n = rng.randint(0, 12)
        scorer = BacklogTtftScorer(hardware_label=label, prediction_exponent=rng.choice(exponents))
        shared = [(rng.random(), rng.random() * 1e-3) for _ in range(3)]
        endpoints = []
        predicted = []
        for _ in range(n):
            key = f"e{rng.randint(0, n)}"
            scorer._cycle_models[key] = rng.choice(shared)
            labels = {"gpu": rng.choice(["h100", "a10g"])} if rng.random() < 0.7 else {}
            endpoints.append(EndpointView(key=key, metrics=None, scraped_at=None, labels=labels))
            predicted.append(rng.choice(specials) if rng.random() < 0.1 else rng.random() * 2)
        answers = []
        for native in (False, True):
            backlog_ttft_scorer.NATIVE_POW = native
            try:
                answers.append(_bits(_outcome(scorer, predicted, endpoints, False)))
            finally:
                backlog_ttft_scorer.NATIVE_POW = False
        assert answers[0] == answers[1], (predicted, scorer.prediction_exponent)
        powered += not isinstance(answers[0], str) and len(answers[0]) > 1
    assert powered > 1000


def test_the_native_preference_factor_is_the_comprehension_s_floats() -> None:
    """``_preferred`` (the compiled build's loop with ``math.pow``, run in either build) gives the
    comprehension's ``r * (fastest / idle[i]) ** preference`` bit for bit, and fails alike (an
    overflow, a zero idle time); zero, negative, infinite and NaN bases included."""
    rng = random.Random(16)
    specials = [0.0, -0.0, -1.0, math.inf, -math.inf, math.nan, 1e-300, 1e300]

    def outcome(
        fn: object, ratios: list[float], idle: list[float], fastest: float, preference: float
    ) -> object:
        try:
            if fn is None:
                return _bits([r * (fastest / idle[i]) ** preference for i, r in enumerate(ratios)])
            return _bits(_preferred(ratios, idle, fastest, preference))
        except (ZeroDivisionError, OverflowError) as failed:
            return type(failed).__name__
        except TypeError:  # a complex power (a negative base): ``**`` returns one, the product fails later
            return "complex"

    checked = 0
    for _ in range(5000):
        n = rng.randint(0, 10)
        ratios = [rng.choice(specials) if rng.random() < 0.05 else rng.random() for _ in range(n)]
        idle = [rng.choice(specials) if rng.random() < 0.1 else 0.01 + rng.random() for _ in range(n)]
        fastest = rng.choice([min(idle, default=1.0), 0.05, 1e-200, 2.0])
        preference = rng.choice([1.0, 1.0, 0.5, 2.0, 3.7, 400.0, -1.0])
        expected = outcome(None, ratios, idle, fastest, preference)
        if expected == "complex":
            continue
        assert outcome(_preferred, ratios, idle, fastest, preference) == expected, (ratios, idle, fastest)
        checked += 1
    assert checked > 3000
