"""The Makefile a newcomer meets: ``make help`` (and a bare ``make``) lists every target, every target
the README names is one, and every name declared ``.PHONY`` has a rule.

Before session s42 ``.PHONY`` declared a ``bench`` target with no rule, so ``make bench`` printed
"Nothing to be done for 'bench'" and exited 0 having run nothing, and there was no ``make help``
(a bare ``make`` created the virtualenv and installed every extra).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from igw.config.paths import REPO_ROOT

_MAKEFILE = REPO_ROOT / "Makefile"
_RULE = re.compile(r"^([A-Za-z][\w-]*):", re.M)


def _phony() -> set[str]:
    line = next(ln for ln in _MAKEFILE.read_text().splitlines() if ln.startswith(".PHONY:"))
    return set(line.removeprefix(".PHONY:").split())


def _rules() -> set[str]:
    return set(_RULE.findall(_MAKEFILE.read_text()))


def test_every_phony_target_has_a_rule() -> None:
    assert _phony() - _rules() == set()


def test_every_make_target_the_readme_names_exists() -> None:
    named = set(re.findall(r"`make ([\w-]+)`", (REPO_ROOT / "README.md").read_text()))
    assert named, "README.md names no make target"
    assert named - _rules() == set()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_help_lists_every_target_and_is_the_default() -> None:
    listed = []
    for argv in (["make", "-s", "help"], ["make", "-s"]):
        done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        listed.append(set(re.findall(r"^make ([\w-]+)", done.stdout, re.M)))
    assert listed[0] == listed[1] == _rules() - {"help"}
