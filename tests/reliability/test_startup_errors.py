"""Start-up mistakes an operator makes get one line naming what is wrong and exit 2, never a traceback.

A newcomer pasting the simulator's URLs into the endpoints file, a port already taken, a missing
kubeconfig: each used to end ``igw serve`` or ``igw operator`` in a Python traceback (exit 1).
The processes run for real (``python -m igw.cli.main``), as an operator starts them. A port already
taken is no usage error: ``igw serve`` (single process or worker group), ``igw global serve`` and
``igw operator`` (its health port) say so in one line too, and exit 1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from igw.config.paths import REPO_ROOT
from tests.fakes.kube_api import unreachable_url, write_kubeconfig
from tests.gateway.support import config_doc, scheduler
from tests.reliability.harness import gateway_doc, write_config

EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 1


def igw(*argv: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "igw.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=None if env is None else dict(env),
    )


def assert_one_line_error(
    done: subprocess.CompletedProcess[str], *needles: str, code: int = EXIT_CONFIG
) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == code, output
    assert "Traceback" not in output, output
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("endpoints", "needle"),
    [
        (None, "error: argument --endpoints: "),  # refused while parsing, naming the option (s44)
        ("schedulers: [\n", "endpoints.yaml"),
        ("", "expected a mapping with the key 'schedulers'"),
        (
            "schedulers:\n  llama: ['http://127.0.0.1:8001']\n",
            "expected 'host:port' (an address, not a URL: no scheme or path), got 'http://127.0.0.1:8001'",
        ),
        ("schedulers:\n  nobody: ['127.0.0.1:8001']\n", "no scheduler or modelName 'nobody'"),
    ],
    ids=["missing", "bad-yaml", "empty", "urls-not-addresses", "unknown-scheduler"],
)
def test_a_bad_endpoints_file_is_named_in_one_line(
    tmp_path: Path, endpoints: str | None, needle: str
) -> None:
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    if endpoints is None:
        eps.unlink()
    else:
        eps.write_text(endpoints)
    done = igw(
        "serve", "--config", str(config), "--endpoints", str(eps), "--host", "127.0.0.1", "--port", "0"
    )
    assert_one_line_error(done, "igw serve: ", str(eps), needle)
    if endpoints is None:
        assert f"{eps}: no such file or folder" in done.stderr


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["single", "worker-group"])
def test_a_port_already_in_use_is_said_in_one_line_and_exits_1(
    tmp_path: Path, taken_port: int, workers: list[str]
) -> None:
    """The machine's state, not a usage error: it exited 2, which tells a supervisor or script that
    the command line is wrong (and not worth a retry once the port is free)."""
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    done = igw(
        "serve",
        "--config",
        str(config),
        "--endpoints",
        str(eps),
        "--host",
        "127.0.0.1",
        "--port",
        str(taken_port),
        *workers,
    )
    line = f"igw serve: cannot listen on 127.0.0.1:{taken_port}: Address already in use"
    assert_one_line_error(done, line, code=EXIT_UNAVAILABLE)
    said = [e for e in done.stderr.splitlines() if e.startswith("igw serve:")]
    assert len(said) == 1, done.stderr
    assert said[0].startswith(line), done.stderr


@pytest.mark.parametrize("host", ["", " "])
def test_an_empty_host_is_refused_not_served_on_every_interface(tmp_path: Path, host: str) -> None:
    """``--host ''`` (an unset variable in a script) listened on every interface, silently."""
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    done = igw("serve", "--config", str(config), "--endpoints", str(eps), "--host", host, "--port", "0")
    assert_one_line_error(done, "argument --host: an empty address would listen on every interface")
    assert "serving" not in done.stderr


def test_a_port_out_of_range_is_refused_not_wrapped(tmp_path: Path) -> None:
    """The kernel keeps a port modulo 65536: ``--port 70000`` used to serve on 4464."""
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    done = igw("serve", "--config", str(config), "--endpoints", str(eps), "--port", "70000")
    assert_one_line_error(done, "argument --port: expected a whole number from 0 to 65535, got '70000'")


def test_serve_in_cluster_with_a_missing_kubeconfig_says_so(tmp_path: Path) -> None:
    config, _ = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    kubeconfig = tmp_path / "no-such-kubeconfig"
    done = igw(
        "serve", "--config", str(config), "--in-cluster", "--kubeconfig", str(kubeconfig), "--port", "0"
    )
    # refused while parsing, naming the option (before session s44: after the start-up lines, without it)
    assert_one_line_error(done, f"argument --kubeconfig: {kubeconfig}: no such file or folder")


def test_operator_with_a_missing_kubeconfig_says_so(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "no-such-kubeconfig"
    done = igw("operator", "--kubeconfig", str(kubeconfig))
    assert_one_line_error(done, f"argument --kubeconfig: {kubeconfig}: no such file or folder")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\xff\xfe\x00binary", "not UTF-8 text"),
        (b"users:\n- name: u\n  user: {token: s3cr3t-token\n", "not valid YAML (line 4, column 1)"),
        (b"- a\n- b\n", "not a kubeconfig"),
        (b"just a sentence\n", "not a kubeconfig"),
        (b"current-context: x\ncontexts: 5\n", "not a kubeconfig"),
    ],
    ids=["binary", "bad-yaml", "list", "string", "wrong-shape"],
)
def test_a_kubeconfig_that_is_not_one_says_so_without_quoting_it(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    """The client library reads the file unchecked: each of these ended ``igw operator`` (and ``igw
    serve --in-cluster``) in a UnicodeDecodeError, ParserError or TypeError traceback."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_bytes(content)
    done = igw("operator", "--no-leader-election", "--kubeconfig", str(kubeconfig))
    assert_one_line_error(done, f"igw operator: cannot load kubeconfig {kubeconfig}: {needle}")
    assert "s3cr3t" not in done.stderr


