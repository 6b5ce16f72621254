"""``BacklogTtftScorer._ratios`` against the per-kind dictionary it replaced (kinds as ``(model,
label)`` tuples, each looked up again per use): the same floats in the same positions, and the same
``KeyError`` where a kind has no prediction below infinity (and ``ZeroDivisionError`` where a kind's
best is 0)."""

from __future__ import annotations

import math
import random

import pytest

from igw.scheduling.plugins.backlog_ttft_scorer import BacklogTtftScorer
from igw.scheduling.types import EndpointView


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
