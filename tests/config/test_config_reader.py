"""How configuration files are read, where kubectl reads them differently than igw did until s39.

A kind misspelled in an API group igw owns or reads, a JSON stream, ``metadata.generateName`` and an
object's own labels: each through the real ``igw validate`` entry point, the loader ``igw serve``
uses, or the one reader (:mod:`igw.config.documents`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from igw.cli.main import main
from igw.config import documents as reader
from igw.config.documents import CONFIG_LIMITS, DocumentReadError, parse_text
from igw.config.errors import ConfigError
from igw.config.inference_extension import KINDS as EXTENSION_KINDS
from igw.config.kinds import KNOWN_KINDS
from igw.config.loader import load_gateway_config
from igw.config.model import API_GROUP, KIND
from igw.config.validate import validate_document
from igw.global_router.schema import KIND as GLOBAL_KIND
from igw.scheduling.picker_config import KIND as PICKER_KIND

from .cases import base_document

# ---- a kind its API group does not hold --------------------------------------------------------------


def test_misspelled_kind_in_our_group_is_a_problem_naming_the_nearest_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kind: InferenceGatewayconfig`` was skipped with a note and the file exited 0, where
    ``kubectl apply`` fails with "no matches for kind"."""
    doc = base_document()
    doc["kind"] = "InferenceGatewayconfig"
    path = tmp_path / "typo.yaml"
    path.write_text("# a comment\n" + yaml.safe_dump(doc, sort_keys=False))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:3: kind: unknown kind 'InferenceGatewayconfig' in API group {API_GROUP}" in out
    assert "(did you mean 'InferenceGatewayConfig'?)" in out
    assert "GlobalRouterConfig" in out
    assert "[unknown-kind]" in out


@pytest.mark.parametrize(
    ("api_version", "kind", "nearest"),
    [
        ("inference.networking.x-k8s.io/v1alpha2", "InferenceObjectiv", "InferenceObjective"),
        ("inference.networking.k8s.io/v1", "InferencePol", "InferencePool"),
        (f"{API_GROUP}/v1alpha1", "GlobalRouterconfig", "GlobalRouterConfig"),
    ],
)
def test_unknown_kinds_of_the_groups_igw_reads_are_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], api_version: str, kind: str, nearest: str
) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}))
    assert main(["validate", str(path)]) == 1
    assert f"did you mean {nearest!r}?" in capsys.readouterr().out


def test_a_missing_kind_in_our_group_is_a_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = base_document()
    del doc["kind"]
    path = tmp_path / "nokind.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 1
    assert 'kind: missing required field "kind"' in capsys.readouterr().out


def test_real_kinds_of_those_groups_and_other_groups_stay_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An InferencePool, a HyperPod InferenceEndpointConfig and a Deployment (even a misspelled one:
    its group is not igw's) beside a valid config are skipped with a note, as before."""
    others = [
        {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "p"}},
        {"apiVersion": f"{API_GROUP}/v1", "kind": "InferenceEndpointConfig", "metadata": {"name": "e"}},
        {"apiVersion": f"{API_GROUP}/v1", "kind": "InferenceGatewayConfigList", "items": None},
        {"apiVersion": "apps/v1", "kind": "Deploymnt", "metadata": {"name": "d"}},
    ]
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump_all([base_document(), *others]))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    for number, kind in ((2, "InferencePool"), (3, "InferenceEndpointConfig"), (5, "Deploymnt")):
        assert f"skipped document {number} (kind {kind})" in err


def test_known_kinds_agree_with_the_kinds_igw_checks() -> None:
    assert {KIND, GLOBAL_KIND} <= KNOWN_KINDS[API_GROUP]
    assert {*EXTENSION_KINDS, PICKER_KIND} <= KNOWN_KINDS["inference.networking.x-k8s.io"]


def test_serve_names_the_misspelled_kind(tmp_path: Path) -> None:
    doc = base_document()
    doc["kind"] = "InferenceGatewayconfig"
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="did you mean 'InferenceGatewayConfig'"):
        load_gateway_config(path)


# ---- JSON streams ------------------------------------------------------------------------------------


