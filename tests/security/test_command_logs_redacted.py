"""Every long-running command logs through the redacting formatter, whatever library writes the line.

``igw operator`` and ``igw global serve`` set their logging up with ``logging.basicConfig`` alone, so
only ``igw serve`` masked credentials: kopf logged the API server's URL with its user-info
(``GET http://admin:<password>@host/api``) at every failed request. All three now use
:func:`igw.gateway.redaction.configure_logging`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.security.helpers import kubeconfig_with_password

PASSWORD = "S3cretPassw0rd9XYZqq"
_PROBE = """
import logging, sys
from igw.cli.main import main
code = main(sys.argv[1:])
print(code, ",".join(type(h.formatter).__name__ for h in logging.getLogger().handlers))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--config", "/nonexistent/igwc.yaml", "--endpoints", __file__],
        ["operator", "--tls-issuer", "not-an-issuer"],
        ["global", "serve", "--config", __file__],
    ],
    ids=["serve", "operator", "global-serve"],
)
def test_each_command_logs_through_the_redacting_formatter(argv: list[str]) -> None:
    """Each command returns early here (a missing or invalid configuration, a bad option), after its
    logging is set up (a missing ``--endpoints`` or global ``--config`` is refused while parsing,
    before that: hence this file, which exists and is no configuration)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    code, _, formatters = result.stdout.strip().splitlines()[-1].partition(" ")
    assert code != "0", result.stderr
    assert formatters == "RedactingFormatter", result.stdout + result.stderr


def test_the_operator_never_logs_the_api_servers_credentials(tmp_path: Path) -> None:
    kubeconfig = kubeconfig_with_password(tmp_path / "kubeconfig", PASSWORD)
    log = tmp_path / "stderr"
    with log.open("w") as err:
        operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "igw.cli.main",
                "operator",
                "--kubeconfig",
                str(kubeconfig),
                "--no-leader-election",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            deadline = time.monotonic() + 60
            while "Request attempt" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)  # kopf retries the unreachable API server once a second, logging each
        finally:
            operator.send_signal(signal.SIGTERM)
            operator.wait(timeout=60)
    text = log.read_text()
    assert "Request attempt" in text, text  # the line that carried the URL was written
    assert "[REDACTED]@127.0.0.1:1" in text
    assert PASSWORD not in text
