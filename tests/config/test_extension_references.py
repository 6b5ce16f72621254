"""Cross-references in spec.extensions that ``igw validate`` resolves: objective members, canary targets."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.cli.main import main
from igw.config.build import build_gateway_config
from igw.config.extension_references import OBJECTIVE_MEMBER_RULE, REWRITE_TARGET_RULE, served_models
from igw.config.validate import validate_document
from igw.gateway.model_rewrite import ModelRewriteError, ModelRewrites
from igw.gateway.runtime import GatewayRuntime
from igw.scheduling.flow_control import FlowControlError, FlowControlSettings
from igw.security.settings import RateLimitSettings
from tests.gateway.support import config_doc, scheduler

from .cases import base_document

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _with(extensions: dict[str, Any]) -> dict[str, Any]:
    doc = base_document()
    doc["spec"].setdefault("extensions", {}).update(extensions)
    return doc


def _objectives(*objectives: dict[str, Any]) -> dict[str, Any]:
    return _with({"flowControl": {"objectives": list(objectives)}})


def _rewrite(*targets: str) -> dict[str, Any]:
    rule = {"model": "llama", "targets": [{"model": t, "weight": 1} for t in targets]}
    return _with({"modelRewrites": {"rules": [rule]}})


def _found(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(p.path, p.rule) for p in validate_document(doc)}


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            _objectives(
                {"name": "chat", "priority": 1, "models": ["m", "n"]},
                {"name": "batch", "priority": -1, "models": ["x", "n"]},
            ),
            {("spec.extensions.flowControl.objectives[1].models[1]", OBJECTIVE_MEMBER_RULE)},
        ),
        (
            _objectives(
                {"name": "chat", "priority": 1, "tenants": ["acme"]},
                {"name": "batch", "priority": -1},
                {"name": "bulk", "priority": -2, "tenants": ["acme"]},
            ),
            {("spec.extensions.flowControl.objectives[2].tenants[0]", OBJECTIVE_MEMBER_RULE)},
        ),
        # the same name as a model of one objective and a tenant of another is no conflict
        (
            _objectives(
                {"name": "a", "priority": 1, "models": ["x"]}, {"name": "b", "priority": 0, "tenants": ["x"]}
            ),
            set(),
        ),
        # twice in one objective: the same priority either way
        (_objectives({"name": "a", "priority": 1, "models": ["x", "x"]}), set()),
        (
            _rewrite(LLAMA, "llama-v2"),
            {("spec.extensions.modelRewrites.rules[0].targets[1].model", REWRITE_TARGET_RULE)},
        ),
        (_rewrite(LLAMA, "sql-lora"), set()),  # a base model and a scheduler's LoRA adapter
    ],
)
def test_cross_references_are_refused_by_path(doc: dict[str, Any], expected: set[tuple[str, str]]) -> None:
    assert _found(doc) == expected


def test_messages_name_the_other_entry_and_the_target() -> None:
    doc = _objectives(
        {"name": "chat", "priority": 1, "models": ["m"]}, {"name": "batch", "priority": -1, "models": ["m"]}
    )
    (problem,) = validate_document(doc)
    assert '"m" is already listed under spec.extensions.flowControl.objectives[0].models' in problem.message
    (problem,) = validate_document(_rewrite("llama-v2"))
    assert 'no scheduler serves "llama-v2"' in problem.message


def test_validate_and_the_runtime_build_agree() -> None:
    """What igw validate refuses the gateway refuses at start, and what it lets through builds."""
    conflict = {
        "objectives": [
            {"name": "a", "priority": 1, "models": ["m"]},
            {"name": "b", "priority": 0, "models": ["m"]},
        ]
    }
    with pytest.raises(FlowControlError, match=r"objectives\[1\]\.models\[0\]"):
        FlowControlSettings.from_extension(conflict)
    same = {"objectives": [{"name": "a", "priority": 1, "models": ["m", "m"]}]}
    assert FlowControlSettings.from_extension(same).model_priorities == {"m": 1}
    served = served_models(base_document()["spec"])
    rules = {"rules": [{"model": "llama", "targets": [{"model": "llama-v2", "weight": 1}]}]}
    with pytest.raises(ModelRewriteError, match=r"rules\[0\]\.targets\[0\]\.model"):
        ModelRewrites.from_extension(rules, routable=served.__contains__)
    ok = {"rules": [{"model": "llama", "targets": [{"model": "sql-lora", "weight": 1}]}]}
    assert ModelRewrites.from_extension(ok, routable=served.__contains__).match("llama", {}) is not None


def test_igw_validate_prints_the_path_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "canary.yaml"
    path.write_text(yaml.safe_dump(_rewrite(LLAMA, "llama-v2"), sort_keys=False))
    assert main(["validate", str(path)]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert "spec.extensions.modelRewrites.rules[0].targets[1].model: no scheduler serves" in line
    file_line = int(line.split(":")[1])
    assert "llama-v2" in path.read_text().splitlines()[file_line - 1]


RUNTIME_ONLY_BEFORE_S39: list[tuple[dict[str, Any], str]] = [
    ({"flowControl": {"pollInterval": "0s"}}, "spec.extensions.flowControl.pollInterval"),
    (
        {"flowControl": {"bands": [{"priority": 0, "ttl": "0s"}]}},
        "spec.extensions.flowControl.bands[0].ttl",
    ),
    (
        {"flowControl": {"bands": [{"priority": 0, "slotWait": "0ms"}]}},
        "spec.extensions.flowControl.bands[0].slotWait",
    ),
    (
        {"flowControl": {"objectiveAccess": [{"objective": "a", "tenants": ["t"]}] * 2}},
        "spec.extensions.flowControl.objectiveAccess[1].objective",
    ),
    (
        {
            "flowControl": {
                "bands": [{"priority": 0, "dispatchBelow": 0.5}, {"priority": 1, "dispatchBelow": 0.4}]
            }
        },
        "spec.extensions.flowControl.bands[1].dispatchBelow",
    ),
    (
        {
            "flowControl": {
                "bands": [{"priority": 1, "maxEndpointQueue": 1}, {"priority": 0, "maxEndpointQueue": 3}]
            }
        },
        "spec.extensions.flowControl.bands[0].maxEndpointQueue",
    ),
    (
        {"flowControl": {"bands": [{"priority": 0}, {"priority": 1, "keepSlots": 2}]}},
        "spec.extensions.flowControl.bands[1].keepSlots",
    ),
    (
        {"routing": {"retryAfter": {"minSeconds": 10, "maxSeconds": 5}}},
        "spec.extensions.routing.retryAfter.maxSeconds",
    ),
    (
        {"modelRewrites": {"rules": [{"model": "x", "targets": [{"model": LLAMA, "weight": 0}]}]}},
        "spec.extensions.modelRewrites.rules[0].targets",
    ),
    (
        {
            "modelRewrites": {
                "rules": [{"model": "x", "targets": [{"model": LLAMA, "weight": 1}], "stickyBy": "header"}]
            }
        },
        "spec.extensions.modelRewrites.rules[0].stickyHeader",
    ),
]
"""Settings ``igw serve`` refused at start (or, ``pollInterval: 0s``, ran with a pump that never
paused) while ``igw validate`` - and the operator's admission, which runs the same checks - found
0 problems: an accepted InferenceGatewayConfig whose gateways then did not start."""


@pytest.mark.parametrize(("extensions", "path"), RUNTIME_ONLY_BEFORE_S39)
def test_what_the_gateway_refuses_at_start_igw_validate_refuses_by_path(
    extensions: dict[str, Any], path: str
) -> None:
    doc = config_doc([scheduler("pool", LLAMA)])
    doc["spec"]["extensions"].update(extensions)
    assert [p.path for p in validate_document(doc)] == [path]
    field = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[1])
    with pytest.raises(ValueError, match=field):  # the gateway's own build refuses it, naming the field
        GatewayRuntime(build_gateway_config(doc), rng=random.Random(0), clock=lambda: 0.0)


def test_a_tenant_listed_twice_under_rate_limits_is_refused_naming_the_second_entry() -> None:
    """``igw serve`` refuses it at start; before session s39 ``igw validate`` found 0 problems."""
    doc = _with(
        {
            "rateLimits": {
                "tenants": [
                    {"tenant": "acme", "requestsPerSecond": 1},
                    {"tenant": "beta", "requestsPerSecond": 2},
                    {"tenant": "acme", "requestsPerSecond": 5},
                ]
            }
        }
    )
    problems = validate_document(doc)
    assert [(p.path, p.rule) for p in problems] == [
        ("spec.extensions.rateLimits.tenants[2].tenant", "unique-rate-limit-tenant")
    ]
    assert 'duplicates spec.extensions.rateLimits.tenants[0].tenant ("acme")' in problems[0].message
    with pytest.raises(ValueError, match=r"tenants\[2\]\.tenant"):  # what igw serve says at start
        RateLimitSettings.from_mapping(build_gateway_config(doc).extensions["rateLimits"])
