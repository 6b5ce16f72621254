"""Static endpoints for local use: ``igw serve --endpoints FILE`` (YAML or JSON), re-read on change.

Format - scheduler names (or their ``modelName``) to endpoint lists; an entry is ``host:port`` or a
mapping with ``address`` and optional ``labels``; optionally ``services``, plain backends by name
(what a Kubernetes Service name would resolve to, e.g. ``spec.bbr.defaultBackend.name``)::

    schedulers:
      llama:
        - 127.0.0.1:8001
        - address: 127.0.0.1:8002
          labels: {gpu: a10g}
        - "[::1]:8003"          # an IPv6 address in brackets
    services:
      fallback-svc: [127.0.0.1:9000]

A file that fails to parse on a later change is reported and ignored (the previous endpoints stay),
the same rule as the configuration file's hot reload. A key naming a scheduler that a reload removed
is skipped with a warning instead (the file is often edited after the configuration, and the other
schedulers' changes would wait on it); a key that never named one is refused as at start (a typo
would otherwise empty the scheduler it misspells). A change is seen by the file's device, inode,
size, mtime and ctime: a replacement that keeps the size and the old mtime (``cp -p``, ``rsync -a``,
a rename over it) still gets a new inode or ctime, which no tool can set. A file that is missing or
cannot be stat'ed is reported once (again only when the reason changes), and applied again, with
an INFO line, as soon as it is back, even unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from igw.config.documents import DocumentReadError, read_documents
from igw.config.model import SchedulerSpec
from igw.errors import IgwGatewayError
from igw.gateway.discovery import DiscoverySink
from igw.gateway.endpoints import DiscoveredEndpoint

log = logging.getLogger("igw.gateway.discovery")


class EndpointsFileError(IgwGatewayError, ValueError):
    def __init__(self, path: Path, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(f"{path}: " + "; ".join(problems))


def _address(value: Any, where: str, problems: list[str]) -> str | None:
    """``host:port`` or ``[ipv6]:port`` (the form discovery gives an IPv6 pod); an unbracketed IPv6
    address is refused: ``fd00::1:8000`` reads as a host on the default port."""
    if not isinstance(value, str) or (value.count(":") != 1 and not value.startswith("[")):
        hint = ""
        if isinstance(value, str) and "://" in value:
            hint = " (an address, not a URL: no scheme or path)"
        elif isinstance(value, str) and value.count(":") > 1:
            hint = " (an IPv6 address as '[addr]:port')"
        problems.append(f"{where}: expected 'host:port'{hint}, got {value!r}")
        return None
    host, _, port = value.rpartition(":")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host.removeprefix("[").removesuffix("]"))
        except ValueError:
            host = ""
        host = host if host.endswith("]") else ""
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        problems.append(f"{where}: expected 'host:port' with a port 1-65535, got {value!r}")
        return None
    return value


def parse_endpoints(
    doc: Any, *, path: Path, names: Mapping[str, str], departed: Collection[str] = ()
) -> dict[str, list[DiscoveredEndpoint]]:
    """``names`` maps every accepted key (scheduler name or modelName) to the scheduler name;
    ``departed``: keys of schedulers a reload removed, skipped (:func:`departed_keys` names them)
    rather than refused as unknown."""
    problems: list[str] = []
    if (
        not isinstance(doc, Mapping)
        or "schedulers" not in doc
        or not set(doc) <= {"schedulers", "services"}
        or not isinstance(doc["schedulers"], Mapping)
    ):
        raise EndpointsFileError(
            path, ["expected a mapping with the key 'schedulers' (and optionally 'services')"]
        )
    out: dict[str, list[DiscoveredEndpoint]] = {}
    for key, entries in doc["schedulers"].items():
        where = f"schedulers.{key}"
        sched = names.get(str(key))
        if sched is None and str(key) in departed:
            continue
        if sched is None:
            problems.append(f"{where}: no scheduler or modelName {key!r} in the configuration")
            continue
        if not isinstance(entries, list):
            problems.append(f"{where}: expected a list of endpoints")
            continue
        found: list[DiscoveredEndpoint] = []
        for i, entry in enumerate(entries):
            item = f"{where}[{i}]"
            labels: dict[str, str] = {}
            if isinstance(entry, Mapping):
                unknown = sorted(set(entry) - {"address", "labels"})
                if unknown:
                    problems.append(f"{item}: unknown field {unknown[0]!r}")
                raw_labels = entry.get("labels", {})
                if not isinstance(raw_labels, Mapping):
                    problems.append(f"{item}.labels: expected a mapping")
                else:
                    labels = {str(k): str(v) for k, v in raw_labels.items()}
                addr = _address(entry.get("address"), f"{item}.address", problems)
            else:
                addr = _address(entry, item, problems)
            if addr is not None:
                found.append(DiscoveredEndpoint(key=addr, labels=labels))
        out.setdefault(sched, []).extend(found)
    if problems:
        raise EndpointsFileError(path, problems)
    return out


def parse_services(doc: Any, *, path: Path) -> dict[str, list[str]]:
    """The optional ``services`` section: name -> list of ``host:port``."""
    raw = doc.get("services", {}) if isinstance(doc, Mapping) else {}
    if not isinstance(raw, Mapping):
        raise EndpointsFileError(path, ["services: expected a mapping of name to a list of 'host:port'"])
    problems: list[str] = []
    out: dict[str, list[str]] = {}
    for name, entries in raw.items():
        if not isinstance(entries, list) or not entries:
            problems.append(f"services.{name}: expected a non-empty list of 'host:port'")
            continue
        addresses = [_address(e, f"services.{name}[{i}]", problems) for i, e in enumerate(entries)]
        out[str(name)] = [a for a in addresses if a is not None]
    if problems:
        raise EndpointsFileError(path, problems)
    return out


def departed_keys(doc: Any, *, names: Mapping[str, str], departed: Collection[str]) -> list[str]:
    """The keys of ``doc``'s ``schedulers`` that :func:`parse_endpoints` skips as departed."""
    listed = doc.get("schedulers") if isinstance(doc, Mapping) else None
    if not isinstance(listed, Mapping):
        return []
    return [str(key) for key in listed if str(key) not in names and str(key) in departed]


