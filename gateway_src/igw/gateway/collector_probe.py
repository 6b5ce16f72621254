"""One TCP connect to the OTLP collector when the gateway starts, so a collector that is down shows in
the log before any span is exported.

Spans are exported only once requests arrive, in batches, from a background thread: a gateway started
with ``--otel-endpoint`` naming a collector that is down, not yet deployed or mistyped said nothing
about it until the first batch failed, which with no traffic is never (before session s44). At start
:func:`probe_collector` opens, then closes, a TCP connection to the endpoint's host and port (to the
proxy's where the exporter would go through one, as ``HTTPS_PROXY``/``ALL_PROXY``/``NO_PROXY`` say), in the
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
    port when it names none, or those of the proxy the exporter's HTTP client (``requests``, trusting
    the environment) picks - ``<scheme>_proxy``, else ``all_proxy``, unless ``no_proxy`` exempts the
    host - read as that client reads them (:func:`_environment_proxies`, :func:`_bypasses_proxy`).
    Probing the collector directly behind a proxy would warn on every start of a working set-up;
    until session s45 ``ALL_PROXY`` and ``NO_PROXY`` entries with a port were not read."""
    parts = urlsplit(endpoint)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    proxies = _environment_proxies(env)
    proxy_url = proxies.get(scheme) or proxies.get("all")
    if proxy_url and not _bypasses_proxy(host, port if parts.port else None, env, proxies):
        proxy_url = proxy_url if "://" in proxy_url else f"http://{proxy_url}"
        proxy = urlsplit(proxy_url)
        try:
            proxy_port = proxy.port or _PROXY_PORTS.get(proxy.scheme.lower(), 80)
        except ValueError:  # not a port: the exporter fails on it; probe the collector itself
            proxy_port = None
        if proxy.hostname and proxy_port is not None:
            return ProbeTarget(proxy.hostname, proxy_port, redact_url(proxy_url))
    return ProbeTarget(host, port, None)


_PROXY_PORTS = {"https": 443, "socks4": 1080, "socks4a": 1080, "socks5": 1080, "socks5h": 1080}
"""A proxy URL's port when it names none, by scheme (``http`` and anything else: 80)."""


def _environment_proxies(env: Mapping[str, str]) -> dict[str, str]:
    """``<scheme>_proxy`` variables by scheme (``all``, ``no`` included), as
    :func:`urllib.request.getproxies_environment` reads them for ``requests``: any case, the
    lower-case name winning, an empty lower-case one removing the scheme's; ``HTTP_PROXY`` ignored
    when ``REQUEST_METHOD`` is set (a CGI environment, CVE-2016-1000110)."""
    proxies: dict[str, str] = {}
    for name, value in env.items():
        lowered = name.lower()
        if value and lowered.endswith("_proxy"):
            proxies[lowered[:-6]] = value
    if "REQUEST_METHOD" in env:
        proxies.pop("http", None)
    for name, value in env.items():
        if name.endswith("_proxy"):
            if value:
                proxies[name.lower()[:-6]] = value
            else:
                proxies.pop(name.lower()[:-6], None)
    return proxies


def _bypasses_proxy(host: str, port: int | None, env: Mapping[str, str], proxies: Mapping[str, str]) -> bool:
    """Whether ``no_proxy`` exempts ``host`` (``port``: the URL's own, if it names one), by
    ``requests``' two checks: its own over ``no_proxy`` or else ``NO_PROXY`` (an IPv4 address
    matched by CIDR block or exactly; a name, with or without the port, by itself or its domains),
    then :func:`urllib.request.proxy_bypass_environment` over the ``no`` of
    :func:`_environment_proxies` (a ``*`` that is the whole list; names, suffixes at a dot)."""
    host = host.lower()
    no_proxy = env.get("no_proxy") or env.get("NO_PROXY") or ""
    entries = [e for e in no_proxy.replace(" ", "").split(",") if e]
    if _is_ipv4(host):
        for entry in entries:
            if "/" in entry:
                with contextlib.suppress(ValueError):
                    if ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                        return True
            elif host == entry:
                return True
    else:
        with_port = host if port is None else f"{host}:{port}"
        for entry in entries:
            bare = entry.lstrip(".")
            if bare in (host, with_port) or host.endswith("." + bare) or with_port.endswith("." + bare):
                return True
    listed = proxies.get("no")
    if listed is None:
        return False
    if listed == "*":
        return True
    for name in (n.strip().lstrip(".").lower() for n in listed.split(",")):
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
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
