"""``spec.extensions.authorization.allowedEngineFields``: the opt-in by which a deployment whose
callers are all trusted with an engine field (their own router in front, a single tenant) lets
them send it (:mod:`igw.gateway.tenant_fields`). Its names are the refused table's, no other: the
schema's enum (which the CRD carries, so the API server refuses a name outside it) and the table
are held equal here, and ``igw validate`` names an unknown entry. The gateway's behaviour with the
opt-in is tested through the real gateway in ``test_engine_code_fields.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.cli.main import main
from igw.config.crd import build_crd
from igw.gateway.tenant_fields import TENANT_REFUSED_FIELDS, refused_field, refused_header
from igw.security.identity import build_principal
from igw.security.settings import AuthorizationSettings
from tests.security.test_settings import gateway_doc, load


def _node(schema: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = schema["properties"]["allowedEngineFields"]
    return node


def test_the_schema_names_exactly_the_refused_fields() -> None:
    node = _node(load("authorization"))
    assert node["items"]["enum"] == list(TENANT_REFUSED_FIELDS)
    assert node["maxItems"] == len(TENANT_REFUSED_FIELDS)


def test_the_crd_refuses_a_name_outside_the_table() -> None:
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    node = _node(spec["properties"]["extensions"]["properties"]["authorization"])
    assert node["items"]["enum"] == list(TENANT_REFUSED_FIELDS)


def _write(tmp_path: Path, fields: list[str]) -> str:
    path = tmp_path / "igwc.yaml"
    path.write_text(yaml.safe_dump(gateway_doc({"authorization": {"allowedEngineFields": fields}})))
    return str(path)


def test_igw_validate_accepts_names_of_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", _write(tmp_path, ["rid", "routed_dp_rank", "kv_transfer_params"])]) == 0
    assert "0 problem(s)" in capsys.readouterr().err


def test_igw_validate_refuses_a_name_outside_the_table_naming_the_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # priority is the gateway's own (enginePriority) and a client may send it in the body anyway
    assert main(["validate", "--output", "json", _write(tmp_path, ["rid", "priority"])]) == 1
    problems = json.loads(capsys.readouterr().out)
    text = json.dumps(problems)
    assert "spec.extensions.authorization.allowedEngineFields[1]" in text, text


def test_the_setting_reaches_each_verified_callers_principal() -> None:
    settings = AuthorizationSettings.from_mapping({"allowedEngineFields": ["rid", "kv_transfer_params"]})
    principal = build_principal({"sub": "s", "tenant": "t"}, settings=settings)
    assert principal.engine_fields == {"rid", "kv_transfer_params"}
    assert AuthorizationSettings.from_mapping({}).allowed_engine_fields == frozenset()


def test_an_allowed_field_allows_its_header_and_vllm_xargs_forms() -> None:
    allowed = frozenset({"rid", "kv_transfer_params", "routed_dp_rank"})
    assert refused_field(("rid", "vllm_xargs.kv_transfer_params"), allowed) is None
    assert refused_field(("rid", "vllm_xargs.ec_transfer_params"), allowed) == "vllm_xargs.ec_transfer_params"
    assert refused_header(["X-Override-Rid", "X-Data-Parallel-Rank", "Accept"], allowed) is None
    assert refused_header(["x-override-priority"], allowed) == "x-override-priority"  # the body carries it
    assert refused_header(["X-Data-Parallel-Rank"], frozenset({"data_parallel_rank"})) is None
    assert refused_header(["X-Data-Parallel-Rank"], frozenset({"rid"})) == "x-data-parallel-rank"
    assert refused_header(["X-SMG-Routing-Key"], frozenset({"rid"})) == "x-smg-routing-key"
    assert refused_header(["X-SMG-Routing-Key"], frozenset({"routing_key"})) is None
