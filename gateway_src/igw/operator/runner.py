"""Run the operator: connect, win the Lease (when electing), run kopf until stopped or the lease is lost."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import kopf

from igw.gateway.discovery.kube_client import make_api_client
from igw.operator.dataplane import DataPlaneSettings
from igw.operator.election import (
    DEFAULT_LEASE_DURATION_S,
    DEFAULT_RENEW_DEADLINE_S,
    DEFAULT_RETRY_PERIOD_S,
    ElectionSettings,
    LeaseElection,
)
from igw.operator.handlers import (
    Connection,
    Resync,
    build_registry,
    build_settings,
    not_leading_said_once,
)
from igw.operator.kube import Kube
from igw.operator.reconcile import Reconciler
from igw.operator.tls import AutoTlsSettings
from igw.operator.tls_sweep import SWEEP_INTERVAL_S, OrphanSweep

log = logging.getLogger("igw.operator")

EXIT_STOPPED = 0
EXIT_CRASHED = 1
EXIT_LOST_LEASE = 3

KOPF_STOP_S: Final = 10.0
"""How long kopf is given to stop once told to (then it is cancelled)."""
HANDLER_JOIN_S: Final = 5.0
"""How long kopf's handler threads are waited for once kopf stopped (:func:`_join_handler_threads`)."""
MIN_CALLS_WAIT_S: Final = 5.0
"""The shortest wait for running API calls before the Lease is released (:func:`_give_up_lease`)."""
LEASE_CALLS_AT_RELEASE: Final = 3
"""Lease calls a release may wait for: a renewal in flight (it holds the lock's mutex), the read and
the write of the release, each bounded by the election's request timeout."""
UNELECTED_CALL_TIMEOUT_S: Final = 10.0
"""Without leader election (``--no-leader-election``), how long one API call (discovery reads too)
waits for its answer: elected, the renew deadline bounds it (:func:`stop_bound_s`)."""
STOP_RESERVE_S: Final = 5
"""Seconds the operator pod's grace period keeps beyond :func:`stop_bound_s`: the loop's and the
interpreter's own teardown."""


def calls_wait_s(renew_deadline_s: float) -> float:
    """How long a stopping leader waits for API calls still running before giving its Lease up."""
    return max(MIN_CALLS_WAIT_S, float(renew_deadline_s))


def stop_bound_s(renew_deadline_s: float, retry_period_s: float) -> float:
    """The longest a leader takes from SIGTERM to exit: kopf's stop (:data:`KOPF_STOP_S`), the join
    of its handler threads (:data:`HANDLER_JOIN_S`), the wait for running API calls (each bounded by
    the renew deadline it saw when sent: :func:`calls_wait_s`), then the release
    (:data:`LEASE_CALLS_AT_RELEASE` Lease calls of three quarters of a retry period each).

    At the defaults (10 / 2): 10 + 5 + 10 + 3 x 1.5 = 29.5 s, so the Kubernetes default grace period
    (30 s) left nothing for the interpreter's exit, and at 40 / 25 / 5 (a slow API server) 51.25 s:
    the kubelet killed the leader before its release and the standby waited out the whole lease.
    The chart sets the operator pod's ``terminationGracePeriodSeconds`` to :func:`termination_grace_s`."""
    release_s = LEASE_CALLS_AT_RELEASE * 0.75 * retry_period_s
    return KOPF_STOP_S + HANDLER_JOIN_S + calls_wait_s(renew_deadline_s) + release_s


def termination_grace_s(renew_deadline_s: float, retry_period_s: float) -> int:
    """The operator pod's ``terminationGracePeriodSeconds`` (the chart computes the same): the stop
    (:func:`stop_bound_s`) rounded up, plus :data:`STOP_RESERVE_S`."""
    return math.ceil(stop_bound_s(renew_deadline_s, retry_period_s)) + STOP_RESERVE_S


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    kubeconfig: str | None = None
    """``None``: the pod's service account (in-cluster)."""
    namespaces: Sequence[str] = ()
    """Watch only these namespaces; empty watches all of them."""
    data_plane: DataPlaneSettings = field(default_factory=DataPlaneSettings)
    auto_tls: AutoTlsSettings = field(default_factory=AutoTlsSettings)
    """Issuer and ACM client for ``spec.tls: {}`` (auto-issued certificates)."""
    resync_s: float = 5.0
    tls_sweep_s: float = SWEEP_INTERVAL_S
    """How often the leader sweeps the ACM imports and Secrets of auto-issued TLS whose config is gone
    (:mod:`igw.operator.tls_sweep`; also once when it starts leading). None with auto-issue off."""
    leader_election: bool = True
    lease_name: str = "igw-operator"
    lease_namespace: str = "kube-system"
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    lease_duration_s: int = DEFAULT_LEASE_DURATION_S
    renew_deadline_s: int = DEFAULT_RENEW_DEADLINE_S
    retry_period_s: int = DEFAULT_RETRY_PERIOD_S
    """The election's durations (:class:`~igw.operator.election.ElectionSettings`)."""
    health_port: int | None = None
    """Serve ``/healthz`` here (probes); a standby replica is healthy too."""
    api_threads: int | None = None
    """API calls run at once; ``None``: :func:`igw.operator.kube.default_api_threads`."""


