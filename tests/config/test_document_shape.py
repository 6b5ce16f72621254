"""Configuration documents are refused for their shape before anything walks them.

Python's parsers and validators recurse: a file nested 100,000 levels deep ended ``igw validate``
in a ``RecursionError`` traceback and stopped the gateway's hot reload; nested YAML aliases ("billion
laughs") made ``igw validate`` run until killed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml

from igw.cli.main import main
from igw.config.documents import MAX_FILE_BYTES, MAX_NESTING, DocumentReadError, parse_text, read_documents
from tests.config.hostile_documents import billion_laughs


def nested_json(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def nested_yaml(levels: int) -> str:
    return "a: " + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "\n"


@pytest.mark.parametrize("render", [nested_json, nested_yaml])
def test_nesting_up_to_the_limit_is_read_and_one_more_level_is_refused(render: object) -> None:
    assert callable(render)
    assert parse_text(render(MAX_NESTING), source="f")
    with pytest.raises(DocumentReadError, match=f"^f: nested deeper than {MAX_NESTING} levels$"):
        parse_text(render(MAX_NESTING + 1), source="f")


@pytest.mark.parametrize("text", [nested_json(100_000), "a: " + "[" * 100_000 + "]" * 100_000])
def test_nesting_beyond_the_interpreter_s_recursion_is_refused_not_crashed(text: str) -> None:
    with pytest.raises(DocumentReadError, match="nested deeper than"):
        parse_text(text, source="f")


def test_aliases_that_expand_past_the_limit_are_refused_without_expanding_them() -> None:
    with pytest.raises(DocumentReadError, match="more than 1,000,000 values once its aliases are expanded"):
        parse_text(billion_laughs(9), source="f")  # 10**9 values if expanded


def test_a_few_shared_aliases_are_fine() -> None:
    (doc,) = parse_text(billion_laughs(3), source="f")
    assert len(doc.content["x2"]) == 10
    assert json.dumps(doc.content).count("lol") == 10 + 100 + 1000


def test_an_alias_inside_itself_is_refused() -> None:
    with pytest.raises(DocumentReadError, match="an alias refers to a value that contains it"):
        parse_text("a: &a [1, *a]\n", source="f")


def test_a_file_larger_than_the_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    """``igw validate /dev/zero`` read until it ran out of memory (MemoryError traceback); the same
    read serves the gateway's hot reload, endpoints files and sim specs."""
    with pytest.raises(DocumentReadError, match="larger than 16 MiB"):
        read_documents(Path("/dev/zero"))
    large = tmp_path / "large.yaml"
    large.write_bytes(b"# " + b"x" * MAX_FILE_BYTES + b"\n")
    with pytest.raises(DocumentReadError, match="larger than 16 MiB"):
        read_documents(large)
    at_the_limit = tmp_path / "limit.yaml"
    at_the_limit.write_bytes(b"a: 1\n# " + b"x" * (MAX_FILE_BYTES - 8) + b"\n")
    assert [d.content for d in read_documents(at_the_limit)] == [{"a": 1}]


def test_the_command_line_names_a_file_too_large(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/dev/zero"]) == 2
    assert "/dev/zero: larger than 16 MiB" in capsys.readouterr().out


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_deep_flow_nesting_never_enters_pyyaml_s_quadratic_pure_python_scanner() -> None:
    """PyYAML's pure-Python scanner re-walks every open ``[`` for each token: refusing a 20 KB line of
    ``[`` cost ~10 s of CPU, a 1 MiB ConfigMap (the operator and the gateway parse them) far longer.
    Documents are now parsed by libyaml (linear, its own nesting limit reported as ours). Checked by
    the frames entered, not by time: no frame of ``yaml/scanner.py`` runs."""
    entered: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith(("yaml/scanner.py", "yaml/parser.py")):
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        with pytest.raises(DocumentReadError, match=f"^f: nested deeper than {MAX_NESTING} levels$"):
            parse_text("a: " + "[" * 10_000 + "]" * 10_000 + "\n", source="f")
        (doc,) = parse_text("a: {b: [1, 2]}\n", source="f")
    finally:
        sys.setprofile(None)
    assert doc.content == {"a": {"b": [1, 2]}}
    assert entered == []
