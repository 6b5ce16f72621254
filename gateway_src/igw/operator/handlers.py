"""The kopf side of the operator: which events run a reconciliation pass, and kopf's own settings.

kopf watches InferenceGatewayConfig objects (list + watch with bookmarks, re-listing after 410 Gone)
and calls :meth:`~igw.operator.reconcile.Reconciler.reconcile` on create, on spec/label/annotation
changes and when the operator (re)starts; :class:`Resync` passes over every object it has seen every
``resync_s`` - it keeps the status current as pods and rollouts change and puts back data-plane
objects someone deleted or edited. That loop is ours, not a ``kopf.timer``: kopf puts a finalizer on
every object a timer runs for, so with the operator stopped or uninstalled ``kubectl delete igwc``
(and deleting the CRD, or the add-on's namespace) hung for good. Every event of an
InferenceObjective or InferenceModelRewrite re-runs the pass of the config it binds to.

kopf keeps its own bookkeeping in annotations under ``operator.igw.dev/`` (the CRD's status is a
closed schema, so kopf's default ``status.kopf`` stanza would be pruned), posts no Events of its
own (the reconciler posts one per condition transition) and registers no deletion handler: the
data plane is removed by owner references, so no finalizer blocks ``kubectl delete``. The one thing
outside the cluster, an ACM certificate imported for ``spec.tls: {}``, is deleted when the watch
reports the object DELETED (its last status names the ARN); an object deleted while no operator
runs (or during a watch gap) is left to the orphan sweep (:mod:`igw.operator.tls_sweep`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import kopf

from igw.config.crd import PLURAL
from igw.config.inference_extension import GROUP as EXTENSION_GROUP
from igw.config.inference_extension import VERSION as EXTENSION_VERSION
from igw.config.inference_extension_crds import PLURALS as EXTENSION_PLURALS
from igw.config.model import API_GROUP, API_VERSION, KIND
from igw.operator.bindings import pool_name
from igw.operator.diffbase import DigestDiffBaseStorage
from igw.operator.kube import NotLeading, refusal_text
from igw.operator.reconcile import NamespaceListing, Reconciler

KOPF_PREFIX: Final = "operator.igw.dev"
KOPF_FINALIZER: Final = "kopf.zalando.org/KopfFinalizerMarker"
"""What kopf adds while a timer or daemon runs for an object (older operators did); kopf removes it
from every object it processes once no handler needs it."""

log = logging.getLogger("igw.operator")


class Resync:
    """Every ``interval_s``, one reconciliation pass over each InferenceGatewayConfig the watch has
    shown (and not shown deleted), concurrently; a failing pass is logged and retried next time."""

    def __init__(self, reconciler: Reconciler, interval_s: float) -> None:
        self._reconciler = reconciler
        self._interval_s = interval_s
        self._known: set[tuple[str, str]] = set()

    @property
    def known(self) -> set[tuple[str, str]]:
        """``(namespace, name)`` of every object the next pass covers."""
        return set(self._known)

    def saw(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not namespace or not name:
            return
        if event_type == "DELETED":
            self._known.discard((str(namespace), str(name)))
        else:
            self._known.add((str(namespace), str(name)))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self._interval_s)
            except TimeoutError:
                await self.pass_all()

    async def pass_all(self) -> None:
        """One pass per known object, with the lists of each namespace read once for all of its
        objects (:class:`~igw.operator.reconcile.NamespaceListing`: a list per object made a resync
        O(n^2) in the objects of a namespace); a namespace whose lists fail is passed over list by list.

        An object whose pass is still running or waiting is skipped (:meth:`Reconciler.busy`): that
        pass reads the object anew. A cold start of 200 configs with a 60 s resync queued 200 more
        passes behind the initial ones, still running when it came."""
        known = sorted(key for key in self._known if not self._reconciler.busy(*key))
        namespaces = sorted({namespace for namespace, _ in known})
        listings = await asyncio.gather(
            *(self._reconciler.listing(namespace) for namespace in namespaces), return_exceptions=True
        )
        listed: dict[str, NamespaceListing] = {}
        for namespace, listing in zip(namespaces, listings, strict=True):
            if isinstance(listing, NamespaceListing):
                listed[namespace] = listing
            elif isinstance(listing, Exception):
                log.warning("%s: listing for the resync failed: %s", namespace, refusal_text(listing))
        results = await asyncio.gather(
            *(
                self._reconciler.reconcile(namespace, name, listed=listed.get(namespace))
                for namespace, name in known
            ),
            return_exceptions=True,
        )
        for (namespace, name), result in zip(known, results, strict=True):
            if isinstance(result, Exception):
                # refusal_text: an API refusal's %r is "ForbiddenError(ApiException())", naming nothing
                log.error("%s/%s: resync pass failed: %s", namespace, name, refusal_text(result))
            elif result is False:  # deleted while the watch was away (a relist shows no DELETED)
                self._known.discard((namespace, name))


@dataclass(frozen=True, slots=True)
class Connection:
    """How kopf reaches the API server (from the same kubeconfig or pod account as the reconciler)."""

    server: str
    token: str | None = None
    ca_path: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None
    insecure: bool = False


HANDLER_THREAD_PREFIX = "igw-kopf-handler"

READ_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
"""kopf's requests the fence lets through after a step-down (its watches and reads change nothing)."""