@contextlib.asynccontextmanager
async def _health_server(port: int | None) -> AsyncIterator[None]:
    """``GET /healthz`` answers 200 while the process runs (leader or standby)."""
    if port is None:
        yield
        return
    # deferred: start-up cost: aiohttp loads only when --health-port is set
    from aiohttp import web

    from igw.gateway.server_identity import name_every_answer
    from igw.gateway.serving import start_site

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = name_every_answer(web.Application())
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        await start_site(web.TCPSite(runner, "0.0.0.0", port), host="0.0.0.0", port=port)
        yield
    finally:
        await runner.cleanup()


def connection_for(api_client: Any) -> Connection:
    """kopf's view of the client's configuration; refreshes the token first (in-cluster tokens rotate)."""
    configuration = api_client.configuration
    refresh = getattr(configuration, "refresh_api_key_hook", None)
    if callable(refresh):
        refresh(configuration)
    authorization = str((configuration.api_key or {}).get("authorization") or "")
    token = authorization.removeprefix("Bearer ").strip() or None
    return Connection(
        server=str(configuration.host),
        token=token,
        ca_path=configuration.ssl_ca_cert,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        insecure=not configuration.verify_ssl,
    )


async def run_operator(
    options: OperatorOptions, *, stop: asyncio.Event | None = None, stop_signals: Sequence[int] = ()
) -> int:
    """Serve until ``stop`` is set (exit 0) or the Lease is lost (exit :data:`EXIT_LOST_LEASE`).

    Stopped, or stepped down, a leader gives its Lease up once nothing it started can still write, so
    a standby leads at its next try (:func:`_give_up_lease`).

    ``stop_signals`` (the command's SIGTERM/SIGINT) set ``stop`` for the whole run: kopf installs
    its own handlers for them when it starts, and those resolve a one-shot future, so a second
    signal while stopping raised ``InvalidStateError`` inside the event loop (a logged traceback);
    the handlers are taken back once kopf is ready and again when stopping begins.
    """
    async with _health_server(options.health_port):
        return await _run(options, stop or asyncio.Event(), tuple(stop_signals))


def _handle_signals(stop: asyncio.Event, signals: Sequence[int]) -> None:
    """Each of ``signals`` sets ``stop`` (idempotent, so a repeated signal is harmless)."""
    loop = asyncio.get_running_loop()
    for signum in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)


async def _take_signals_back(ready: asyncio.Event, stop: asyncio.Event, signals: Sequence[int]) -> None:
    """Once kopf has started (and installed its handlers), make ``signals`` set ``stop`` again."""
    await ready.wait()
    await asyncio.sleep(0)  # kopf's start-up installs its handlers before it reports ready
    _handle_signals(stop, signals)


async def _join_handler_threads(settings: kopf.OperatorSettings, *, within_s: float = HANDLER_JOIN_S) -> bool:
    """Shut kopf's handler executor down once kopf has stopped (kopf never does), waiting up to
    ``within_s`` for a handler still running. Its idle worker would otherwise live until the process
    exits without holding back SIGTERM (it started before the command blocks the stop signals), so a
    supervisor's repeated SIGTERM landing on it after the loop restored the default action ended
    ``igw operator`` with -15 instead of 0. ``True`` when every handler thread ended in time."""
    executor = settings.execution.executor
    shutdown = functools.partial(executor.shutdown, wait=True, cancel_futures=True)
    try:
        await asyncio.wait_for(asyncio.to_thread(shutdown), within_s)
    except TimeoutError:
        return False
    return True


async def _give_up_lease(election: LeaseElection, kube: Kube, *, quiet: bool, identity: str) -> None:
    """Release the Lease once nothing this replica started can still write (``quiet``: kopf and the
    resync stopped, handler threads joined), so the next leader starts within a retry period instead
    of waiting out the lease (a rolling update otherwise left nothing reconciling for ~10 s). Kube
    calls still running in worker threads are waited for first, up to the renew deadline (at least
    5 s): each call waits for its answer no longer than the time left before the deadline when it
    was sent (:meth:`~igw.operator.election.LeaseElection.seconds_left`), so every one has ended by
    then. With 5 s, a pass's call hung on the API server was still running, and the Lease was left
    to expire (the standby waited out the lease duration). When something may still run, the Lease
    is left to expire, as before."""
    within_s = calls_wait_s(election.settings.renew_deadline_s)
    if quiet and await asyncio.to_thread(kube.quiesce, within_s):
        await election.release()
        return
    log.warning("%s: work may still be running; leaving the Lease to expire", identity)
    election.stop()


def _unelected_time_left() -> float:
    return UNELECTED_CALL_TIMEOUT_S


