"""What an option does when it is not given is stated in its ``--help`` (a newcomer reads the help,
not the code): options found without it in session s50's walk through every subcommand's help."""

from __future__ import annotations

import pytest

from igw.cli.main import main


@pytest.mark.parametrize(
    ("command", "option", "default"),
    [
        (["bench"], "--policies POLICIES", "(see --list; default: every one but oracle-slo)"),
        (["sim", "fleet"], "--duration DURATION", "(default: run until SIGINT/SIGTERM)"),
        (["operator"], "--health-port PORT", "(probes; default: none)"),
    ],
)
def test_an_option_s_help_states_its_default(
    command: list[str], option: str, default: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps at the terminal width
    options = text.split(" options: ", 1)[1]
    entry = options.split(f" {option} ", 1)[1]
    assert default in entry[:200], entry[:200]  # in its own entry, not a later option's
