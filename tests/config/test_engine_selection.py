"""spec.extensions.engines: TGI and generic engines per scheduler, AWS's engineType enum untouched."""

from __future__ import annotations

import re
from typing import Any

import pytest

from igw import engines
from igw.config.build import build_gateway_config
from igw.config.engine_selection import EngineSelectionError, scheduler_engines
from igw.config.extension_references import ENGINE_SELECTION_RULE
from igw.config.schema import resolved_schema
from igw.config.validate import validate_document

from .cases import base_document


def _doc(extension: dict[str, Any]) -> dict[str, Any]:
    doc = base_document()
    doc["spec"]["extensions"] = {"engines": extension}
    return doc


def test_without_the_extension_engine_type_decides() -> None:
    chosen = scheduler_engines(build_gateway_config(base_document()))
    assert chosen == {"llama": engines.VLLM, "qwen": engines.SGLANG}


def test_tgi_and_generic_schedulers() -> None:
    doc = _doc(
        {"tgi": ["llama"], "generic": [{"scheduler": "qwen", "queue": 'q{model="x"}', "running": "r"}]}
    )
    assert validate_document(doc) == []
    chosen = scheduler_engines(build_gateway_config(doc))
    assert chosen["llama"] is engines.TGI
    assert chosen["qwen"].name == engines.GENERIC
    assert chosen["qwen"].families.waiting == 'q{model="x"}'
    assert chosen["qwen"].families.kv_usage == ()


@pytest.mark.parametrize(
    ("extension", "problem", "path"),
    [
        (
            {"tgi": ["ghost"]},
            "spec.extensions.engines.tgi[0]: no scheduler named 'ghost' in spec.schedulers",
            "spec.extensions.engines.tgi[0]",
        ),
        (
            {"tgi": ["llama"], "generic": [{"scheduler": "llama", "queue": "q", "running": "r"}]},
            "spec.extensions.engines.generic[0].scheduler: scheduler 'llama' is already listed at "
            "spec.extensions.engines.tgi[0]",
            "spec.extensions.engines.generic[0].scheduler",
        ),
        (
            {"generic": [{"scheduler": "ghost", "queue": "q", "running": "r"}]},
            "spec.extensions.engines.generic[0].scheduler: no scheduler named 'ghost' in spec.schedulers",
            "spec.extensions.engines.generic[0].scheduler",
        ),
    ],
)
def test_names_must_be_schedulers_listed_once(extension: dict[str, Any], problem: str, path: str) -> None:
    """The gateway refuses these at start, and igw validate refuses them first, at the same path."""
    doc = _doc(extension)
    problems = validate_document(doc)
    assert [(p.path, p.rule) for p in problems] == [(path, ENGINE_SELECTION_RULE)]
    with pytest.raises(EngineSelectionError) as err:
        scheduler_engines(build_gateway_config(doc))
    assert problem in str(err.value)


@pytest.mark.parametrize("spec", ["q{model}", "1q", "q r", "q{a=1", ""])
def test_the_schema_rejects_malformed_metric_specs(spec: str) -> None:
    doc = _doc({"generic": [{"scheduler": "qwen", "queue": spec, "running": "r"}]})
    problems = validate_document(doc)
    assert {p.path for p in problems} == {"spec.extensions.engines.generic[0].queue"}


@pytest.mark.parametrize(
    "spec",
    ["q", "ns:q_total", 'q{model="a"}', "q{model=a, pool=b}", 'q{a="x",b="y"}', "q{}", 'q{ a = "1" }'],
)
def test_the_schema_pattern_and_the_parser_accept_the_same_specs(spec: str) -> None:
    generic = resolved_schema()["properties"]["spec"]["properties"]["extensions"]["properties"]["engines"]
    pattern = generic["properties"]["generic"]["items"]["properties"]["queue"]["pattern"]
    assert re.search(pattern, spec)
    engines.parse_metric_spec(spec)


def test_aws_engine_type_enum_is_unchanged() -> None:
    sched = resolved_schema()["properties"]["spec"]["properties"]["schedulers"]["items"]
    assert sched["properties"]["engineType"]["enum"] == ["vllm", "sglang"]


def test_the_gateway_reads_a_listed_schedulers_pods_as_that_engine() -> None:
    import random

    from igw.gateway.runtime import GatewayRuntime

    doc = _doc({"tgi": ["llama"]})
    doc["spec"]["schedulers"] = doc["spec"]["schedulers"][:1]
    runtime = GatewayRuntime(build_gateway_config(doc), rng=random.Random(1), clock=lambda: 0.0)
    assert runtime.schedulers["llama"].families == engines.TGI.families