class EndpointsFile(NamedTuple):
    endpoints: dict[str, list[DiscoveredEndpoint]]
    services: dict[str, list[str]]
    departed: list[str]
    """Keys naming schedulers a reload removed, skipped (:func:`parse_endpoints`)."""


def read_endpoints_file(
    path: Path, *, names: Mapping[str, str], departed: Collection[str] = ()
) -> EndpointsFile:
    """(endpoints per scheduler, services, departed keys skipped); either part failing rejects the
    whole file.

    Read like a configuration file (:func:`igw.config.documents.read_documents`): duplicate keys,
    excessive nesting and alias expansion are refused with the line or reason.
    """
    try:
        documents = read_documents(path)
    except DocumentReadError as exc:
        raise EndpointsFileError(path, [str(exc).removeprefix(f"{path}: ")]) from exc
    if len(documents) > 1:
        raise EndpointsFileError(path, [f"expected one document, found {len(documents)}"])
    doc = documents[0].content if documents else None
    return EndpointsFile(
        parse_endpoints(doc, path=path, names=names, departed=departed),
        parse_services(doc, path=path),
        departed_keys(doc, names=names, departed=departed),
    )


def file_stamp(st: os.stat_result) -> tuple[int, ...]:
    """What identifies one version of the file: (device, inode, size, mtime, ctime) in ns.

    ``(mtime, size)`` alone misses a same-size replacement that keeps the old mtime (``cp -p``,
    ``rsync -a``); the inode changes on a rename over the file and the ctime on any write or
    ``chmod``, and neither can be set by a tool.
    """
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def scheduler_names(schedulers: Sequence[SchedulerSpec]) -> dict[str, str]:
    """Keys accepted in the file (scheduler name or modelName) -> scheduler name."""
    return {s.model_name: s.name for s in schedulers} | {s.name: s.name for s in schedulers}


