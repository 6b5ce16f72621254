"""A plugin type of llm-d or GIE that igw does not implement is named as such, not as a typo.

``type: pd-profile-handler`` (llm-d's prefill/decode handler) was refused as "unknown plugin type
'pd-profile-handler' (did you mean 'single-profile-handler'?)": the user was told they had misspelt
a name they had copied from llm-d's own guide, and pointed at an unrelated plugin.
"""

from __future__ import annotations

import random

import pytest

from igw.scheduling.builtin import plugin_types
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import scheduler_from_picker_config
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.upstream_plugins import GIE, LLM_D, UPSTREAM_PLUGIN_TYPES


def _problem(type_name: str) -> str:
    with pytest.raises(SchedulerConfigError) as err:
        scheduler_from_picker_config(
            {"plugins": [{"type": type_name}]}, routing=RoutingSettings(), rng=random.Random(0)
        )
    [problem] = err.value.problems
    return problem


@pytest.mark.parametrize(
    ("type_name", "source"),
    [
        ("pd-profile-handler", "llm-d-inference-scheduler v0.8.0"),
        ("prefill-header-handler", "llm-d-inference-scheduler v0.8.0"),
        ("precise-prefix-cache-scorer", "llm-d-inference-scheduler v0.8.0"),
        ("predicted-latency-scorer", "gateway-api-inference-extension v1.5.0"),
    ],
)
def test_an_upstream_plugin_igw_lacks_is_named_with_its_release(type_name: str, source: str) -> None:
    problem = _problem(type_name)
    assert problem.startswith(
        f"plugins[0].type: plugin type {type_name!r} is a plugin of llm-d/GIE that igw does not "
        f"implement ({source}); known: "
    )
    assert "did you mean" not in problem
    assert "unknown plugin type" not in problem


def test_a_misspelt_upstream_name_is_pointed_at_that_name() -> None:
    problem = _problem("pd-profile-handlr")
    assert problem.startswith(
        "plugins[0].type: unknown plugin type 'pd-profile-handlr' (did you mean 'pd-profile-handler'? "
        "a plugin of llm-d/GIE that igw does not implement); known: "
    )


def test_a_misspelt_igw_name_keeps_its_suggestion() -> None:
    problem = _problem("queue-scorrer")
    assert problem.startswith(
        "plugins[0].type: unknown plugin type 'queue-scorrer' (did you mean 'queue-scorer'?)"
    )


def test_the_tables_are_two_disjoint_release_lists_and_igw_implements_the_names_it_shares() -> None:
    """Each name once, with one release; ``by-label-selector`` (llm-d) and ``queue-scorer`` (GIE) are
    in the lists and in igw, so they never reach the table's wording."""
    assert set(UPSTREAM_PLUGIN_TYPES.values()) == {GIE, LLM_D}
    assert {"by-label-selector", "queue-scorer", "single-profile-handler"} <= set(plugin_types())
    assert {"by-label-selector", "queue-scorer", "single-profile-handler"} <= set(UPSTREAM_PLUGIN_TYPES)
    assert "plugin of llm-d/GIE" not in _problem("nope-scorer")
