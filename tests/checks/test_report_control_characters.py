"""Names from the scanned source reach every report format without their control characters.

A manifest folder is often an untrusted change (a pull request scanned in CI). Until session s50 a
Deployment named ``a<b>&"c\x01\x1b[31m`` made ``-o junit`` write a file no XML parser reads (XML 1.0
admits no C0 control, escaped or not) and ``-o table`` send the ANSI escape to the terminal; a file
named so did the same through the source problems. They are now written as ``\\x01``-style escapes.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from igw.checks.model import printable
from tests.checks.helpers import cli, find, mutated, write_docs

SARIF_SCHEMA = json.loads((Path(__file__).parent / "sarif-schema-2.1.0.json").read_text())
HOSTILE = "a<b>&\"c']]>\x01\x1b[31m\r\u202ez"
SHOWN = "a<b>&\"c']]>\\x01\\x1b[31m\\r\\u202ez"


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    docs = mutated(lambda d: find(d, "Deployment", "llama-8b")["metadata"].update(name=HOSTILE))
    folder = write_docs(tmp_path / "hostile", docs)
    (folder / "bad\x1b[2J.yaml").write_text("a: [\n")  # a syntax error: a source problem naming the file
    return folder


def test_junit_with_control_characters_in_names_is_xml(hostile_dir: Path) -> None:
    _, out = cli("audit", "--manifests", str(hostile_dir), "-o", "junit")
    root = ET.fromstring(out.split("\n", 1)[1])  # after the XML declaration (fromstring takes str)
    names = {case.get("name") for case in root.iter("testcase")}
    assert f"Deployment ml/{SHOWN}" in names
    [error] = root.iter("error")
    assert "bad\\x1b[2J.yaml" in (error.get("message") or "")


@pytest.mark.parametrize("output", ["table", "json", "sarif"])
def test_no_control_character_reaches_the_other_formats(hostile_dir: Path, output: str) -> None:
    _, out = cli("audit", "--manifests", str(hostile_dir), "-o", output)
    for control in ("\x1b", "\x01", "\r", "\u202e"):
        assert control not in out, ascii(control)
    if output == "sarif":
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(json.loads(out))
    if output == "json":
        assert f"Deployment ml/{SHOWN}" in {r["resource"] for r in json.loads(out)["results"]}


def test_printable_keeps_text_newlines_and_tabs() -> None:
    assert printable("línea 1\n\tlínea 2 中") == "línea 1\n\tlínea 2 中"
    assert printable("\x00\x7f\x85\u2066") == "\\x00\\x7f\\x85\\u2066"
