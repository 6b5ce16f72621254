"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that one of several replicas acts.

This uses the official client's ``kubernetes.leaderelection`` (a LeaseLock and its renew loop)
rather than kopf's peering: kopf's peering pauses lower-priority peers but lets peers of equal
priority run side by side, and every operator replica runs with the same settings. The election
runs in a daemon thread (the client is synchronous); winning and losing are handed to the event
loop as two :class:`asyncio.Event`. A replica that loses its lease stops acting at once and never
tries to lead again in this process: it exits so Kubernetes restarts it as a fresh candidate.

On a graceful stop the leader gives its Lease up (:meth:`LeaseElection.release`, what client-go's
``ReleaseOnCancel`` does): without it, a rolling update of the operator left nothing reconciling
until the stopped leader's lease expired (the lease duration plus a retry, about 17 s). The client
library has no release, so every Lease write of the election goes through :class:`_ReleasableLock`,
which refuses to write once the release began: the renew loop, which runs on until the process
exits, can then neither renew nor take the lease back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
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


DEFAULT_LEASE_DURATION_S: Final = 15
DEFAULT_RENEW_DEADLINE_S: Final = 10
DEFAULT_RETRY_PERIOD_S: Final = 2
"""client-go's defaults. The arithmetic (retry r = 2 s, each Lease call bounded by t = 0.75 r = 1.5 s):
the fence (:meth:`LeaseElection.acting`) counts the renew deadline from the start of the last good try;
the next try starts r after it, and each hung try costs t + r, so k hung tries in a row end at
r + k (t + r): 5.5 s for one, 9 s for two, both below the 10 s renew deadline, so the try after them
renews in time (12.5 s for three: the leader steps down). A try that fails at once costs r: four in a
row are ridden out. The fence stays 5 s below the 15 s lease, which a standby takes no earlier than
the lease duration after it saw the last renewal. At 8 / 5 / 2 one hung try (5.5 s) made the leader
step down for good (exit 3) though its next try would have renewed and the lease never lapsed."""


@dataclass(frozen=True, slots=True)
class ElectionSettings:
    lease_name: str
    lease_namespace: str
    identity: str
    lease_duration_s: int = DEFAULT_LEASE_DURATION_S
    """A dead leader's lease is taken over this long (plus a retry period) after its last renewal."""
    renew_deadline_s: int = DEFAULT_RENEW_DEADLINE_S
    """A leader whose last successful renewal began this long ago stops acting
    (:meth:`LeaseElection.acting`)."""
    retry_period_s: int = DEFAULT_RETRY_PERIOD_S

    @property
    def request_timeout_s(self) -> float:
        """How long one Lease call may take: three quarters of the retry period, so a call the API
        server never answers ends as a failed try and the next try starts on time."""
        return 0.75 * self.retry_period_s

    def __post_init__(self) -> None:
        """Refuse settings the library refuses: it ``sys.exit``-ed in the election thread, which only
        ended that thread, and the replica then waited to lead for ever."""
        problems = election_problems(self.lease_duration_s, self.renew_deadline_s, self.retry_period_s)
        if problems:
            raise ValueError("ElectionSettings: " + "; ".join(problems))


FIELD_NAMES: Final = ("lease_duration_s", "renew_deadline_s", "retry_period_s")
"""How :func:`election_problems` names the three durations by default (:class:`ElectionSettings`'
fields); ``igw operator`` passes its flags instead."""


def election_problems(
    lease_duration_s: int,
    renew_deadline_s: int,
    retry_period_s: int,
    *,
    names: tuple[str, str, str] = FIELD_NAMES,
) -> list[str]:
    """What is wrong with three election durations (the rules of the library's ``Config``), each
    naming them as ``names`` (lease duration, renew deadline, retry period) say; empty when none."""
    lease, renew, retry = names
    problems = []
    if retry_period_s < 1:
        problems.append(f"{retry} must be at least 1, got {retry_period_s}")
    if renew_deadline_s <= 1.2 * retry_period_s:
        problems.append(f"{renew} ({renew_deadline_s}) must exceed 1.2 x {retry} ({retry_period_s})")
    if lease_duration_s <= renew_deadline_s:
        problems.append(f"{lease} ({lease_duration_s}) must exceed {renew} ({renew_deadline_s})")
    return problems


def warn_unless_one_hung_call_is_ridden_out(settings: ElectionSettings) -> bool:
    """Log a WARNING (and answer ``True``) when one Lease call the API server never answers makes the
    leader step down: the next try starts a retry period after the last good one began, the hung one
    costs its timeout (three quarters of a retry period) plus a retry period, so the renewal after it
    begins ``retry + (0.75 x retry + retry)`` after the last good one, which must be under the renew
    deadline (:data:`DEFAULT_RENEW_DEADLINE_S`). Not refused: short settings suit tests.

    Why: at 8 / 5 / 2 one hung try made the leader step down for good (exit 3) though its lease never
    lapsed; nothing said that the settings themselves could not ride it out."""
    retry = settings.retry_period_s
    needed = retry + (settings.request_timeout_s + retry)
    if settings.renew_deadline_s >= needed:
        return False
    log.warning(
        "%s: renew deadline %d s < retry period + (request timeout + retry period) = %d + (%.2f + %d)"
        " = %.2f s: one Lease call the API server does not answer makes this leader step down",
        settings.identity,
        settings.renew_deadline_s,
        retry,
        settings.request_timeout_s,
        retry,
        needed,
    )
    return True


