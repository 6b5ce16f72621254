"""``igw top`` as a command: usage errors, the bearer token from the environment, ``--screenshot``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
from aiohttp import web

from tests.loopback import serving

TOKEN = "top-secret-token-0123456789"
PAGE = """\
# TYPE igw_endpoint_queue_depth gauge
igw_endpoint_queue_depth{scheduler="qwen",endpoint="10.0.0.7:8000"} 17
# TYPE igw_endpoint_kv_cache_usage gauge
igw_endpoint_kv_cache_usage{scheduler="qwen",endpoint="10.0.0.7:8000"} 0.625
"""
READY = {"schedulers": {"qwen": {"model": "Qwen/Qwen3-32B", "endpoints": {"10.0.0.7:8000": {"fresh": True}}}}}


@contextlib.asynccontextmanager
async def guarded_pages() -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback server answering ``/metrics`` and ``/readyz`` only with ``TOKEN``; yields its URL and
    the Authorization headers it saw."""
    seen: list[str] = []

    async def page(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.Response(status=401)
        if request.path == "/metrics":
            return web.Response(text=PAGE)
        return web.Response(body=orjson.dumps(READY), content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", page)
    app.router.add_get("/readyz", page)
    async with serving(app) as url:
        yield url, seen


async def igw_top(*args: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "top", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={k: v for k, v in {**os.environ, **env}.items() if k != "TERM"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_screenshot_with_the_token_from_the_environment(tmp_path: Path) -> None:
    target = tmp_path / "top.svg"
    async with guarded_pages() as (url, seen):
        rc, out = await igw_top(
            url, "--interval", "0.2", "--token-env", "TOP_TOKEN", "--screenshot", str(target),
            "--screenshot-after", "2", env={"TOP_TOKEN": TOKEN},
        )  # fmt: skip
    assert rc == 0, out
    assert seen
    assert set(seen) == {f"Bearer {TOKEN}"}
    text = target.read_text().replace("&#160;", " ")
    for cell in ("qwen", "Qwen/Qwen3-32B", "10.0.0.7:8000", "62.5%", "17"):
        assert cell in text, cell
    assert TOKEN not in out


async def test_a_refused_token_fails_without_printing_it(tmp_path: Path) -> None:
    async with guarded_pages() as (url, _):
        rc, out = await igw_top(
            url, "--interval", "0.1", "--token-env", "TOP_TOKEN", "--screenshot", str(tmp_path / "x.svg"),
            env={"TOP_TOKEN": "wrong-token-but-also-secret"},
        )  # fmt: skip
    assert rc == 1
    assert f"{url}/metrics: HTTP 401" in out
    assert "wrong-token-but-also-secret" not in out
    assert not (tmp_path / "x.svg").exists()


async def test_a_gateway_that_does_not_answer_ends_the_screenshot_at_once(tmp_path: Path) -> None:
    """A port nothing listens on (a wrong port, a port-forward not running): ``--screenshot`` kept
    trying for 30 refresh intervals, 31 s at the default interval, before exit 1 (before session
    s39). Now it gives up at the first unanswered attempt, and says how to wait for a gateway that
    is still starting; ``--screenshot-wait`` gives it that time."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    for wait, took_at_least in (None, 0.0), ("2", 2.0):
        started = time.monotonic()
        extra = () if wait is None else ("--screenshot-wait", wait)
        rc, out = await igw_top(url, "--screenshot", str(tmp_path / "x.svg"), *extra, env={})
        took = time.monotonic() - started
        assert rc == 1, out
        assert took_at_least <= took < took_at_least + 15, f"took {took:.1f} s"
        assert f"igw top: no answer from {url}: {url}/metrics: ClientConnectorError" in out, out
        assert ("pass --screenshot-wait S" in out) is (wait is None), out
    assert not (tmp_path / "x.svg").exists()


async def test_decisions_from_a_gateway_without_a_decision_log_still_save_the_view(tmp_path: Path) -> None:
    """README's ``igw top URL --token-env IGW_DEBUG_TOKEN --decisions 8`` against a gateway started
    as README starts it (no ``--debug-decisions``): ``/debug/decisions`` answers 404, and that failed
    every refresh, so the screen showed no pool or pod at all and ``--screenshot`` gave up after 30
    intervals (34 s at the default) with a bare ``HTTP 404`` (before session s40). The pools and pods
    are drawn; the missing decisions are named, with what turns the log on."""
    target = tmp_path / "top.svg"
    async with guarded_pages() as (url, _):
        started = time.monotonic()
        rc, out = await igw_top(
            url, "--interval", "0.2", "--token-env", "TOP_TOKEN", "--decisions", "8",
            "--screenshot", str(target), "--screenshot-after", "2", env={"TOP_TOKEN": TOKEN},
        )  # fmt: skip
        took = time.monotonic() - started
    assert rc == 0, out
    assert took < 5.0 + 6.0 * 0.2, f"took {took:.1f} s"  # start-up, not 30 intervals
    text = target.read_text().replace("&#160;", " ")
    for cell in ("qwen", "10.0.0.7:8000", "62.5%"):
        assert cell in text, cell
    assert f"{url}/debug/decisions?limit=8: HTTP 404" in out, out
    assert "igw serve --debug-decisions N" in out, out
    assert TOKEN not in out


async def test_usage_errors_name_the_option() -> None:
    cases: list[tuple[tuple[str, ...], dict[str, str], str]] = [
        (("ftp://host",), {}, "URL must be http(s)://host:port"),
        (("ftp://admin:S3cretPassw0rd9XYZqq@host",), {}, "got 'ftp://[REDACTED]@host'"),  # never the password
        (("http://127.0.0.1:1", "--interval", "0.05"), {}, "argument --interval: expected a number from 0.1"),
        (("http://127.0.0.1:1", "--interval", "0"), {}, "argument --interval: expected a number from 0.1"),
        (("http://127.0.0.1:1", "--token-env", "NOT_SET_ANYWHERE"), {}, "NOT_SET_ANYWHERE is not set"),
        (("http://127.0.0.1:1", "--decisions", "5"), {}, "--decisions needs --token-env"),
        (
            ("http://127.0.0.1:1", "--decisions", "51"),
            {},
            "argument --decisions: expected a whole number from 0 to 50",
        ),
        (("http://127.0.0.1:1", "--screenshot-wait", "-1"), {}, "argument --screenshot-wait"),
        # a port out of range was only found fetching, 30 refreshes later ("no data", exit 1)
        (("http://127.0.0.1:99999", "--screenshot", "x.svg"), {}, "with a port from 1 to 65535"),
        (("http://127.0.0.1:0",), {}, "got 'http://127.0.0.1:0'"),
        # --token-env '' (an unset variable in a script) sent no token, silently
        (("http://127.0.0.1:1", "--token-env", ""), {}, "--token-env: '' names no environment variable"),
    ]
    for args, env, message in cases:
        rc, out = await igw_top(*args, env=env)
        assert rc == 2, (args, out)
        assert message in out, (args, out)


@contextlib.asynccontextmanager
async def scripted_metrics(answers: list[tuple[int, str]]) -> AsyncIterator[str]:
    """A loopback server whose ``/metrics`` gives ``answers`` (status, body) in turn, the last one
    for ever (``PAGE`` once none is left); ``/readyz`` is always ``READY``. Yields its URL."""

    async def metrics(_: web.Request) -> web.Response:
        status, body = (answers.pop(0) if len(answers) > 1 else answers[0]) if answers else (200, PAGE)
        return web.Response(status=status, text=body)

    async def ready(_: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(READY), content_type="application/json")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/readyz", ready)
    async with serving(app) as url:
        yield url


async def test_an_answer_retrying_will_not_change_ends_the_screenshot_at_once(tmp_path: Path) -> None:
    """``igw top URL --screenshot x.svg`` against a server answering 404 on ``/metrics`` (a wrong
    port, a management port not passed) or a page that is not Prometheus text: 30 refresh intervals
    of retries, 33 s at the default interval, before exit 1 (before session s42). Now exit 1 at the
    first such answer, with one line naming it."""
    for answer, named in (
        ((404, "404: Not Found"), "/metrics: HTTP 404 (a gateway run with --management-port"),
        ((403, "forbidden"), "/metrics: HTTP 403"),
        ((200, "<html><body>sign in</body></html>"), "not a Prometheus text page"),
    ):
        async with scripted_metrics([answer]) as url:
            started = time.monotonic()
            rc, out = await igw_top(url, "--screenshot", str(tmp_path / "x.svg"), env={})
            took = time.monotonic() - started
        assert rc == 1, out
        assert took < 10.0, f"took {took:.1f} s"  # start-up and one attempt, not 30 intervals
        assert named in out, out
        assert "(not retried)" in out, out
        assert len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "x.svg").exists()


async def test_a_gateway_answering_5xx_or_429_is_retried_until_it_answers(tmp_path: Path) -> None:
    """A 5xx (a gateway starting or overloaded) or a 429 is worth asking again: the screenshot is
    saved once the pages come."""
    target = tmp_path / "top.svg"
    answers = [(503, "starting"), (429, "later"), (500, "oops"), (200, PAGE)]
    async with scripted_metrics(answers) as url:
        rc, out = await igw_top(
            url, "--interval", "0.1", "--screenshot", str(target), "--screenshot-after", "2", env={}
        )
    assert rc == 0, out
    assert "qwen" in target.read_text()


async def test_ctrl_c_ends_a_screenshot_still_retrying_at_once(tmp_path: Path) -> None:
    """SIGINT was lost inside the headless app (session s50): ``igw top URL --screenshot x.svg`` against
    a gateway answering 503 went on retrying for its 30 intervals (60 s here) after Ctrl-C, and with
    ``--screenshot-wait`` against one not answering until that wait was over. Now it ends at once as
    every igw command does on Ctrl-C: ``igw: interrupted``, exit 130, nothing saved."""
    asked = asyncio.Event()

    async def metrics(_: web.Request) -> web.Response:
        asked.set()
        return web.Response(status=503, text="starting")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/readyz", metrics)
    target = tmp_path / "x.svg"
    async with serving(app) as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "igw.cli.main", "top", url, "--interval", "2", "--screenshot", str(target),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if k != "TERM"},
        )  # fmt: skip
        try:
            await asyncio.wait_for(asked.wait(), timeout=60)  # the app runs and retries
            await asyncio.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=20)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 130, out.decode()
    assert "igw: interrupted" in out.decode()
    assert not target.exists()


def test_the_live_view_without_a_terminal_is_a_usage_error() -> None:
    """``igw top URL`` in CI or with ``< /dev/null`` ran until killed, writing screen-drawing escapes
    to its log (the live view draws on stderr), and no key could quit it."""
    proc = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "top", "http://127.0.0.1:1"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        "igw top: the live view needs a terminal on stdin and stderr; --screenshot FILE saves the view "
        "without one\n"
    )


def test_the_live_view_on_a_terminal_draws_and_quits_on_q() -> None:
    """The terminal check lets a real terminal through: the view draws its footer and ``q`` quits it."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "igw.cli.main", "top", "http://127.0.0.1:1", "--interval", "5"],
        stdin=terminal, stdout=terminal, stderr=terminal, env={**os.environ, "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(terminal)
    try:
        seen = b""
        deadline = time.monotonic() + 60
        while b"Quit" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                seen += os.read(controller, 65536)
        assert b"Quit" in seen, seen[-500:]
        os.write(controller, b"q")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