class StaticFileDiscovery:
    def __init__(self, path: Path, *, names: Mapping[str, str], poll_interval_s: float = 1.0) -> None:
        self.path = path
        self.names = dict(names)
        self.departed: set[str] = set()
        """Names (scheduler or modelName) that a reload removed from the configuration: the file may
        still list them (it is edited on its own, often after the configuration), and they are
        skipped with a warning, not refused with the rest of the file."""
        self.poll_interval_s = poll_interval_s
        self._task: asyncio.Task[None] | None = None
        self._stamp: tuple[int, ...] | None = None
        self._unreadable: str | None = None  # why the last poll could not stat the file, reported once

    @classmethod
    def for_schedulers(
        cls, path: Path, schedulers: Sequence[SchedulerSpec], *, poll_interval_s: float = 1.0
    ) -> StaticFileDiscovery:
        return cls(path, names=scheduler_names(schedulers), poll_interval_s=poll_interval_s)

    def retarget(self, schedulers: tuple[SchedulerSpec, ...]) -> None:
        """New scheduler names: re-read the file at the next poll even if it did not change. Names
        that left the configuration are remembered as departed (:attr:`departed`)."""
        names = scheduler_names(schedulers)
        self.departed = (self.departed | set(self.names)) - set(names)
        self.names = names
        self._stamp = None

    def describe(self) -> str:
        return f"static endpoints file {self.path}"

    def _load_into(self, sink: DiscoverySink, st: os.stat_result) -> None:
        """Apply the file whose stat is ``st``; the stamp is kept first, so a bad version is reported
        once, not every poll."""
        self._stamp = file_stamp(st)
        found, services, departed = read_endpoints_file(self.path, names=self.names, departed=self.departed)
        if departed:
            log.warning(
                "endpoints file %s: %s no longer in the configuration (removed by a reload): ignored; "
                "the other schedulers' endpoints are applied (remove %s from the file)",
                self.path,
                ", ".join(f"schedulers.{key}" for key in departed),
                "it" if len(departed) == 1 else "them",
            )
        for sched in set(self.names.values()):
            sink.apply_endpoints(sched, found.get(sched, []))
        sink.apply_services(services)

    async def start(self, sink: DiscoverySink) -> None:
        # a bad file at start-up is fatal: raise to the caller
        try:
            st = self.path.stat()
        except OSError as exc:
            raise EndpointsFileError(self.path, [f"cannot read: {exc.strerror or exc}"]) from exc
        self._load_into(sink, st)
        self._task = asyncio.create_task(self._watch(sink), name="endpoints file watch")

    async def _watch(self, sink: DiscoverySink) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                try:
                    st = self.path.stat()
                except OSError as exc:
                    self._report_unreadable(exc.strerror or str(exc))
                    continue
                back = self._unreadable is not None
                if back:
                    self._unreadable = None
                elif file_stamp(st) == self._stamp:
                    continue
                self._load_into(sink, st)
                log.info("endpoints file %s %s", self.path, "applied again" if back else "reloaded")
            except (OSError, EndpointsFileError) as exc:
                log.error("endpoints file %s not applied, previous endpoints kept: %s", self.path, exc)
            except Exception as exc:  # the watch must outlive any file: a dead watch is silent
                log.error(
                    "endpoints file %s not applied (unexpected %s), previous endpoints kept: %s",
                    self.path,
                    type(exc).__name__,
                    exc,
                )

    def _report_unreadable(self, reason: str) -> None:
        """Once per reason: a file removed for a while (an editor, a deploy script) is one ERROR line,
        not one a second for as long as it is missing."""
        if reason == self._unreadable:
            return
        self._unreadable = reason
        log.error(
            "endpoints file %s cannot be read, previous endpoints kept (applied again when it can be): %s",
            self.path,
            reason,
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