async def _run(options: OperatorOptions, stop: asyncio.Event, stop_signals: tuple[int, ...]) -> int:
    # In a thread: the loop stays free to take a SIGTERM/SIGINT while the kubeconfig (or the pod's
    # token) is read, which may block on a slow volume.
    api_client = await asyncio.to_thread(make_api_client, kubeconfig=options.kubeconfig, context=None)
    if stop.is_set():
        # Stopped while starting: kopf was started anyway, authenticated, then logged its own
        # cancelled API calls as ERRORs. Nothing has touched the cluster yet: stop here.
        log.info("%s: stopped before it started", options.identity)
        return EXIT_STOPPED
    election: LeaseElection | None = None
    if options.leader_election:
        settings = ElectionSettings(
            options.lease_name,
            options.lease_namespace,
            options.identity,
            lease_duration_s=options.lease_duration_s,
            renew_deadline_s=options.renew_deadline_s,
            retry_period_s=options.retry_period_s,
        )
        election = LeaseElection(settings, api_client)
    # Every API call of the leader is fenced: none once its Lease lapsed (LeaseElection.acting).
    fence = None if election is None else election.acting
    # No call waits past the deadline; unelected, none waits longer than UNELECTED_CALL_TIMEOUT_S:
    # with no bound at all, one call the API server never answered kept a worker thread, which the
    # interpreter joins at exit, so a SIGTERM never ended the process.
    time_left = _unelected_time_left if election is None else election.seconds_left
    kube = Kube(
        api_client,
        reporting_instance=options.identity,
        threads=options.api_threads,
        fence=fence,
        time_left=time_left,
    )
    try:
        with not_leading_said_once(options.identity):  # kopf's refusals at a step-down: one line
            return await _run_with(options, stop, stop_signals, api_client, kube, election)
    finally:
        kube.close()


async def _run_with(
    options: OperatorOptions,
    stop: asyncio.Event,
    stop_signals: tuple[int, ...],
    api_client: Any,
    kube: Kube,
    election: LeaseElection | None,
) -> int:
    reconciler = Reconciler(kube, options.data_plane, auto_tls=options.auto_tls)
    resync = Resync(reconciler, options.resync_s)
    fence = None if election is None else election.acting  # kopf's own writes too
    time_left = None if election is None else election.seconds_left
    registry = build_registry(
        reconciler, lambda: connection_for(api_client), resync=resync, fence=fence, time_left=time_left
    )
    lost = asyncio.Event()
    if election is not None:
        lost = election.lost
        election.start()
        log.info(
            "%s: campaigning for Lease %s/%s", options.identity, options.lease_namespace, options.lease_name
        )
        waiter = asyncio.ensure_future(election.leading.wait())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        stopper.cancel()
        if stop.is_set():
            # Nothing guarded by the Lease ran: give it up in case it was won meanwhile.
            await election.release()
            return EXIT_STOPPED
        log.info("%s: leading; starting to reconcile", options.identity)
    kopf_stop = asyncio.Event()
    kopf_ready = asyncio.Event()
    settings = build_settings()
    running = asyncio.ensure_future(
        kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            clusterwide=not options.namespaces,
            namespaces=list(options.namespaces),
            stop_flag=kopf_stop,
            ready_flag=kopf_ready,
        )
    )
    signals_back = asyncio.ensure_future(_take_signals_back(kopf_ready, stop, stop_signals))
    resyncing = asyncio.ensure_future(resync.run(kopf_stop))
    sweeping: asyncio.Task[None] | None = None
    if options.auto_tls.enabled:  # off: the operator may read no Secret (and has no ACM role)
        sweep = OrphanSweep(kube, reconciler.acm, reconciler.cluster, namespaces=options.namespaces)
        sweeping = asyncio.create_task(sweep.run(kopf_stop, options.tls_sweep_s))
    watchers = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(lost.wait()), running}
    if election is not None:
        watchers.add(asyncio.ensure_future(election.watch()))  # a lapsed lease steps down (sets lost)
    await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
    signals_back.cancel()
    _handle_signals(stop, stop_signals)  # kopf may have stopped on its own handler before it was ready
    crashed = running.done() and not running.cancelled() and running.exception() is not None
    if crashed:
        log.error("%s: kopf stopped with an error: %r", options.identity, running.exception())
    kopf_stop.set()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.wait_for(running, KOPF_STOP_S)
    joined = await _join_handler_threads(settings)
    for background in (resyncing, sweeping):
        if background is not None:
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
    for task in watchers:
        task.cancel()
    if election is not None:
        # Stepped down too (a frozen or cut-off leader, a slow API server): the Lease, unless another
        # candidate took it meanwhile, still names this replica until it expires, and the standby
        # waited out the whole lease duration although nothing here acts any more.
        await _give_up_lease(election, kube, quiet=joined and running.done(), identity=options.identity)
    if lost.is_set():
        log.error("%s: lost the Lease; exiting so a fresh candidate takes its place", options.identity)
        return EXIT_LOST_LEASE
    return EXIT_CRASHED if crashed else EXIT_STOPPED
