"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that one of several replicas acts.

This uses the official client's ``kubernetes.leaderelection`` (a LeaseLock and its renew loop)
rather than kopf's peering: kopf's peering pauses lower-priority peers but lets peers of equal
priority run side by side, and every operator replica runs with the same settings. The election
runs in a daemon thread (the client is synchronous); winning and losing are handed to the event
loop as two :class:`asyncio.Event`. A replica that loses its lease stops acting at once and never
tries to lead again in this process: it exits so Kubernetes restarts it as a fresh candidate.

On a graceful stop the leader gives its Lease up (:meth:`LeaseElection.release`, what client-go's
``ReleaseOnCancel`` does): without it, a rolling update of the operator left nothing reconciling
until the stopped leader's lease expired (the lease duration plus a retry, about 10 s). The client
library has no release, so every Lease write of the election goes through :class:`_ReleasableLock`,
which refuses to write once the release began: the renew loop, which runs on until the process
exits, can then neither renew nor take the lease back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from igw.operator.kube import FIELD_MANAGER

log = logging.getLogger("igw.operator")

LIBRARY_LOGGER: Final = "leaderelection"
"""The logger of ``kubernetes.leaderelection``."""

REPEAT_EVERY_S: Final = 600.0
"""How often a library line repeated unchanged on every try is let through again (a heartbeat)."""


class _RepeatFilter(logging.Filter):
    """Drops an INFO (or lower) line of the election library that repeats, unchanged, the last one its
    thread logged, except once every :data:`REPEAT_EVERY_S`.

    Why: the library logs at INFO on every try, once per retry period (2 s): the leader
    ``leader <id> has successfully acquired lease`` at each renewal, each standby ``yet to finish
    lease_duration, lease held by <id> …``. That was 43,200 lines a day per operator replica, most of
    the operator's log, hiding its own lines (found by probing, session s45). A change (``Leader has
    switched to …``, a failed renewal, another holder) differs from the line before it and always
    passes; warnings and errors are never dropped.

    The thread is the one logging (a filter runs in it), not ``record.thread``: that is ``None`` in a
    process that turned ``logging.logThreads`` off (``igw serve`` does), and every election thread's
    lines would then be one interleaved run where nothing repeats."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[int, tuple[str, float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        thread = threading.get_ident()
        previous = self._last.get(thread)
        if previous is not None and previous[0] == message and record.created - previous[1] < REPEAT_EVERY_S:
            return False
        self._last[thread] = (message, record.created)
        return True


def quiet_repeated_library_lines() -> None:
    """Install :class:`_RepeatFilter` on the library's logger, once per process."""
    library = logging.getLogger(LIBRARY_LOGGER)
    if not any(isinstance(f, _RepeatFilter) for f in library.filters):
        library.addFilter(_RepeatFilter())


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    lease_name: str
    lease_namespace: str
    identity: str
    lease_duration_s: int = 8
    """A dead leader's lease is taken over this long (plus a retry period) after its last renewal."""
    renew_deadline_s: int = 5
    retry_period_s: int = 2


def _failure(exc: Exception) -> str:
    """An API error as its status and reason (its body is left out), anything else as it prints."""
    status = getattr(exc, "status", None)
    return f"{type(exc).__name__}: {status} {getattr(exc, 'reason', '')}" if status else repr(exc)


class _FieldManagedLeases:
    """The ``CoordinationV1Api`` the election writes the Lease through, each write naming the
    operator's ``fieldManager`` (:data:`~igw.operator.kube.FIELD_MANAGER`).

    The library's LeaseLock names none, so the API server filed every acquire and renewal under the
    Python client's User-Agent: ``managedFields`` of the Lease said ``OpenAPI-Generator`` (any script
    using the client), where every other write of the operator says ``igw-operator``."""

    def __init__(self, api: Any) -> None:
        self._api = api

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def create_namespaced_lease(self, namespace: str, body: Any, **kwargs: Any) -> Any:
        return self._api.create_namespaced_lease(namespace, body, field_manager=FIELD_MANAGER, **kwargs)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        return self._api.replace_namespaced_lease(
            name, namespace, body, field_manager=FIELD_MANAGER, **kwargs
        )


