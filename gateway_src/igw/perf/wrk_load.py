"""wrk as a closed-loop load generator (``igw perf workers --load wrk``).

On a machine whose few cores are shared by the gateway's workers, the load generator and the
backend, every microsecond the load generator spends per request is taken from the workers, so the
throughput ratio of N workers against one also measures the load generator. wrk (C, epoll, one
thread here) costs several times less CPU per request than the Python generators; it is the tool
HTTP servers are usually benchmarked with, and it is not a Python package: install it from the
distribution (``apt-get install wrk``) - the command says so when it is missing.

The Lua script sends the same ``POST /v1/completions`` as the raw generator (the prompt numbered per
request, so no two bodies are equal) and prints wrk's summary in one parseable line; wrk runs for a
fixed time, so a phase is a duration here, not a request count.
"""

from __future__ import annotations

import asyncio
import re
import resource
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from igw.errors import IgwToolingError

SUMMARY = re.compile(
    r"^IGW-WRK requests=(\d+) duration_us=(\d+) "
    r"connect=(\d+) read=(\d+) write=(\d+) status=(\d+) timeout=(\d+)$",
    re.M,
)
INSTALL_HINT: Final = "wrk is not installed: apt-get install wrk (or use --load raw)"


def script(prompt: str) -> str:
    """The Lua script: one numbered completion request per call, the summary line when done."""
    body_prefix = '{"model":"fake-model","max_tokens":4,"prompt":"' + prompt + "question "
    if any(c in body_prefix for c in "\\\n\r'"):
        raise ValueError("the prompt must not need escaping inside a Lua string")
    return f"""local n = 0
local prefix = '{body_prefix}'
local headers = {{["Content-Type"] = "application/json"}}
request = function()
  n = n + 1
  return wrk.format("POST", "/v1/completions", headers, prefix .. n .. '"}}')
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "IGW-WRK requests=%d duration_us=%d connect=%d read=%d write=%d status=%d timeout=%d\\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout))
end
"""


class WrkError(IgwToolingError):
    """wrk is missing, failed, or saw errors (connect, read, write, non-2xx/3xx status, timeout)."""


@dataclass(frozen=True, slots=True)
class WrkResult:
    requests: int
    wall_s: float
    cpu_s: float
    """CPU seconds wrk used (user + system, from the rusage of reaped children)."""


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise WrkError(INSTALL_HINT)
    return found


def parse_summary(output: str) -> tuple[int, float]:
    """``(requests, seconds)`` of the script's summary line; :class:`WrkError` on any error count."""
    match = SUMMARY.search(output)
    if match is None:
        raise WrkError(f"wrk printed no summary line: {output.strip()[-300:]!r}")
    requests, duration_us, *errors = map(int, match.groups())
    if any(errors):
        names = ("connect", "read", "write", "status", "timeout")
        counts = ", ".join(f"{name} {count}" for name, count in zip(names, errors, strict=True) if count)
        raise WrkError(f"wrk saw errors ({counts}) in {requests} requests")
    if requests == 0 or duration_us <= 0:
        raise WrkError("wrk completed no request")
    return requests, duration_us / 1e6


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def run_wrk(
    base: str,
    *,
    concurrency: int,
    seconds: int,
    script_path: Path,
    preexec: Callable[[], None] | None = None,
) -> WrkResult:
    """One closed-loop phase: ``concurrency`` keep-alive connections to ``base`` for ``seconds``;
    ``preexec`` runs in the child before wrk starts (its scheduling policy, which wrk's threads
    inherit: :mod:`igw.perf.load_policy`).

    The CPU figure is the growth of this process's reaped-children rusage while wrk ran, so no other
    child may be reaped meanwhile (the benchmark's gateway and backend live until the end)."""
    before = _children_cpu_s()
    proc = await asyncio.create_subprocess_exec(
        wrk_binary(),
        "-t1",
        f"-c{concurrency}",
        f"-d{seconds}s",
        "-s",
        str(script_path),
        f"http://{base}/v1/completions",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=preexec,
    )
    output, _ = await proc.communicate()
    cpu_s = _children_cpu_s() - before
    text = output.decode(errors="replace")
    if proc.returncode != 0:
        raise WrkError(f"wrk exited {proc.returncode}: {text.strip()[-300:]!r}")
    requests, wall_s = parse_summary(text)
    return WrkResult(requests=requests, wall_s=wall_s, cpu_s=cpu_s)
