from __future__ import annotations

import pytest

from igw.scheduling.plugins.lora_affinity_scorer import LoraAffinityScorer
from tests.scheduling.helpers import ctx, ep, req

F = frozenset


@pytest.mark.parametrize(
    ("active", "waiting", "max_lora", "expected"),
    [
        pytest.param(F({"a"}), F(), 2, 1.0, id="active"),
        pytest.param(F({"a"}), F({"b"}), 2, 1.0, id="active-even-when-full"),
        pytest.param(F({"x"}), F(), 2, 0.8, id="free-slot"),
        pytest.param(F({"x"}), F({"a"}), 2, 0.6, id="waiting-no-slot"),
        pytest.param(F({"x", "y"}), F(), 2, 0.0, id="full-and-absent"),
        pytest.param(F(), F(), 0, 0.0, id="no-lora-slots"),
        pytest.param(None, None, None, None, id="engine-without-lora-metrics"),
    ],
)
def test_lora_affinity(
    active: frozenset[str] | None,
    waiting: frozenset[str] | None,
    max_lora: int | None,
    expected: float | None,
) -> None:
    e = ep("e", active=active, waiting_adapters=waiting, max_lora=max_lora)
    assert LoraAffinityScorer().score(ctx(req(adapter="a")), [e]) == [expected]


def test_base_model_request_is_neutral() -> None:
    eps = [ep("e1", active=F({"x"}), max_lora=1), ep("e2", max_lora=None)]
    assert LoraAffinityScorer().score(ctx(req()), eps) == [1.0, 1.0]