class _ReleasableLock:
    """The library's LeaseLock, as the election writes through it, until :meth:`release`.

    ``kubernetes.leaderelection`` calls ``get``, ``create`` and ``update`` on its lock (and reads
    ``name``, ``namespace``, ``identity``); the writes here hold a mutex and are refused (``False``,
    as the library's lock answers a failed write) once the release began, so a renewal in flight
    finishes before the release reads the Lease, and none follows it. Reads are answered as failed
    too, so the library's loops, which only end with the process, stop calling the API server."""

    def __init__(self, lock: Any, coordination: Any) -> None:
        self._lock = lock
        self._coordination = coordination
        self.name: str = lock.name
        self.namespace: str = lock.namespace
        self.identity: str = lock.identity
        self._mutex = threading.Lock()
        self._closed = False

    def get(self, name: str, namespace: str) -> Any:
        """The library's ``(found, record or error)``; once closed, a failed read without asking the
        API server (the election's loops then only wait until the process ends)."""
        if self._closed:
            # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
            from kubernetes.client.exceptions import ApiException

            return False, ApiException(reason="the election was stopped")
        return self._lock.get(name, namespace)

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        with self._mutex:
            return not self._closed and bool(self._lock.create(name, namespace, election_record))

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        with self._mutex:
            return not self._closed and bool(self._lock.update(name, namespace, updated_record))

    def close(self) -> None:
        """Refuse every further write, leaving the Lease as it is (it expires). Without the mutex, so
        the event loop never waits for a renewal in flight (that one may still land)."""
        self._closed = True

    def release(self) -> bool:
        """Stop every further write; then give the Lease up if this candidate holds it. ``True`` when
        it was given up.

        The Lease is read afresh and written back with its resourceVersion: a lease another candidate
        took meanwhile (this one stalled past the lease duration, say) is never cleared: its holder
        is someone else, or the write is refused 409 because it changed after the read. Given up as
        client-go gives it up: no holder, a one-second duration, renewed now, so every candidate may
        take it at its next try."""
        with self._mutex:
            self._closed = True
            try:
                lease = self._coordination.read_namespaced_lease(self.name, self.namespace)
            except Exception as exc:  # best effort: unreleased, the lease expires as before
                log.warning(
                    "%s: cannot read Lease %s/%s to release it: %s",
                    self.identity,
                    self.namespace,
                    self.name,
                    _failure(exc),
                )
                return False
            spec = lease.spec
            if spec is None or spec.holder_identity != self.identity:
                holder = None if spec is None else spec.holder_identity
                log.info(
                    "%s: not releasing Lease %s/%s: held by %s",
                    self.identity,
                    self.namespace,
                    self.name,
                    holder or "no one",
                )
                return False
            now = datetime.now(UTC)
            spec.holder_identity = None
            spec.lease_duration_seconds = 1
            spec.acquire_time = now
            spec.renew_time = now
            try:
                self._coordination.replace_namespaced_lease(self.name, self.namespace, lease)
            except Exception as exc:  # 409: it changed since the read, so it may no longer be ours
                log.warning(
                    "%s: releasing Lease %s/%s failed: %s",
                    self.identity,
                    self.namespace,
                    self.name,
                    _failure(exc),
                )
                return False
            log.info("%s: released Lease %s/%s", self.identity, self.namespace, self.name)
            return True


class LeaseElection:
    """Campaigns for the Lease in a thread; :attr:`leading` and :attr:`lost` are set on the loop."""

    def __init__(self, settings: ElectionSettings, api_client: Any) -> None:
        self.settings = settings
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self._api_client = api_client
        self._loop = asyncio.get_running_loop()
        self._thread: threading.Thread | None = None
        self._release = threading.Event()
        self._lock: _ReleasableLock | None = None

    def start(self) -> None:
        # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
        from kubernetes import client
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

        lock = LeaseLock(  # type: ignore[no-untyped-call]
            self.settings.lease_name, self.settings.lease_namespace, self.settings.identity
        )
        leases: Any = _FieldManagedLeases(client.CoordinationV1Api(self._api_client))  # duck-typed
        lock.api_instance = leases
        quiet_repeated_library_lines()
        self._lock = _ReleasableLock(lock, lock.api_instance)
        self._thread = threading.Thread(target=self._campaign, name="lease-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop acting on the election without giving the Lease up (it expires): for a stop while
        work it guards may still run. No renewal or acquisition follows."""
        self._release.set()
        if self._lock is not None:
            self._lock.close()

    async def release(self) -> bool:
        """Stop campaigning and renewing, and give the Lease up if this candidate holds it; ``True``
        when it was given up. Call it only once nothing the Lease guards runs any more: the next
        leader starts at its next try (within a retry period)."""
        self._release.set()
        if self._lock is None:
            return False
        return await asyncio.to_thread(self._lock.release)

    def _campaign(self) -> None:
        # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
        from kubernetes.leaderelection import electionconfig, leaderelection

        config = electionconfig.Config(  # type: ignore[no-untyped-call]
            self._lock,
            lease_duration=self.settings.lease_duration_s,
            renew_deadline=self.settings.renew_deadline_s,
            retry_period=self.settings.retry_period_s,
            onstarted_leading=self._on_started,
            onstopped_leading=self._on_stopped,
        )
        leaderelection.LeaderElection(config).run()  # type: ignore[no-untyped-call]

    def _on_started(self) -> None:
        self._loop.call_soon_threadsafe(self.leading.set)
        self._release.wait()

    def _on_stopped(self) -> None:
        if self._release.is_set():
            return  # stopping: the renewals refused after the release are not a lost lease
        with contextlib.suppress(RuntimeError):  # the loop closed: the process is ending anyway
            self._loop.call_soon_threadsafe(self.lost.set)
