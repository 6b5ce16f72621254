"""Files in the shapes ``kubectl`` reads and writes: a ``kind: List`` of objects (what ``kubectl get
-o yaml`` prints for several objects and ``kubectl apply -f`` applies item by item) is checked and
loaded item by item, in YAML and JSON, with each problem on the line of its own field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from igw.cli.main import main
from igw.config.documents import expand_lists, parse_text
from igw.config.loader import load_gateway_config

from .cases import base_document


def _list(*items: object, kind: str = "List") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": ""}, "items": list(items)}


def test_validate_checks_the_items_of_a_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = base_document()
    broken["spec"]["schedulers"][0]["targetPort"] = 70000
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump(_list(base_document(), broken), sort_keys=False))
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    (line,) = out.splitlines()
    assert "spec.schedulers[0].targetPort: must be <= 65535 (got 70000)" in line
    assert "70000" in path.read_text().splitlines()[int(line.split(":")[1]) - 1]
    assert "2 InferenceGatewayConfig document(s) checked, 1 problem(s)" in err


def test_validate_checks_a_json_list_of_every_kind_it_knows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objective = {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {"name": "chat"},
        "spec": {"priority": 1, "poolRef": {"name": "base"}},
    }
    path = tmp_path / "list.json"
    path.write_text(json.dumps(_list(objective, _list(base_document()), kind="InferenceGatewayConfigList")))
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert "1 InferenceGatewayConfig document(s) and 1 InferenceObjective document(s) checked" in err


def test_serve_loads_a_gateway_config_from_a_list(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    path.write_text(yaml.safe_dump(_list(configmap, base_document())))
    assert load_gateway_config(path).name == "base"


def test_an_item_keeps_its_list_document_and_its_own_line() -> None:
    text = "---\nkind: ConfigMap\n---\napiVersion: v1\nkind: List\nitems:\n- kind: A\n- kind: B\n  x: 1\n"
    documents = expand_lists(parse_text(text, source="t"))
    assert [(d.index, d.line, d.content["kind"]) for d in documents] == [
        (0, 2, "ConfigMap"),
        (1, 7, "A"),
        (1, 8, "B"),
    ]
    assert documents[2].line_of(["x"]) == 9


def test_a_mapping_named_like_a_list_without_items_is_left_alone() -> None:
    documents = expand_lists(parse_text("kind: PodList\nitems: none\n", source="t"))
    assert [d.content for d in documents] == [{"kind": "PodList", "items": "none"}]