def fenced_session(
    info: kopf.ConnectionInfo,
    fence: Callable[[], bool],
    time_left: Callable[[], float] | None = None,
) -> aiohttp.ClientSession:
    """The ``aiohttp`` session kopf would make for ``info`` (its connector, TLS and headers), whose
    every write (any method but :data:`READ_METHODS`) asks ``fence`` first and is refused
    (:class:`~igw.operator.kube.NotLeading`, nothing sent) when it answers ``False``.

    Why: only the operator's own calls were fenced on the renew deadline. kopf writes through its own
    client: after a handler returns it patches its bookkeeping annotations (``operator.igw.dev/...``)
    on the InferenceGatewayConfig, and after a failed handler the retry count. A leader that lapsed
    while a pass ran (frozen, cut off) still sent that PATCH after its deadline, beside the standby
    that may already lead. kopf logs the refused write as an unrecoverable error of that event,
    once; the replica is stepping down anyway.

    ``time_left`` (the election's :meth:`~igw.operator.election.LeaseElection.seconds_left`): each
    write waits for its answer no longer than that (a client middleware), where kopf's own request
    timeout (:func:`build_settings`, 30 s) let a PATCH sent just before the deadline to an API server
    that did not answer wait, and be applied, well past it."""

    async def refuse_unless_acting(
        _session: aiohttp.ClientSession, _context: Any, params: aiohttp.TraceRequestStartParams
    ) -> None:
        if params.method.upper() not in READ_METHODS and not fence():
            raise NotLeading(
                f"not leading (the Lease was not renewed in time): kopf's {params.method} "
                f"{params.url.path} refused"
            )

    async def answered_by_the_deadline(
        request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if time_left is None or request.method.upper() in READ_METHODS:
            return await handler(request)
        left = time_left()
        if left <= 0:
            raise NotLeading(
                f"not leading (the Lease was not renewed in time): kopf's {request.method} "
                f"{request.url.path} refused"
            )
        async with asyncio.timeout(left):
            return await handler(request)

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(refuse_unless_acting)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        trace_configs=[trace],
        middlewares=(answered_by_the_deadline,),
    )


KOPF_LOGGERS: Final = ("kopf.objects", "kopf._core.reactor.queueing")
"""Where kopf logs a handler's or its own failure for an object (``kopf.objects``) and an event's
unrecoverable failure (its queueing worker)."""


