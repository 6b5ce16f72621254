"""The ``weights`` keys: schema, config model, builder and scheduler factory all agree with the table.

Each test fails when one of them is edited alone (a key added to the schema but not to the table, a
``Weights`` field without a row, a builder or factory that drops a key...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import igw.config.model
from igw.config.build import build_gateway_config
from igw.config.model import Weights
from igw.config.schema import resolved_schema
from igw.config.weight_keys import SCORER_WEIGHTS, default_weights
from igw.scheduling.builtin import REGISTRY
from igw.scheduling.factory import WEIGHT_KEYS, effective_weights, profile_from_weights
from igw.scheduling.framework import Scorer

from .cases import base_document


def _schema_weights() -> dict[str, Any]:
    schema = resolved_schema()
    scheduler = schema["properties"]["spec"]["properties"]["schedulers"]["items"]
    weights: dict[str, Any] = scheduler["properties"]["weights"]["properties"]
    return weights


def test_schema_weights_properties_are_the_table_rows_in_order() -> None:
    assert list(_schema_weights()) == [row.key for row in SCORER_WEIGHTS]


def test_schema_descriptions_and_defaults_match_the_table() -> None:
    schema = _schema_weights()
    for row in SCORER_WEIGHTS:
        prop = schema[row.key]
        assert prop["description"] == row.description, row.key
        assert prop["type"] == "integer", row.key
        assert prop["minimum"] == 0, row.key
        if "default" in prop:
            assert prop["default"] == row.default, row.key


def test_weights_dataclass_has_one_field_per_row_in_order() -> None:
    assert [f.name for f in dataclasses.fields(Weights)] == [row.field for row in SCORER_WEIGHTS]


def test_the_stale_config_model_default_weights_is_gone() -> None:
    assert not hasattr(igw.config.model, "DEFAULT_WEIGHTS")


def test_builder_reads_every_key_into_its_field() -> None:
    doc = base_document()
    values = {row.key: i + 1 for i, row in enumerate(SCORER_WEIGHTS)}
    doc["spec"]["schedulers"][0]["weights"] = values
    sched = build_gateway_config(doc).schedulers[0]
    assert sched.weights is not None
    assert {row.key: getattr(sched.weights, row.field) for row in SCORER_WEIGHTS} == values


def test_factory_maps_every_key_to_a_registered_scorer() -> None:
    assert dict(WEIGHT_KEYS) == {row.key: row.plugin_type for row in SCORER_WEIGHTS}
    for row in SCORER_WEIGHTS:
        assert isinstance(REGISTRY.create(row.plugin_type, path=row.key), Scorer), row.plugin_type


def test_every_set_weight_reaches_the_profile_with_its_value() -> None:
    values = {row.field: 10 + i for i, row in enumerate(SCORER_WEIGHTS)}
    merged = effective_weights(Weights(**values), lora_adapters=False)
    for row in SCORER_WEIGHTS:
        assert merged[row.key] == values[row.field]
    described = profile_from_weights(merged).describe()
    for row in SCORER_WEIGHTS:
        assert described[row.plugin_type] == values[row.field]


def test_defaults_come_from_the_table() -> None:
    assert default_weights(lora_adapters=False) == {
        "queue": 2,
        "kvCache": 2,
        "prefix": 3,
        "predictedLatency": 1,
    }
    with_lora = default_weights(lora_adapters=True)
    assert with_lora["loraAffinity"] == 1
    unset = effective_weights(None, lora_adapters=True)
    assert {k: unset[k] for k in with_lora} == with_lora
