"""``igw generate``: write every generated file from ``schemas/``; ``--check`` only compares.

The list of files is the registry :mod:`igw.config.generated_files`. ``--check`` exits 1 and names
each stale or missing file (CI runs it through a test), 0 when all are fresh.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "Generate the CRD and other files derived from schemas/ (--check: fail if any is out of date)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file is stale")
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="repository root (default: the checkout this igw runs from, else the current directory)",
    )


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: loaded only when this command runs (igw builds every parser)
    from igw.config.generated_files import GENERATED_FILES, file_status, write_file
    from igw.config.paths import REPO_ROOT, checkout_schemas_dir

    root: Path = args.root or (REPO_ROOT if checkout_schemas_dir() else Path.cwd())
    if not (root / "schemas").is_dir():
        print(f"igw generate: {root} has no schemas/ folder; pass --root", file=sys.stderr)
        return 2
    stale = 0
    for entry in GENERATED_FILES:
        try:
            status = file_status(root, entry)
        except Exception as exc:  # a broken generator must name itself, not abort the others
            print(f"error: {entry[0]}: {exc}", file=sys.stderr)
            stale += 1
            continue
        if status.state == "fresh":
            print(f"up to date: {status.path}")
        elif args.check:
            stale += 1
            print(f"{status.state}: {status.path} (run `igw generate`)")
        else:
            write_file(root, status)
            print(f"wrote: {status.path}")
    return 1 if stale else 0
