"""``cdk.context.json`` is committed in the format the ``cdk`` CLI writes it, so a synth leaves the
checkout clean.

The CLI saves the file after every synthesis that had a context lookup to make, even one that failed:
``cdk synth -c deploymentConfig=other-account.yaml`` without credentials (aws-cdk 2.1149.0, session s41)
ended in "Need to perform AWS calls for account 222222222222" and rewrote the committed file, values
unchanged, from one line per key to ``JSON.stringify(context, undefined, 2)`` plus a newline: a diff in
a file the user never edited. Committing it in that format makes such a rewrite a no-op.
"""

from __future__ import annotations

import json
from pathlib import Path

CONTEXT_FILE = Path(__file__).resolve().parents[2] / "cdk.context.json"


def test_the_context_file_is_in_the_cdk_clis_own_format() -> None:
    text = CONTEXT_FILE.read_text(encoding="utf-8")
    # Node's JSON.stringify(value, undefined, 2) and Python's json.dumps(value, indent=2) agree on ASCII.
    assert text == json.dumps(json.loads(text), indent=2) + "\n"
