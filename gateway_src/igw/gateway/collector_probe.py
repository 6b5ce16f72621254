"""One TCP connect to the OTLP collector when the gateway starts, so a collector that is down shows in
the log before any span is exported.

Spans are exported only once requests arrive, in batches, from a background thread: a gateway started
with ``--otel-endpoint`` naming a collector that is down, not yet deployed or mistyped said nothing
about it until the first batch failed, which with no traffic is never (before session s44). At start
:func:`probe_collector` opens, then closes, a TCP connection to the endpoint's host and port (to the
proxy's where the exporter would go through one, as ``HTTPS_PROXY``/``NO_PROXY`` say), in the
background: start-up and the event loop never wait on it. A failure is one WARNING with the endpoint
(credentials masked) and the reason; success one INFO line. Nothing is retried: the export's own
counts (``igw_trace_export_spans_total``) and throttled log lines cover a collector that goes away
later. A connect shows that something listens there, not that it is an OTLP receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from igw.redaction import redact_url

log = logging.getLogger(__name__)


class ProbeTarget(NamedTuple):
    """Where the exporter's first connection goes: the collector, or the proxy it is reached through."""

    host: str
    port: int
    proxy: str | None
    """The proxy's URL, credentials masked (``None``: a direct connection)."""


def probe_target(endpoint: str, env: Mapping[str, str] = os.environ) -> ProbeTarget:
    """The host and port the exporter connects to for ``endpoint`` (an http(s) URL that
    :func:`igw.gateway.tracing_options.tracing_options` accepted): the URL's own, its scheme's default
    port when it names none, or those of the ``http_proxy``/``https_proxy`` variable for its scheme
    unless ``no_proxy`` lists its host (the exporter's HTTP client reads the same variables; probing
    the collector directly behind a proxy would warn on every start of a working set-up)."""
    parts = urlsplit(endpoint)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    proxy_url = env.get(f"{scheme}_proxy") or env.get(f"{scheme.upper()}_PROXY")
    if proxy_url:
        no_proxy = env.get("no_proxy") or env.get("NO_PROXY") or ""
        if not _bypasses_proxy(host, no_proxy):
            proxy_url = proxy_url if "://" in proxy_url else f"http://{proxy_url}"
            proxy = urlsplit(proxy_url)
            try:
                proxy_port = proxy.port or (443 if proxy.scheme == "https" else 80)
            except ValueError:  # not a port: the exporter fails on it; probe the collector itself
                proxy_port = None
            if proxy.hostname and proxy_port is not None:
                return ProbeTarget(proxy.hostname, proxy_port, redact_url(proxy_url))
    return ProbeTarget(host, port, None)


def _bypasses_proxy(host: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` (comma-separated: ``*``, host names matched with their subdomains, IP
    addresses or CIDR blocks) exempts ``host``, as the exporter's HTTP client reads it."""
    host = host.lower()
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        if address is not None and entry:
            with contextlib.suppress(ValueError):
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
        bare = entry.lstrip(".")
        if bare and (host == bare or host.endswith("." + bare)):
            return True
    return False


def _reason(exc: OSError) -> str:
    """The error in words: the errno's text (asyncio words a refusal as "Connect call failed
    ('10.0.0.1', 4318)"), a resolver error's own text, else the exception's."""
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        return exc.strerror or str(exc) or type(exc).__name__
    return os.strerror(exc.errno)


async def probe_collector(endpoint: str, *, timeout_s: float, env: Mapping[str, str] = os.environ) -> bool:
    """Connect to ``endpoint``'s collector (:func:`probe_target`) within ``timeout_s``, close the
    connection, and log the outcome: one WARNING naming the endpoint (masked) and the reason when it
    fails, one INFO line when it succeeds. Returns whether it connected. Name resolution runs in the
    loop's executor, so the loop is not held up by a slow resolver."""
    target = probe_target(endpoint, env)
    via = "" if target.proxy is None else f" through the proxy {target.proxy}"
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(target.host, target.port), timeout_s)
    except TimeoutError:
        reason = f"no connection within {timeout_s:g}s"
    except OSError as exc:  # refused, unreachable, a name that does not resolve
        reason = _reason(exc)
    else:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        log.info("tracing: OTLP collector %s reachable%s", redact_url(endpoint), via)
        return True
    log.warning(
        "tracing: OTLP collector %s not reachable at start-up%s: %s; spans are still exported, and "
        'counted as failed in igw_trace_export_spans_total{result="failed"} while it stays so',
        redact_url(endpoint),
        via,
        reason,
    )
    return False
