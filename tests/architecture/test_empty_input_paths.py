"""An empty file or folder name to read is a usage error naming the option, not ``Path('.')``.

``''`` (a shell variable left unset) was the current folder: ``igw validate ""`` and ``igw serve
--config ""`` said ``Is a directory: '.'``, ``igw sim fleet --spec ""`` the same, ``--config-maps=``
read the current folder as ConfigMaps, and ``igw bench --trace=`` (an empty value being false) was taken
for no ``--trace`` and refused as an option that "does not apply to a DES run" (before session s42).
"""

from __future__ import annotations

import pytest

from igw.cli.main import main

A_FILE = __file__
"""A file that exists, for the options before the one under test that refuse a missing one."""


@pytest.mark.parametrize(
    ("argv", "argument"),
    [
        (["validate", ""], "FILE"),
        (["validate", "a.yaml", ""], "FILE"),
        (["serve", "--config", "", "--endpoints", "e.yaml"], "--config"),
        (["serve", "--config", "c.yaml", "--endpoints", ""], "--endpoints"),
        (["serve", "--config", "c.yaml", "--endpoints", A_FILE, "--config-maps="], "--config-maps"),
        (["serve", "--config", "c.yaml", "--in-cluster", "--kubeconfig", ""], "--kubeconfig"),
        (["bench", "--trace="], "--trace"),
        (["bench", "--summarize", ""], "--summarize"),
        (["sim", "fleet", "--spec", ""], "--spec"),
        (["sim", "run", "--spec", A_FILE, "--trace", ""], "--trace"),
        (["bench", "--trace", A_FILE, "--fleet="], "--fleet"),
        (["global", "serve", "--config="], "--config"),
        (["operator", "--kubeconfig", ""], "--kubeconfig"),
        (["preflight", "--kubeconfig", ""], "--kubeconfig"),
    ],
)
def test_an_empty_name_to_read_is_refused_naming_the_option(
    argv: list[str], argument: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argument}: '' names no file or folder" in err, err
    assert "Is a directory" not in err