def test_a_json_stream_is_read_as_several_documents_with_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two JSON objects back to back (which kubectl's decoder reads as two objects) failed with
    ``line 2, column 1: Extra data``."""
    second = base_document()
    second["metadata"]["name"] = "second"
    second["spec"]["bogus"] = 1
    text = json.dumps(base_document()) + "\n" + json.dumps(second, indent=1)
    path = tmp_path / "stream.json"
    path.write_text(text)
    bogus_line = next(n for n, line in enumerate(text.splitlines(), start=1) if '"bogus"' in line)
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    assert (
        out.strip() == f'{path}:{bogus_line}: spec.bogus: unknown field "spec.bogus" [schema.unknown-field]'
    )
    assert "2 InferenceGatewayConfig document(s) checked" in err
    assert load_gateway_config(path).name == "base"


def test_values_on_one_line_keep_their_columns_for_duplicate_keys() -> None:
    with pytest.raises(DocumentReadError, match=r"s: line 2, column 10: duplicate key 'b'"):
        parse_text('{"a": 1}  {"kind": "X",\n "b": 2, "b": 3}\n', source="s")
    documents = parse_text('{"a": 1}  {"kind": "X",\n "b": 2}\n', source="s")
    assert [(d.index, d.line, d.line_of(["b"])) for d in documents] == [(0, 1, 1), (1, 1, 2)]


def test_a_broken_value_in_a_stream_names_its_line() -> None:
    with pytest.raises(DocumentReadError, match=r"s: line 3, column 1: Expecting value"):
        parse_text('{"a": 1}\n{"b":\n', source="s")


def test_the_shape_limits_hold_for_every_value_of_a_stream() -> None:
    deep = "[" * (CONFIG_LIMITS.max_nesting + 1) + "]" * (CONFIG_LIMITS.max_nesting + 1)
    with pytest.raises(DocumentReadError, match="nested deeper than"):
        parse_text('{"a": 1}\n' + deep, source="s")


def test_a_stream_of_more_documents_than_the_limit_is_refused() -> None:
    """A 16 MiB file of ``{}`` is eight million values: refused once past the limit, not read for
    minutes; YAML documents count the same way."""
    with pytest.raises(DocumentReadError, match="more than 100,000 documents"):
        parse_text("{}" * (reader.MAX_DOCUMENTS + 1), source="s", field_lines=False)
    with pytest.raises(DocumentReadError, match="more than 100,000 documents"):
        parse_text("--- 1\n" * (reader.MAX_DOCUMENTS + 1), source="s")
    assert len(parse_text("{}" * reader.MAX_DOCUMENTS, source="s", field_lines=False)) == reader.MAX_DOCUMENTS


# ---- metadata.generateName ---------------------------------------------------------------------------


def _generated_name_document() -> dict[str, object]:
    doc = base_document()
    del doc["metadata"]["name"]
    doc["metadata"]["generateName"] = "llama-"
    return doc


def test_generate_name_is_valid_for_validate_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kubectl create`` accepts ``metadata.generateName`` without ``metadata.name``; igw validate
    refused it as ``missing required field "metadata.name"``."""
    path = tmp_path / "generated.yaml"
    path.write_text(yaml.safe_dump(_generated_name_document()))
    assert main(["validate", str(path)]) == 0
    assert (
        "has metadata.generateName and no metadata.name: valid for kubectl create" in capsys.readouterr().err
    )


def test_neither_name_nor_generate_name_is_still_a_missing_name() -> None:
    doc = base_document()
    del doc["metadata"]["name"]
    problems = validate_document(doc)
    assert [(p.path, p.message) for p in problems] == [
        ("metadata.name", 'missing required field "metadata.name"')
    ]
    doc["metadata"]["generateName"] = "Bad_Prefix"
    assert [p.path for p in validate_document(doc)] == ["metadata.generateName"]


def test_serve_needs_a_name(tmp_path: Path) -> None:
    path = tmp_path / "generated.yaml"
    path.write_text(yaml.safe_dump(_generated_name_document()))
    with pytest.raises(ConfigError) as info:
        load_gateway_config(path)
    assert [(p.path, p.rule) for p in info.value.problems] == [("metadata.name", "serve-needs-name")]


# ---- metadata.labels ---------------------------------------------------------------------------------


def test_an_object_may_carry_more_than_64_labels() -> None:
    """The API server sets no limit on an object's labels; the 64 of spec label maps (for the CEL
    cost of their rules) refused an exported object decorated by GitOps tools."""
    doc = base_document()
    doc["metadata"]["labels"] = {f"argocd.example.com/l{i}": "v" for i in range(200)}
    assert validate_document(doc) == []
    doc["metadata"]["labels"]["bad key!"] = "v"
    assert [p.path for p in validate_document(doc)] == ['metadata.labels["bad key!"]']
    spec_labels = base_document()
    spec_labels["spec"]["podDefaults"] = {"labels": {f"l{i}": "v" for i in range(65)}}
    assert [p.rule for p in validate_document(spec_labels)] == ["schema.maxProperties"]
