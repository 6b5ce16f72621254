"""``igw preflight`` / ``igw audit`` errors through the real CLI: what they quote from the command line
or the input (paths, option values) is printed as text, never taken for rich markup, and an error
stays on one line when stderr is not a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checks.helpers import SECURE, cli


@pytest.mark.parametrize("option", ["--fail-on", "--check"])
def test_an_option_value_that_looks_like_markup_is_a_usage_error_not_a_traceback(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--fail-on '[/x]'`` ended in rich's ``MarkupError`` traceback, exit 1."""
    code, _ = cli("audit", "--manifests", str(SECURE), option, "[/x]")
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("igw audit: error: ")
    assert "'[/x]'" in err
    assert "Traceback" not in err


def test_an_error_quotes_a_bracketed_path_whole_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``[bold]`` folder lost that part of its name, and the message was wrapped at 80 columns."""
    folder = tmp_path / ("[bold]" + "x" * 80)
    folder.mkdir()
    code, _ = cli("preflight", "--manifests", str(folder))
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"igw preflight: error: {folder}: no manifests found (")
    assert err.count("\n") == 1


def test_a_source_problem_under_a_bracketed_folder_is_reported_in_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest under ``m[/x]`` with a syntax error: the table's source problem and title quote the
    path (a ``MarkupError`` traceback, exit 1, before)."""
    folder = tmp_path / "m[" / "x]"
    folder.mkdir(parents=True)
    (folder / "[a].yaml").write_text("kind: [unclosed\n")
    code, out = cli("preflight", "--manifests", str(tmp_path / "m[" / "x]"))
    assert code == 3
    flat = "".join(out.split())  # the table wraps at the console's width
    assert "".join(f"{folder}/[a].yaml".split()) in flat
    assert "Traceback" not in capsys.readouterr().err