def test_no_kubeconfig_outside_a_pod_says_where_it_looked(tmp_path: Path) -> None:
    """No --kubeconfig, no pod, no $KUBECONFIG, no ~/.kube/config: said so, not the client library's
    "Invalid kube-config file. No configuration found." (which sends people to a file that is not there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    expected = (
        f"cannot load cluster credentials: not running in a pod and no kubeconfig at {tmp_path}/.kube/config"
    )
    assert_one_line_error(igw("operator", env=env), f"igw operator: {expected}", "pass --kubeconfig FILE")
    config, _ = write_config(tmp_path, gateway_doc(), [])
    served = igw("serve", "--config", str(config), "--in-cluster", "--port", "0", env=env)
    assert_one_line_error(served, f"igw serve: {expected}")


def test_operator_health_port_in_use_is_said_in_one_line(tmp_path: Path, taken_port: int) -> None:
    (tmp_path / "unused").write_text("")  # --kubeconfig must name a file; the port is refused first
    done = igw("operator", "--kubeconfig", str(tmp_path / "unused"), "--health-port", str(taken_port))
    assert_one_line_error(done, f"igw operator: cannot listen on 0.0.0.0:{taken_port}", code=EXIT_UNAVAILABLE)


def test_global_router_port_in_use_is_said_in_one_line(taken_port: int) -> None:
    example = REPO_ROOT / "crds" / "examples" / "global" / "global-router.yaml"
    done = igw("global", "serve", "--config", str(example), "--host", "127.0.0.1", "--port", str(taken_port))
    assert_one_line_error(
        done, f"igw global serve: cannot listen on 127.0.0.1:{taken_port}", code=EXIT_UNAVAILABLE
    )


@pytest.mark.parametrize(
    "refusal",
    ["no-cluster-credentials", "unknown-scheduler-in-endpoints", "missing-tls-files", "no-debug-token"],
)
def test_a_worker_group_refuses_to_start_as_one_process_does(tmp_path: Path, refusal: str) -> None:
    """``igw serve --workers 2`` given what a worker refuses at start: one line and exit 2, as a single
    process. Before session s40 every worker printed the refusal and the parent exited 3 (``worker 0
    ... exited with status 2``); a refusal only worker 0 makes (the endpoints file, which only it
    reads) came after worker 1 had logged ``serving``, and after worker 1's 5 s drain."""
    doc = gateway_doc()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env.pop("IGW_DEBUG_TOKEN", None)
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    if refusal == "missing-tls-files":
        doc["spec"]["extensions"]["tlsTermination"] = {
            "certFile": str(tmp_path / "tls.crt"),
            "keyFile": str(tmp_path / "tls.key"),
        }
    config, eps = write_config(tmp_path, doc, ["127.0.0.1:9"])
    where = ["--endpoints", str(eps)]
    extra: list[str] = []
    needle = {
        "no-cluster-credentials": "igw serve: cannot load cluster credentials: not running in a pod",
        "unknown-scheduler-in-endpoints": "no scheduler or modelName 'nobody' in the configuration",
        "missing-tls-files": "igw serve: spec.extensions.tlsTermination: ",
        "no-debug-token": "igw serve: --debug-decisions: IGW_DEBUG_TOKEN must hold at least 16 characters",
    }[refusal]
    if refusal == "no-cluster-credentials":
        where = ["--in-cluster"]
    elif refusal == "unknown-scheduler-in-endpoints":
        eps.write_text("schedulers:\n  nobody: ['127.0.0.1:8001']\n")
    elif refusal == "no-debug-token":
        extra = ["--debug-decisions", "5"]
    done = igw(
        "serve", "--config", str(config), *where, "--host", "127.0.0.1", "--port", "0", "--workers", "2",
        *extra, env=env,
    )  # fmt: skip
    assert_one_line_error(done, needle)
    said = [line for line in done.stderr.splitlines() if line.startswith("igw serve:")]
    assert len(said) == 1, done.stderr
    # The refusal is the last line: until session s50 worker 0's start-up INFO lines, still queued in
    # its log writer, came out after it (written at exit), so the error scrolled away above them.
    assert done.stderr.splitlines()[-1] == said[0], done.stderr
    assert "[worker 1]" not in done.stderr  # no other worker started, so none served or drained
    assert "worker 0 (pid" not in done.stderr  # the refusal is its one line: no exit line after it