def _failure(exc: Exception) -> str:
    """An API error as its status and reason (its body is left out), anything else as it prints."""
    status = getattr(exc, "status", None)
    return f"{type(exc).__name__}: {status} {getattr(exc, 'reason', '')}" if status else repr(exc)


class _FieldManagedLeases:
    """The ``CoordinationV1Api`` the election calls the Lease through, each write naming the
    operator's ``fieldManager`` (:data:`~igw.operator.kube.FIELD_MANAGER`) and every call bounded by
    ``timeout_s``.

    The library's LeaseLock names none, so the API server filed every acquire and renewal under the
    Python client's User-Agent: ``managedFields`` of the Lease said ``OpenAPI-Generator`` (any script
    using the client), where every other write of the operator says ``igw-operator``.

    It sets no request timeout either: a call the API server took and never answered (a black-holed
    connection, a stuck API server) blocked the election thread for ever. A standby then never
    campaigned again, and a leader's release on SIGTERM waited on it, so the operator never exited."""

    def __init__(self, api: Any, timeout_s: float) -> None:
        self._api = api
        self._timeout_s = timeout_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._api, name)

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return self._api.read_namespaced_lease(name, namespace, _request_timeout=self._timeout_s, **kwargs)

    def create_namespaced_lease(self, namespace: str, body: Any, **kwargs: Any) -> Any:
        return self._api.create_namespaced_lease(
            namespace, body, field_manager=FIELD_MANAGER, _request_timeout=self._timeout_s, **kwargs
        )

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        return self._api.replace_namespaced_lease(
            name,
            namespace,
            body,
            field_manager=FIELD_MANAGER,
            _request_timeout=self._timeout_s,
            **kwargs,
        )


def _single_attempt_client(api_client: Any) -> Any:
    """An ``ApiClient`` on a copy of ``api_client``'s configuration whose requests are tried once.

    Why: urllib3 retries a timed-out read (three times by default), each try with the whole request
    timeout, so a Lease call the API server never answered took four timeouts, past the retry
    period. The election retries anyway, at its next try."""
    # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
    import copy

    import urllib3
    from kubernetes import client

    configuration = copy.deepcopy(api_client.configuration)
    configuration.retries = urllib3.Retry(total=0, raise_on_redirect=True)
    return client.ApiClient(configuration)