def _caused_by_not_leading(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 10:  # the cause chain, bounded
        if isinstance(exc, NotLeading):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class NotLeadingOnce(logging.Filter):
    """Turns the first of kopf's failure lines caused by :class:`~igw.operator.kube.NotLeading` into one
    WARNING line naming the replica, without its traceback, and drops the others.

    Why: at a step-down every object whose pass or bookkeeping PATCH was refused was logged by kopf
    as an ERROR with a 30-line traceback, twice (the failed handler, then the refused PATCH's
    throttling), although nothing is wrong but the step-down, which the election logs itself."""

    def __init__(self, identity: str) -> None:
        super().__init__()
        self._identity = identity
        self._said = False

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not _caused_by_not_leading(exc):
            return True
        if self._said:
            return False
        self._said = True
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = "%s: not leading: kopf's handlers and writes are refused from now on (stepping down)"
        record.args = (self._identity,)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


@contextlib.contextmanager
def not_leading_said_once(identity: str) -> Iterator[None]:
    """:class:`NotLeadingOnce` on kopf's loggers (:data:`KOPF_LOGGERS`) while the block runs."""
    quiet = NotLeadingOnce(identity)
    loggers = [logging.getLogger(name) for name in KOPF_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def build_settings() -> kopf.OperatorSettings:
    """kopf's settings for this operator.

    The executor for synchronous handlers (the login handler) is our own, named, so the runner can
    shut it down when kopf stops: kopf never does, and an idle worker left running until the process
    exits is a thread that does not hold back the stop signals (see :func:`igw.operator.runner.run_operator`).
    """
    settings = kopf.OperatorSettings()
    settings.execution.executor = concurrent.futures.ThreadPoolExecutor(
        thread_name_prefix=HANDLER_THREAD_PREFIX
    )
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(  # a digest: igw.operator.diffbase
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.enabled = False
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.networking.request_timeout = 30
    return settings


def build_registry(
    reconciler: Reconciler,
    connect: Callable[[], Connection],
    *,
    resync: Resync,
    fence: Callable[[], bool] | None = None,
    time_left: Callable[[], float] | None = None,
) -> kopf.OperatorRegistry:
    """A private registry (several operators can run in one process, as the tests do).

    ``connect`` is asked again whenever kopf logs in anew (after a 401), so a rotated service-account
    token is picked up. ``fence`` (the election's :meth:`~igw.operator.election.LeaseElection.acting`):
    kopf's own writes are refused once it answers ``False``, and wait for their answer no longer than
    ``time_left`` (the election's ``seconds_left``; :func:`fenced_session`). No handler
    here makes kopf add a finalizer (no timer, daemon or mandatory deletion handler):
    ``tests/operator/test_lifecycle.py`` checks that objects carry none.
    """
    registry = kopf.OperatorRegistry()
    resource = (API_GROUP, API_VERSION, PLURAL)

    def connection_info() -> kopf.ConnectionInfo:
        connection = connect()
        return kopf.ConnectionInfo(
            server=connection.server,
            token=connection.token,
            scheme="Bearer" if connection.token else None,
            ca_path=connection.ca_path,
            certificate_path=connection.certificate_path,
            private_key_path=connection.private_key_path,
            insecure=connection.insecure or None,
        )

    if fence is None:

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return connection_info()

    else:

        @kopf.on.login(registry=registry)
        async def fenced_login(**_: Any) -> kopf.AiohttpSession:
            # the session is made here, on kopf's loop (kopf closes it with its other sessions);
            # connect() in a thread: it may refresh the pod's token from its volume
            info = await asyncio.to_thread(connection_info)
            return kopf.AiohttpSession(
                server=info.server, aiohttp_session=fenced_session(info, fence, time_left)
            )

    async def reconcile(namespace: str | None, name: str | None, **_: Any) -> None:
        reconciler.served(f"{API_GROUP}/{API_VERSION}", KIND)  # kopf serves it: the CRD is installed
        if namespace and name:
            await reconciler.reconcile(namespace, name)

    kopf.on.resume(*resource, registry=registry, id="reconcile-on-resume")(reconcile)
    kopf.on.create(*resource, registry=registry, id="reconcile-on-create")(reconcile)
    kopf.on.update(*resource, registry=registry, id="reconcile-on-update")(reconcile)

    @kopf.on.event(*resource, registry=registry, id="forget-on-delete")
    async def forget(event: Mapping[str, Any], **_: Any) -> None:
        reconciler.served(f"{API_GROUP}/{API_VERSION}", KIND)
        obj = event.get("object") or {}
        resync.saw(event.get("type"), obj)
        if event.get("type") == "DELETED" or (obj.get("metadata") or {}).get("deletionTimestamp"):
            reconciler.leaving(obj)  # a pass of it still running stops
        if event.get("type") == "DELETED":
            await reconciler.forget(event.get("object") or {})

    # InferenceObjective / InferenceModelRewrite: any change (deletion included) re-runs the pass of
    # the config they bind to, which merges them and writes their conditions.
    async def rebind(event: Mapping[str, Any], **_: Any) -> None:
        obj = event.get("object") or {}
        reconciler.served(f"{EXTENSION_GROUP}/{EXTENSION_VERSION}", str(obj.get("kind")))
        namespace, pool = (obj.get("metadata") or {}).get("namespace"), pool_name(obj)
        if event.get("type") == "DELETED":  # its config's next pass leaves it out
            if namespace and pool:
                await reconciler.reconcile(str(namespace), pool)
            return
        await reconciler.reconcile_bound(obj)

    for kind, plural in EXTENSION_PLURALS.items():
        kopf.on.event(EXTENSION_GROUP, EXTENSION_VERSION, plural, registry=registry, id=f"rebind-{kind}")(
            rebind
        )
    return registry