@pytest.mark.parametrize("how", ["configMapRef", "--config-map", "configMapRef, --workers 2"])
def test_an_api_server_that_does_not_answer_is_said_in_one_line(tmp_path: Path, how: str) -> None:
    """A ConfigMap read at start (a scheduler's ``configMapRef``, ``--config-map``) from an API server
    nothing answers: one line naming the ConfigMap and the reason, exit 2 as for any other refusal of
    that ConfigMap. Until session s42 urllib3's ``MaxRetryError`` ended ``igw serve`` in a traceback
    (exit 1), from worker 0 of a group too."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server=unreachable_url(), namespace="inference")
    doc = config_doc([scheduler("llama", "m", configMapRef={"name": "epp", "key": "plugins.yaml"})])
    doc["metadata"]["namespace"] = "inference"
    config, _ = write_config(tmp_path, doc, ["127.0.0.1:9"])
    argv = ["serve", "--config", str(config), "--in-cluster", "--kubeconfig", str(kubeconfig), "--port", "0"]
    if how == "--config-map":
        argv += ["--config-map", "inference/igwc"]
        needle = "igw serve: ConfigMap inference/igwc: cannot reach the API server: "
    else:
        needle = "igw serve: configMapRef inference/epp: cannot reach the API server: "
    if how.endswith("--workers 2"):
        argv += ["--workers", "2", "--host", "127.0.0.1"]
    assert_one_line_error(igw(*argv), needle, "Connection refused")