class _ReleasableLock:
    """The library's LeaseLock, as the election writes through it, until :meth:`release`.

    ``kubernetes.leaderelection`` calls ``get``, ``create`` and ``update`` on its lock (and reads
    ``name``, ``namespace``, ``identity``); the writes here hold a mutex and are refused (``False``,
    as the library's lock answers a failed write) once the release began, so a renewal in flight
    finishes before the release reads the Lease, and none follows it. Reads are answered as failed
    too, so the library's loops, which only end with the process, stop calling the API server."""

    def __init__(self, lock: Any, coordination: Any, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._lock = lock
        self._monotonic = monotonic
        self._try_started = 0.0
        self.renewed_at: float | None = None
        """:func:`time.monotonic` at the start of the last try (its read) whose write succeeded: the
        Lease's renewTime is no older than that."""
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
        self._try_started = self._monotonic()
        try:
            return self._lock.get(name, namespace)
        except Exception as exc:
            return False, self._unreachable(exc)

    def _unreachable(self, exc: Exception) -> Any:
        """A failure the library's lock does not catch (only ``ApiException`` is), as a failed try.

        Why: a connection reset or timeout (urllib3's ``MaxRetryError``) escaped the library's loop
        and ended the election thread: a leader cut off from the API server never stepped down (and
        wrote again, beside the new leader, once the network healed), a standby never campaigned again."""
        # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
        from kubernetes.client.exceptions import ApiException

        log.warning(
            "%s: Lease %s/%s unreachable: %s", self.identity, self.namespace, self.name, _failure(exc)
        )
        return ApiException(reason=f"unreachable: {type(exc).__name__}")

    def _write(self, write: Callable[[], Any]) -> bool:
        if self._closed:
            return False
        started = self._try_started
        try:
            written = bool(write())
        except Exception as exc:
            self._unreachable(exc)
            return False
        if written:
            self.renewed_at = started
        return written

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        with self._mutex:
            return self._write(lambda: self._lock.create(name, namespace, election_record))

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        with self._mutex:
            return self._write(lambda: self._lock.update(name, namespace, updated_record))

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

    def __init__(
        self, settings: ElectionSettings, api_client: Any, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._monotonic = monotonic
        self._stepped_down = False
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self._api_client = api_client
        self._loop = asyncio.get_running_loop()
        self._thread: threading.Thread | None = None
        self._release = threading.Event()
        self._lock: _ReleasableLock | None = None
        self._client: Any = None
        """The election's own ``ApiClient`` (single-attempt requests), closed by :meth:`stop` and
        :meth:`release`: left open, each election kept its connection pool until the process ended."""

    def start(self) -> None:
        # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
        from kubernetes import client
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

        lock = LeaseLock(  # type: ignore[no-untyped-call]
            self.settings.lease_name, self.settings.lease_namespace, self.settings.identity
        )
        self._client = _single_attempt_client(self._api_client)
        leases: Any = _FieldManagedLeases(  # duck-typed
            client.CoordinationV1Api(self._client),
            self.settings.request_timeout_s,
        )
        lock.api_instance = leases
        quiet_repeated_library_lines()
        warn_unless_one_hung_call_is_ridden_out(self.settings)
        self._lock = _ReleasableLock(lock, lock.api_instance, self._monotonic)
        self._thread = threading.Thread(target=self._campaign, name="lease-election", daemon=True)
        self._thread.start()

    def acting(self) -> bool:
        """Whether this replica may act (write) now: it leads, and its last successful renewal began
        less than ``renew_deadline_s`` ago. Called before each API call of the operator
        (:class:`~igw.operator.kube.Kube`'s ``fence``) and by :meth:`watch`.

        Why: the library only notices a lost lease at its next try, and gives up only after failing to
        renew for ``renew_deadline_s`` from the start of a try cycle. A leader frozen past the lease
        duration (a stopped process, a paused VM) went on reconciling after it thawed, beside the
        standby that had taken over, until its renew loop gave up. The first ``False`` (a lapse)
        steps down for good: :attr:`lost` is set, the Lease is written no more (it expires) and it
        never acts again in this process."""
        if self._stepped_down:
            return False
        renewed_at = None if self._lock is None else self._lock.renewed_at
        if not self.leading.is_set() or renewed_at is None:
            return False
        since = self._monotonic() - renewed_at
        if since < self.settings.renew_deadline_s:
            return True
        self._stepped_down = True
        # No renewal after stepping down: the library's loop would renew on at its next try (its
        # clock saw no lapse), and the standby had to wait out a lease nobody acts on.
        if self._lock is not None:
            self._lock.close()
        log.error(
            "%s: stepping down: Lease %s/%s not renewed for %.1f s (renew deadline %d s)",
            self.settings.identity,
            self.settings.lease_namespace,
            self.settings.lease_name,
            since,
            self.settings.renew_deadline_s,
        )
        with contextlib.suppress(RuntimeError):  # the loop closed: the process is ending anyway
            self._loop.call_soon_threadsafe(self.lost.set)
        return False

    def seconds_left(self) -> float:
        """How long this replica may still act: the time until its renew deadline, ``0.0`` once it
        may not (:meth:`acting`). :class:`~igw.operator.kube.Kube` bounds each API call's request
        timeout by it, and kopf's writes too (:func:`~igw.operator.handlers.fenced_session`).

        Why: the fence is asked before a call is sent; a write sent just before the deadline to an API
        server that did not answer kept its worker waiting with no bound at all, and an answer (the
        write applied) could come after the deadline, beside the standby that took over."""
        if not self.acting():
            return 0.0
        renewed_at = None if self._lock is None else self._lock.renewed_at
        if renewed_at is None:  # acting() answered True, so a renewal was seen
            return 0.0
        return max(self.settings.renew_deadline_s - (self._monotonic() - renewed_at), 0.0)

    async def watch(self) -> None:
        """Check :meth:`acting` every quarter retry period while leading, so a lapse steps down even
        when nothing is being written; returns once it stepped down."""
        while self.acting():  # a deadline, not an event: polled  # noqa: ASYNC110
            await asyncio.sleep(self.settings.retry_period_s / 4)
        await self.lost.wait()  # set by the step-down (or the library's) through the loop

    def stop(self) -> None:
        """Stop acting on the election without giving the Lease up (it expires): for a stop while
        work it guards may still run. No renewal or acquisition follows."""
        self._release.set()
        if self._lock is not None:
            self._lock.close()
        self._close_client()

    async def release(self) -> bool:
        """Stop campaigning and renewing, and give the Lease up if this candidate holds it; ``True``
        when it was given up. Call it only once nothing the Lease guards runs any more: the next
        leader starts at its next try (within a retry period). Also after a step-down (the Lease
        is read afresh, and left alone unless it still names this candidate)."""
        self._release.set()
        if self._lock is None:
            return False
        try:
            return await asyncio.to_thread(self._lock.release)
        finally:
            self._close_client()

    def _close_client(self) -> None:
        """Close the election's own ``ApiClient`` (its pooled connections); the lock is closed by
        then, so the library's loops, which run on until the process ends, call the API no more.

        Each connection pool is closed first: ``ApiClient.close`` only empties urllib3's pool manager
        (2.x closes no pool on that), so an idle connection stayed open until garbage collection."""
        own, self._client = self._client, None
        if own is None:
            return
        pools = own.rest_client.pool_manager.pools
        for key in list(pools.keys()):  # the container refuses iteration
            with contextlib.suppress(KeyError):  # an in-flight call's connection closes when it returns
                pools[key].close()
        own.close()

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
