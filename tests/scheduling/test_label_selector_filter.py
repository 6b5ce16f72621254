from __future__ import annotations

import pytest

from igw.scheduling.plugins.label_selector_filter import LabelSelectorFilter, factory
from tests.scheduling.helpers import ctx, ep


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        pytest.param({}, ["a", "b", "c"], id="empty-keeps-all"),
        pytest.param({"role": "decode"}, ["a"], id="one-label"),
        pytest.param({"role": "decode", "gpu": "h100"}, [], id="all-must-match"),
    ],
)
def test_label_filter(match: dict[str, str], expected: list[str]) -> None:
    eps = [ep("a", labels={"role": "decode"}), ep("b", labels={"role": "prefill"}), ep("c")]
    assert [e.key for e in LabelSelectorFilter(match_labels=match).filter(ctx(), eps)] == expected


def test_factory_requires_string_map() -> None:
    with pytest.raises(ValueError, match="matchLabels: must be a mapping of strings"):
        factory("f", {"matchLabels": {"a": 1}}, "p")
