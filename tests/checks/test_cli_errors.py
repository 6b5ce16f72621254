"""``igw preflight`` / ``igw audit`` errors through the real CLI: what they quote from the command line
or the input (paths, option values) is printed as text, never taken for rich markup, and an error
stays on one line when stderr is not a terminal."""

from __future__ import annotations

import json
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


def test_manifest_symlinks_that_lead_to_no_file_are_source_problems(tmp_path: Path) -> None:
    """A ``.yaml`` symlink looping (to itself, or through another) or to a missing target was skipped
    without a word (``Path.is_file`` is False for it): the scan looked complete and exited 0 (before
    session s50). Each is a source problem naming the path; the clean rest still exits 3."""
    (tmp_path / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n")
    (tmp_path / "self.yaml").symlink_to("self.yaml")
    (tmp_path / "a.yml").symlink_to("b.yml")
    (tmp_path / "b.yml").symlink_to("a.yml")
    (tmp_path / "gone.json").symlink_to("nowhere.json")
    (tmp_path / "notes").symlink_to("notes")  # not a manifest's name: not read, as a plain file
    code, out = cli("audit", "--manifests", str(tmp_path), "-o", "json", "--check", "IGW-AU101")
    report = json.loads(out)
    assert (code, report["exitCode"]) == (3, 3)
    assert report["sourceErrors"] == [
        f"{tmp_path / 'a.yml'}: a symlink loop (it never reaches a file)",
        f"{tmp_path / 'b.yml'}: a symlink loop (it never reaches a file)",
        f"{tmp_path / 'gone.json'}: a broken symlink (its target 'nowhere.json' does not exist)",
        f"{tmp_path / 'self.yaml'}: a symlink loop (it never reaches a file)",
    ]


def test_manifests_given_as_a_looping_symlink_are_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--manifests`` naming a looping symlink said ``no such file or folder`` of a name that is
    there (before session s50)."""
    (tmp_path / "deploy").symlink_to("deploy")
    with pytest.raises(SystemExit) as exited:
        cli("preflight", "--manifests", str(tmp_path / "deploy"))
    assert exited.value.code == 2
    assert (
        f"argument --manifests: {tmp_path / 'deploy'}: a symlink that leads nowhere (a loop, or a "
        "target that does not exist)" in capsys.readouterr().err
    )
