"""The explicit list of ``igw`` sub-commands.

Each entry names a module under ``igw.cli`` that defines::

    HELP: str
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...

Modules keep their heavy imports inside ``run`` so that ``igw --help`` and ``igw validate`` stay fast
and so that a slim install (the gateway image, the CDK app) does not need every extra.
"""

from __future__ import annotations

from typing import Final

SUBCOMMANDS: Final[tuple[tuple[str, str], ...]] = (
    # (sub-command, module under igw.cli)
    ("validate", "validate"),
    ("generate", "generate"),
    ("serve", "serve"),
    ("global", "global_router"),
    ("sim", "sim"),
    ("bench", "bench"),
    ("demo", "demo"),
    ("preflight", "preflight"),
    ("audit", "audit"),
    ("addon", "addon"),
    ("operator", "operator"),
    ("perf", "perf"),
    ("top", "top"),
)
