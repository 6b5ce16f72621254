"""The operator's view of the Kubernetes API: the official client's dynamic client, awaited in threads.

The ``kubernetes`` client is synchronous; every call runs in a worker thread so kopf's event loop
never blocks. Objects go in and come out as plain dicts. :meth:`Kube.apply` is create-or-replace
keyed by a hash of the desired object stored in an annotation: an unchanged object is not
written again (no churn, no spurious rollouts), a changed or deleted one is put back. "Changed"
covers both sides: what the operator wants (the hash differs) and what someone else edited in the
fields the operator sets (a ``kubectl edit`` of the served ConfigMap keeps the annotation, so the
hash alone never noticed it; fields the API server or controllers add are not compared). A replace
keeps the finalizers other controllers put on the object. An
existing object of the same name that another owner (or none) controls is never replaced:
:class:`NotOwnedError` instead, which the pass reports on the object (``ApplyFailed``). The one
exception is an orphan the operator wrote for a config of the same name (left by ``kubectl delete
--cascade=orphan``): it is adopted, taking the new owner reference with the desired content.

:meth:`Kube.apply_all` writes a set of objects (one reconciliation pass's data plane) all or nothing,
as far as the API allows: see its docstring.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from igw.config.model import API_GROUP, API_VERSION, KIND
from igw.errors import IgwToolingError
from igw.gateway.worker_count import cpu_limit
from igw.operator.dataplane import CONFIG_LABEL, MANAGED_BY

APPLIED_HASH: Final = f"{API_GROUP}/applied-hash"
IGWC_API_VERSION: Final = f"{API_GROUP}/{API_VERSION}"
ADOPTION_LABELS: Final = ("app.kubernetes.io/managed-by", CONFIG_LABEL)
"""Labels an orphaned object must share with the desired one to be adopted (:func:`_adoptable`)."""
FIELD_MANAGER: Final = MANAGED_BY
"""The ``fieldManager`` every write of the operator names. Without one the API server files a write
under its User-Agent's first segment, and the Python client's is ``OpenAPI-Generator``: the
``managedFields`` of every object the operator writes, and the 409 a ``kubectl apply --server-side``
of a field the operator sets is answered with, named ``"OpenAPI-Generator"`` (as any script using
the client would be named), not the operator."""
CONFLICT_ATTEMPTS: Final = 3
"""Tries at writing one object in a pass while the API server answers 409 Conflict
(:meth:`Kube._write_through_conflicts`)."""
MISSING_KIND_RETRY_S: Final = 30.0
"""How long a kind the API server does not serve (a CRD not installed) is answered as missing without
asking again: a CRD installed meanwhile is used from the first call after that."""
THROTTLED_ATTEMPTS: Final = 4
"""Tries at one API call while the API server answers 429, or 503 with a ``Retry-After``
(:meth:`Kube._in_thread`), as client-go retries them."""
RETRY_AFTER_CAP_S: Final = 30.0
"""The longest ``Retry-After`` honoured; a larger one waits this long (a 429 without one: 1 s)."""


def default_api_threads(root: Path = Path("/"), cores: int | None = None) -> int:
    """Worker threads of :class:`Kube` unless told (``igw operator --api-threads``): as many as
    asyncio's default pool, which ran the calls before, ``min(32, cpus + 4)``, where ``cpus`` is the
    node's cores (``cores``; ``None``: :func:`os.cpu_count`) bounded by the pod's CPU limit, rounded
    up, when it has one (:func:`igw.gateway.worker_count.cpu_limit`, what ``igw serve --workers
    auto`` reads): a 1-core operator on a 96-core node takes 5 threads, not 32. ``root`` is the file
    system root, a parameter so that tests can lay out a cgroup tree. A cold start's calls no longer
    fill the pool every other ``asyncio.to_thread`` of the process (the Lease's release, the
    runner's stop) waits in."""
    cpus = (os.cpu_count() or 1) if cores is None else cores
    limit = cpu_limit(root)
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return min(32, cpus + 4)


MAX_API_THREADS: Final = 256
"""The most threads taken (:func:`default_api_threads`): each thread holds an API server connection."""
API_THREAD_PREFIX: Final = "igw-kube-api"
_KEPT_SERVICE_FIELDS: Final = ("clusterIP", "clusterIPs", "healthCheckNodePort", "ipFamilies")
T = TypeVar("T")


def desired_hash(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def managed_view(current: Any, desired: Any) -> Any:
    """``current`` narrowed to what ``desired`` sets: mappings to the keys ``desired`` has, lists item
    by item when their lengths agree, anything else as it is. Equal to ``desired`` exactly when no one
    changed a field the operator writes; defaults, ``status``, a Service's cluster IP or annotations
    others add do not count."""
    if isinstance(desired, Mapping):
        if not isinstance(current, Mapping):
            return current
        return {key: managed_view(current[key], value) for key, value in desired.items() if key in current}
    if isinstance(desired, list):
        if not isinstance(current, list) or len(current) != len(desired):
            return current
        return [managed_view(c, d) for c, d in zip(current, desired, strict=True)]
    return current


def merged_status(current: Any, patch: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` with ``patch`` merged in as a JSON merge patch (RFC 7386) would: mappings merged key
    by key, ``None`` removing a key, anything else replacing what was there."""
    merged: dict[str, Any] = dict(current) if isinstance(current, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping):
            merged[key] = merged_status(merged.get(key), value)
        else:
            merged[key] = value
    return merged


class NotOwnedError(IgwToolingError):
    """A data-plane object of that name exists and is controlled by something else (or by nothing):
    the operator neither replaces nor adopts it."""


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _adoptable(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether ``current`` is an orphan of the data plane ``desired`` belongs to: no controller, written
    by the operator (its applied-hash annotation) for a config of this name (the managed-by and config
    labels ``desired`` carries). ``kubectl delete --cascade=orphan`` leaves such objects, and applying
    the config again must take them back, as a ReplicaSet adopts its pods. Whatever else the orphan
    holds is replaced by the desired object, so a look-alike made by hand gains nothing."""
    if _controller_uid(current) is not None:
        return False
    meta = current.get("metadata") or {}
    if APPLIED_HASH not in (meta.get("annotations") or {}):
        return False
    have = meta.get("labels") or {}
    want = (desired.get("metadata") or {}).get("labels") or {}
    return all(key in want and have.get(key) == want[key] for key in ADOPTION_LABELS)


def _retry_after(exc: BaseException) -> float | None:
    """How long to wait before sending a call the API server refused for load again: a 429, or a
    503 that names a ``Retry-After`` (a 503 without one is an outage, not a throttle); ``None``
    for any other failure."""
    status = getattr(exc, "status", None)
    headers = getattr(exc, "headers", None) or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    if status != 429 and not (status == 503 and raw is not None):
        return None
    try:
        seconds = float(raw) if raw is not None else 1.0  # client-go's wait for a bare 429
    except ValueError:  # an HTTP date: the API server sends seconds; wait as for a bare 429
        seconds = 1.0
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


def refusal_text(exc: BaseException) -> str:
    """An API refusal in one line: the exception's type and, for an API ``Status`` answer, its code
    and message (the body's JSON is long and repeats them); any other error as it prints."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if isinstance(body, str):
        try:
            status = json.loads(body)
        except ValueError:
            status = None
        if isinstance(status, Mapping) and status.get("message"):
            return f"{type(exc).__name__}: {status.get('code', '')} {status['message']}".replace("  ", " ")
    return f"{type(exc).__name__}: {body or exc}"


@dataclass(frozen=True, slots=True)
class Write:
    """One prepared create or replace of an object (:meth:`Kube._plan`), sent by :meth:`Kube._send`."""

    verb: Literal["create", "replace"]
    body: dict[str, Any]
    wanted: dict[str, Any]
    """What the operator wants stored, for :meth:`Kube._remember`."""
    desired: Mapping[str, Any]
    """The desired object it was planned from, to plan it again after a conflict."""
    initial_only: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str]:
        meta = self.body["metadata"]
        return (self.body["apiVersion"], self.body["kind"], meta["namespace"], meta["name"])

    @property
    def label(self) -> str:
        meta = self.body["metadata"]
        return f"{self.body['kind']} {meta['namespace']}/{meta['name']}"


class OperatorStopping(IgwToolingError):
    """An API call asked for after :meth:`Kube.quiesce`: the operator is stopping."""


class NotLeading(OperatorStopping):
    """An API call asked for while this replica may not act: its Lease was not renewed within the
    renew deadline (:meth:`igw.operator.election.LeaseElection.acting`); it is stepping down."""


class NothingApplied(IgwToolingError):
    """The API server refused one or more objects of the pass in a server-side dry run (or the pass
    could not be prepared): none of the pass's objects was written."""


class PassAbandoned(IgwToolingError):
    """:meth:`Kube.apply_all`'s ``abandon`` said to stop (the object the pass is for is being deleted):
    nothing more was sent; what was written before stays, as the object's deletion removes it."""


class NamespaceTerminating(NothingApplied):
    """Every refusal of the pass's dry run was the API server's ``NamespaceLifecycle`` answer: the
    namespace is being deleted, and nothing new may be created in it until it is gone."""


NAMESPACE_TERMINATING_CAUSE: Final = "NamespaceTerminating"
"""The ``details.causes[].reason`` of a create refused in a namespace being deleted (403)."""


def _abandon_if(abandon: Callable[[], bool]) -> None:
    if abandon():
        raise PassAbandoned("the pass was abandoned: its object is being deleted")


def namespace_terminating(exc: BaseException) -> bool:
    """Whether ``exc`` is the API server's refusal to create in a namespace being deleted (403
    ``Forbidden`` with a ``NamespaceTerminating`` cause), as opposed to an RBAC 403."""
    if isinstance(exc, NamespaceTerminating | NamespaceTerminatedMidway):
        return True
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if not isinstance(body, str) or NAMESPACE_TERMINATING_CAUSE not in body:
        return False
    try:
        status = json.loads(body)
    except ValueError:
        return False
    causes = ((status.get("details") or {}).get("causes") or []) if isinstance(status, Mapping) else []
    return any(
        isinstance(cause, Mapping) and cause.get("reason") == NAMESPACE_TERMINATING_CAUSE for cause in causes
    )


class PartlyApplied(IgwToolingError):
    """Every object passed its dry run, but a real write was then refused: the message lists what was
    written, what was refused and what was not written."""


class NamespaceTerminatedMidway(PartlyApplied):
    """Every object passed its dry run, then the namespace began terminating before the real writes
    were done: the API server refused the next create there (``NamespaceLifecycle``). Not a fault to
    chase, as :class:`NamespaceTerminating` is not; reported as ``PartlyApplied`` it made the status say
    ``ApplyFailed`` and the log a WARNING for what the namespace's deletion clears up anyway."""


def _listed(labels: Sequence[str]) -> str:
    return ", ".join(labels) if labels else "none"


def _holder(obj: Mapping[str, Any]) -> str:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return f'{ref.get("kind")} "{ref.get("name")}" (uid {ref.get("uid")})'
    return "no controller (created outside the operator)"


def _deadline_bound_client(api_client: Any, time_left: Callable[[], float]) -> Any:
    """A ``DynamicClient`` on a copy of ``api_client``'s configuration whose every request is refused
    (:class:`NotLeading`) once ``time_left()`` is not positive, and otherwise waits for its answer no
    longer than ``time_left()`` (its ``_request_timeout``, which the dynamic client hands to the REST
    client), and whose urllib3 retries stop once ``time_left()`` ran out.

    Why: the fence is asked before a call is sent. A write sent just before the renew deadline to an
    API server that did not answer waited with no bound (probed: still waiting 9.7 s past a 2 s
    deadline when the probe gave up), and its answer, the write applied, could come after the
    standby took over. Bounded, it ends at the deadline at the latest. urllib3 resends a failed
    request on its own (``make_api_client``: once), past every fence, each time with the whole
    timeout again: no resend once the time ran out, nor after a read timeout (the call waited until
    the deadline its timeout was cut to; a resend waited as long again, past it)."""
    # deferred: start-up cost: the kubernetes client loads only on cluster-facing paths
    import copy

    import urllib3
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient
    from urllib3.exceptions import MaxRetryError, ReadTimeoutError

    class DeadlineRetry(urllib3.Retry):
        """urllib3's retry, refused once ``time_left()`` ran out or after a read timeout (its ``new``
        copies are of this class too)."""

        def increment(
            self,
            method: str | None = None,
            url: str | None = None,
            response: Any = None,
            error: Exception | None = None,
            _pool: Any = None,
            _stacktrace: Any = None,
        ) -> DeadlineRetry:
            if time_left() <= 0 or isinstance(error, ReadTimeoutError):
                raise MaxRetryError(_pool, url or "", error)
            return super().increment(method, url, response, error, _pool, _stacktrace)

    configuration = copy.deepcopy(api_client.configuration)
    base = urllib3.Retry.from_int(configuration.retries)
    configuration.retries = DeadlineRetry(
        total=base.total,
        connect=base.connect,
        read=base.read,
        redirect=base.redirect,
        status=base.status,
        other=base.other,
    )

    class DeadlineBound(DynamicClient):  # the client is untyped (Any)
        def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
            left = time_left()
            if left <= 0:
                raise NotLeading(
                    f"not leading (the Lease was not renewed in time): {method.upper()} {path} refused"
                )
            asked = params.get("_request_timeout")
            if not isinstance(asked, int | float) or asked > left:
                params["_request_timeout"] = left
            return super().request(method, path, body, **params)

    return DeadlineBound(client.ApiClient(configuration))  # type: ignore[no-untyped-call]


class Kube:
    """Dict-in, dict-out access to any kind through one ``kubernetes.client.ApiClient``."""

    def __init__(
        self,
        api_client: Any,
        *,
        reporting_instance: str = "",
        monotonic: Callable[[], float] = time.monotonic,
        threads: int | None = None,
        fence: Callable[[], bool] | None = None,
        time_left: Callable[[], float] | None = None,
    ) -> None:
        """``threads``: how many API calls run at once (``None``: :func:`default_api_threads`), each in
        a thread of this client's own pool (:meth:`close` ends them). ``fence``: asked before each API
        call (and each request of a pass), which is refused (:class:`NotLeading`) when it answers
        ``False``: a leader that may have lost its Lease writes nothing more. ``time_left``: how long
        it may still act (:meth:`igw.operator.election.LeaseElection.seconds_left`); each request's
        timeout is bounded by it (:func:`_deadline_bound_client`), so no call of this client is still
        waiting for its answer past the renew deadline."""
        threads = default_api_threads() if threads is None else threads
        if not 1 <= threads <= MAX_API_THREADS:
            raise ValueError(f"Kube threads: expected 1 to {MAX_API_THREADS}, got {threads!r}")
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=API_THREAD_PREFIX)
        self._api_client = api_client
        self._reporting_instance = reporting_instance
        self._fence = fence
        self._time_left = time_left
        self._dynamic: Any = None
        self._discovery_lock = threading.Lock()
        self._resources: dict[tuple[str, str], Any] = {}
        self._monotonic = monotonic
        self._missing: dict[tuple[str, str], float] = {}
        """``(apiVersion, kind)`` the API server did not serve, and when that was found
        (:data:`MISSING_KIND_RETRY_S`)."""
        self._calls = threading.Condition()
        self._running = 0
        self._quiesced = False
        self._held_until = 0.0
        """While the API server's last 429/503 ``Retry-After`` runs (:meth:`monotonic` time), every
        call waits before it is sent: one pause for the whole client, not one refusal per call."""
        self._stored: dict[tuple[str, str, str, str], str] = {}
        """Per object written: the hash of :func:`managed_view` of what the API server stored. Where
        it normalises a value (a quantity such as ``0.5`` stored as ``500m``) the stored form never
        equals the desired one; it is then accepted as written instead of being replaced again on
        every pass."""

    def _resource(self, api_version: str, kind: str) -> Any:
        # The dynamic client reads the API's discovery documents when it is built: do that lazily,
        # in the worker thread, never on the event loop.
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        with self._discovery_lock:
            if self._dynamic is None:
                # deferred: start-up cost: the dynamic client reads discovery documents when built
                from kubernetes.dynamic import DynamicClient

                if self._time_left is None:
                    self._dynamic = DynamicClient(self._api_client)  # type: ignore[no-untyped-call]
                else:
                    self._dynamic = _deadline_bound_client(self._api_client, self._time_left)
            # Under the lock too: a lookup that misses the dynamic client's discovery cache rewrites
            # it, and two threads doing that at once fail with KeyError('resources').
            key = (api_version, kind)
            resource = self._resources.get(key)
            if resource is None:
                self._not_served_lately(key)
                try:
                    resource = self._dynamic.resources.get(api_version=api_version, kind=kind)
                except ResourceNotFoundError:
                    self._missing[key] = self._monotonic()
                    raise
                self._missing.pop(key, None)
                self._resources[key] = resource
            return resource

    def served(self, api_version: str, kind: str) -> None:
        """``kind`` is served now (a watch just delivered one of its objects): forget that it was
        missing, so the next call looks it up at once. Without this, an operator started before its
        CRD was installed kept answering "not served" for up to :data:`MISSING_KIND_RETRY_S` after the
        CRD came: the first pass of the first config failed with a traceback in the log (kopf
        retried it 60 s later) and its gateway came up only with a later resync."""
        self._missing.pop((api_version, kind), None)

    def _not_served_lately(self, key: tuple[str, str]) -> None:
        """Raise ``ResourceNotFoundError`` when ``key`` was not served less than
        :data:`MISSING_KIND_RETRY_S` ago. The dynamic client answers a kind it does not know by
        reading the whole discovery again (``/version``, ``/api``, ``/apis``, rewriting its cache file),
        under the lock every other call waits on: every pass did that twice where the
        InferenceObjective/InferenceModelRewrite CRDs are not installed (and once more for a
        ``tls: {}`` config without cert-manager)."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        missed = self._missing.get(key)
        if missed is not None and self._monotonic() - missed < MISSING_KIND_RETRY_S:
            raise ResourceNotFoundError(
                f"No matches found for {{'api_version': {key[0]!r}, 'kind': {key[1]!r}}}"
            )

    # ---- sync bodies (run in threads) -------------------------------------------------------------
    def _get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            found: dict[str, Any] = (
                self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
            )
        except NotFoundError:
            return None
        return found

    def _list(
        self, api_version: str, kind: str, namespace: str | None, label_selector: str | None
    ) -> list[dict[str, Any]]:
        result = self._resource(api_version, kind).get(namespace=namespace, label_selector=label_selector)
        return [dict(item) for item in result.to_dict().get("items") or []]

    def _apply(self, desired: Mapping[str, Any], initial_only: tuple[str, ...] = ()) -> bool:
        """Create or replace ``desired``; ``True`` when something was written. ``initial_only``: spec
        fields written at creation only; a replace keeps their live values and does not compare them
        (a Deployment's replicas while an autoscaler owns them)."""
        write = self._plan(desired, initial_only)
        if write is None:
            return False
        self._send(write, dry_run=False)
        return True

    def _resending(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one step of a pass of several API requests (:meth:`_apply_all`) in this worker thread,
        waiting out the API server's ``Retry-After`` and sending it again, as :meth:`_in_thread` does
        for a single call, with the same client-wide pause.

        Inside :meth:`_apply_all` a 429 was wrapped as :class:`NothingApplied` or, once a real write
        had gone through, :class:`PartlyApplied`, which :meth:`_in_thread` does not retry: the pass
        failed (``ApplyFailed``, a Warning Event, the served ConfigMap new and the Deployment old)
        until the next resync. A throttled request was refused before anything was read or written,
        so resending it applies nothing twice. The wait ends early when the operator stops."""
        for attempt in range(1, THROTTLED_ATTEMPTS + 1):
            with self._calls:
                # the pause ends early on quiesce(): the runner waits for running calls to end
                self._calls.wait_for(
                    lambda: self._quiesced or self._held_until <= self._monotonic(),
                    max(self._held_until - self._monotonic(), 0.0),
                )
                if self._quiesced:
                    raise OperatorStopping("the operator is stopping: no more API calls")
            self._check_fence()
            try:
                return call(*args, **kwargs)
            except Exception as exc:
                wait = _retry_after(exc)
                if wait is None or attempt == THROTTLED_ATTEMPTS:
                    raise
                with self._calls:
                    self._held_until = max(self._held_until, self._monotonic() + wait)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _apply_all(
        self,
        objects: Sequence[tuple[Mapping[str, Any], tuple[str, ...]]],
        abandon: Callable[[], bool] = lambda: False,
        terminating: Callable[[], None] = lambda: None,
    ) -> list[str]:
        """The body of :meth:`apply_all`: the labels (``Kind ns/name``) of the objects written."""
        writes = self._dry_run_all(objects, abandon, terminating)
        written: list[str] = []
        for index, write in enumerate(writes):
            _abandon_if(abandon)
            try:
                sent = self._write_through_conflicts(write)
            except OperatorStopping:
                raise
            except Exception as exc:
                rest = [w.label for w in writes[index + 1 :]]
                if namespace_terminating(exc):
                    terminating()
                    raise NamespaceTerminatedMidway(
                        f"namespace {write.body['metadata'].get('namespace', '')} is being deleted: it "
                        f"began after this pass's dry run, so {write.label} and what follows cannot be "
                        f"put back (written {_listed(written)}; not written {_listed(rest)}); the rest "
                        "of the data plane goes with the namespace"
                    ) from exc
                raise PartlyApplied(
                    f"partly applied: written {_listed(written)}; refused {write.label} "
                    f"({refusal_text(exc)}); not written {_listed(rest)}"
                ) from exc
            if sent:
                written.append(write.label)
        return written

    def _dry_run_all(
        self,
        objects: Sequence[tuple[Mapping[str, Any], tuple[str, ...]]],
        abandon: Callable[[], bool] = lambda: False,
        terminating: Callable[[], None] = lambda: None,
    ) -> list[Write]:
        """Steps 1 and 2 of :meth:`apply_all` (the body of :meth:`dry_run_all`): the writes planned,
        every one dry-run; :class:`NothingApplied` (or :class:`NamespaceTerminating`) when refused.
        ``terminating`` is called at the first ``NamespaceTerminating`` refusal, in this thread."""
        try:
            writes: list[Write] = []
            for desired, initial in objects:
                _abandon_if(abandon)  # each plan reads the object
                write = self._resending(self._plan, desired, initial)
                if write:
                    writes.append(write)
        except (OperatorStopping, PassAbandoned):
            raise
        except Exception as exc:  # a read failed, or an object is someone else's: nothing written yet
            raise NothingApplied(f"nothing of this pass was applied: {refusal_text(exc)}") from exc
        refused: list[str] = []
        terminated = 0
        for write in writes:
            _abandon_if(abandon)
            if self._dry_run_skipped(write, writes):
                continue
            try:
                self._resending(self._send, write, dry_run=True)
            except OperatorStopping:
                raise
            except Exception as exc:  # every refusal is collected, so one pass reports them all
                refused.append(f"{write.label} ({refusal_text(exc)})")
                if namespace_terminating(exc):
                    if not terminated:
                        terminating()
                    terminated += 1
        if refused and terminated == len(refused):
            namespace = writes[0].body["metadata"].get("namespace", "")
            raise NamespaceTerminating(
                f"namespace {namespace} is being deleted: the API server creates nothing new in it, so "
                f"{_listed([label.partition(' (')[0] for label in refused])} cannot be put back; nothing "
                "of this pass was applied, and the rest of the data plane goes with the namespace"
            )
        if refused:
            raise NothingApplied(
                "nothing of this pass was applied: the API server refused in a server-side dry run: "
                + "; ".join(refused)
            )
        return writes

    def _write_through_conflicts(self, write: Write) -> bool:
        """Send ``write`` for real; on 409 Conflict read the object again, plan the write anew and send
        that (up to :data:`CONFLICT_ATTEMPTS` times in all); ``False`` when the object turned out to
        be in place already.

        A replace carries the resourceVersion read when the pass began, and the objects the pass
        replaces have other writers: the Deployment controller writes the Deployment's status all
        through a rollout, the load balancer controller adds its finalizer to the Service, an
        autoscaler sets the replicas. One such write between the read and this one made the whole pass
        ``PartlyApplied`` (the ConfigMap new, the Deployment old), a Warning Event and a
        GatewayProgrammed flap until the next resync, where controllers simply write again. The plan
        again checks ownership, so an object someone else took meanwhile is still never replaced."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import ConflictError

        attempt = 1
        while True:
            try:
                self._resending(self._send, write, dry_run=False)
                return True
            except ConflictError:
                if attempt >= CONFLICT_ATTEMPTS:
                    raise
            attempt += 1
            again = self._resending(self._plan, write.desired, write.initial_only)
            if again is None:
                return False
            write = again

    @staticmethod
    def _dry_run_skipped(write: Write, writes: Sequence[Write]) -> bool:
        """Whether ``write``'s dry run would be refused only because an earlier write of the same pass
        is not stored yet: a RoleBinding to a Role this pass creates. The API server checks that whoever
        binds a Role holds its permissions, reading the Role; absent, the binding is refused 403 unless
        the operator may ``bind`` (it may not: its RBAC holds only what it uses). The Role's own dry run
        still checks that the operator may grant what it holds."""
        if write.body["kind"] != "RoleBinding" or write.verb != "create":
            return False
        role = (write.body.get("roleRef") or {}).get("name")
        namespace = write.body["metadata"]["namespace"]
        return any(
            other.verb == "create"
            and other.body["kind"] == "Role"
            and other.body["metadata"]["name"] == role
            and other.body["metadata"]["namespace"] == namespace
            for other in writes
        )

    def _plan(self, desired: Mapping[str, Any], initial_only: tuple[str, ...] = ()) -> Write | None:
        """The write that puts ``desired`` in place, or ``None`` when it is in place already; raises
        :class:`NotOwnedError` for an object of that name the operator may not replace."""
        body = json.loads(json.dumps(desired))
        meta = body["metadata"]
        compared = desired
        if initial_only:
            compared = {
                **desired,
                "spec": {k: v for k, v in desired["spec"].items() if k not in initial_only},
            }
        digest = desired_hash(compared)
        meta.setdefault("annotations", {})[APPLIED_HASH] = digest
        wanted = json.loads(json.dumps(body))
        for field in initial_only:
            wanted["spec"].pop(field, None)
        key = (body["apiVersion"], body["kind"], meta["namespace"], meta["name"])
        current = self._get(body["apiVersion"], body["kind"], meta["namespace"], meta["name"])
        if current is None:
            return Write("create", body, wanted, desired, initial_only)
        owner = _controller_uid(body)
        if owner is not None and _controller_uid(current) != owner:
            leaving = current.get("metadata") or {}
            if leaving.get("deletionTimestamp"):
                # The config deleted and made again under its name (``kubectl replace --force``, a
                # GitOps re-create): its Service waits for the load balancer controller's finalizer
                # while the NLB goes. The message told the user to rename or delete it.
                waiting = ", ".join(leaving.get("finalizers") or []) or "the garbage collector"
                raise NotOwnedError(
                    f"{body['kind']} {meta['namespace']}/{meta['name']} of {_holder(current)} is being "
                    f"deleted (waiting for {waiting}); it is made for this object once it is gone"
                )
            if not _adoptable(current, body):
                # Two objects whose names give the same data-plane name (a 253-character name
                # shortened with its digest, say), or someone else's object of that name: replacing
                # it made two configs rewrite each other's data plane on every pass.
                raise NotOwnedError(
                    f"{body['kind']} {meta['namespace']}/{meta['name']} already exists and is controlled "
                    f"by {_holder(current)}, not by this object; rename one of them or delete that "
                    f"{body['kind']}"
                )
            if not self._owner_alive(body):
                # A pass still running for an object deleted with --cascade=orphan met its own
                # orphans: adopting them for the gone uid would hand them to the garbage collector.
                raise NotOwnedError(
                    f"{body['kind']} {meta['namespace']}/{meta['name']} is an orphan of this data plane, "
                    "and the object that would adopt it is gone or being deleted"
                )
        if ((current.get("metadata") or {}).get("annotations") or {}).get(APPLIED_HASH) == digest:
            view = managed_view(current, wanted)
            if view == wanted or self._stored.get(key) == desired_hash(view):
                return None
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        # A replace sets the finalizers it sends; the operator sets none, so any there are another
        # controller's (the AWS Load Balancer Controller's on the Service, which deletes the NLB
        # before the Service goes): kept, or deleting the Service would leave the NLB behind.
        finalizers = (current.get("metadata") or {}).get("finalizers")
        if finalizers and "finalizers" not in meta:
            meta["finalizers"] = list(finalizers)
        kept = (*_KEPT_SERVICE_FIELDS, *initial_only) if body["kind"] == "Service" else initial_only
        for field in kept:
            if field in (current.get("spec") or {}):
                body["spec"][field] = current["spec"][field]
        return Write("replace", body, wanted, desired, initial_only)

    def _send(self, write: Write, *, dry_run: bool) -> None:
        """Send ``write``; a dry run (``?dryRun=All``) is validated and admitted, never stored.

        The replace carries the resourceVersion read by :meth:`_plan`, so the real write after a dry
        run is refused (409) rather than overwriting a change made in between."""
        body, meta = write.body, write.body["metadata"]
        resource = self._resource(body["apiVersion"], body["kind"])
        options = {"field_manager": FIELD_MANAGER, **({"dry_run": "All"} if dry_run else {})}
        if write.verb == "create":
            stored = resource.create(body=body, namespace=meta["namespace"], **options)
        else:
            stored = resource.replace(body=body, name=meta["name"], namespace=meta["namespace"], **options)
        if not dry_run:
            self._remember(write.key, stored, write.wanted)

    def _owner_alive(self, desired: Mapping[str, Any]) -> bool:
        """Whether the controller ``desired`` names exists with that uid and is not being deleted."""
        ref = next(r for r in desired["metadata"]["ownerReferences"] if r.get("controller"))
        owner = self._get(
            str(ref["apiVersion"]), str(ref["kind"]), desired["metadata"]["namespace"], ref["name"]
        )
        meta = (owner or {}).get("metadata") or {}
        return meta.get("uid") == ref.get("uid") and not meta.get("deletionTimestamp")

    def _delete_controlled(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        labels: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete the object when it exists and its controller is the object ``uid``, or when it is an
        orphan of that object's data plane (:func:`_adoptable` with the data plane's ``labels``); ``True``
        when it was deleted. Someone else's object of that name is left alone.

        An orphan counts: ``kubectl delete --cascade=orphan`` of a config with autoscaling, applied
        again without it, left the old HorizontalPodAutoscaler resizing the Deployment the config
        adopted back, against the replicas its spec sets, on every pass."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import NotFoundError

        current = self._get(api_version, kind, namespace, name)
        if current is None:
            return False
        orphan = labels is not None and _adoptable(current, {"metadata": {"labels": dict(labels)}})
        if _controller_uid(current) != uid and not orphan:
            return False
        try:
            self._resource(api_version, kind).delete(name=name, namespace=namespace)
        except NotFoundError:
            return False
        self._stored.pop((api_version, kind, namespace, name), None)
        return True

    def _delete_if(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        check: Callable[[Mapping[str, Any]], bool],
    ) -> bool:
        """Delete the object when it exists and ``check`` accepts it; ``True`` when it was deleted.
        The delete carries the uid read, so an object deleted and made anew in between is left alone."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import NotFoundError

        current = self._get(api_version, kind, namespace, name)
        if current is None or not check(current):
            return False
        preconditions = {"uid": current["metadata"]["uid"]}
        try:
            self._resource(api_version, kind).delete(
                name=name, namespace=namespace, body={"preconditions": preconditions}
            )
        except NotFoundError:
            return False
        return True

    def _remember(self, key: tuple[str, str, str, str], written: Any, wanted: Mapping[str, Any]) -> None:
        stored = written.to_dict() if hasattr(written, "to_dict") else written
        if isinstance(stored, Mapping):
            self._stored[key] = desired_hash(managed_view(stored, wanted))

    def _write_status(
        self, obj: Mapping[str, Any], status: Mapping[str, Any], api_version: str, kind: str
    ) -> bool:
        """The body of :meth:`write_status`."""
        change = {"op": "add", "path": "/status", "value": merged_status(obj.get("status"), status)}
        return self._patch_same_object(obj, change, api_version, kind, status=True)

    def _annotate(
        self, obj: Mapping[str, Any], key: str, value: str | None, api_version: str, kind: str
    ) -> bool:
        """The body of :meth:`annotate`."""
        change: dict[str, Any]
        pointer = key.replace("~", "~0").replace("/", "~1")
        if value is None:
            change = {"op": "remove", "path": f"/metadata/annotations/{pointer}"}
        elif obj["metadata"].get("annotations"):
            change = {"op": "add", "path": f"/metadata/annotations/{pointer}", "value": value}
        else:
            change = {"op": "add", "path": "/metadata/annotations", "value": {key: value}}
        return self._patch_same_object(obj, change, api_version, kind, status=False)

    def _patch_same_object(
        self, obj: Mapping[str, Any], change: Mapping[str, Any], api_version: str, kind: str, *, status: bool
    ) -> bool:
        """Apply ``change`` (one JSON-patch operation; to the status subresource when ``status``) to
        ``obj`` only if the object stored under its name is still the same one (a ``test`` of its
        uid first): False when it is gone or was made anew meanwhile; a refusal of the change itself
        is raised."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import NotFoundError, UnprocessibleEntityError

        meta = obj["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], str(meta.get("uid") or "")
        if not uid:
            raise ValueError(f"{kind} {namespace}/{name}: no metadata.uid to make the write conditional on")
        body = [{"op": "test", "path": "/metadata/uid", "value": uid}, change]
        resource = self._resource(api_version, kind)
        try:
            (resource.status if status else resource).patch(
                body=body,
                name=name,
                namespace=namespace,
                content_type="application/json-patch+json",
                field_manager=FIELD_MANAGER,
            )
        except NotFoundError:
            return False
        except UnprocessibleEntityError:  # the uid test failed (made anew), or the change was refused
            now = self._get(api_version, kind, namespace, name)
            if now is None or (now.get("metadata") or {}).get("uid") != uid:
                return False
            raise
        return True

    def _event(self, involved: Mapping[str, Any], *, reason: str, message: str, warning: bool) -> None:
        meta = involved["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", IGWC_API_VERSION),
                "kind": involved.get("kind", KIND),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "igw-operator", "host": self._reporting_instance},
            "reportingComponent": "igw-operator",
            "reportingInstance": self._reporting_instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._resource("v1", "Event").create(
            body=event, namespace=meta["namespace"], field_manager=FIELD_MANAGER
        )

    def _check_fence(self) -> None:
        if self._fence is not None and not self._fence():
            raise NotLeading("not leading (the Lease was not renewed in time): no more API calls")

    def _counted(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``call`` in this worker thread, counted while it runs (:meth:`quiesce`)."""
        with self._calls:
            if self._quiesced:
                raise OperatorStopping("the operator is stopping: no more API calls")
            self._check_fence()
            self._running += 1
        try:
            return call(*args, **kwargs)
        finally:
            with self._calls:
                self._running -= 1
                self._calls.notify_all()

    async def _in_thread(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``call`` in a worker thread, waiting out the API server's ``Retry-After`` first.

        A 429 (or a 503 carrying ``Retry-After``) is the API server's priority and fairness shedding
        load before it reads or writes anything, so the call is sent again once the wait is over (up
        to :data:`THROTTLED_ATTEMPTS` tries), and every other call of this client waits too. Without
        this only reads and replaces were retried (by urllib3, blocking a worker thread each); a
        refused PATCH or POST failed its pass, and every pass and resync sent its calls into the
        refusals (one ERROR line per config per resync) until the API server recovered."""
        for attempt in range(1, THROTTLED_ATTEMPTS + 1):
            held = self._held_until - self._monotonic()
            if held > 0:
                await asyncio.sleep(held)
            try:
                return await self._run_in_pool(call, *args, **kwargs)
            except Exception as exc:
                wait = _retry_after(exc)
                if wait is None:
                    raise
                self._held_until = max(self._held_until, self._monotonic() + wait)
                if attempt == THROTTLED_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _run_in_pool(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call``, counted (:meth:`_counted`), in this client's pool; with the caller's context
        variables, as ``asyncio.to_thread`` runs it."""
        context = contextvars.copy_context()
        bound = functools.partial(context.run, self._counted, call, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, bound)

    def close(self) -> None:
        """End the pool's idle threads (a running call finishes first: :meth:`quiesce` waits for
        those). Left running, they outlived the operator until the interpreter exited."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def outside(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call to an API outside the cluster that a pass makes (ACM's, for an
        auto-issued certificate) in a worker thread, counted and refused after :meth:`quiesce` as the
        Kubernetes calls are. Uncounted, a stopping leader gave its Lease up while an ACM import of
        its cancelled pass still ran, and the next leader, finding no certificate yet, imported a
        second one that no status named and nothing ever deleted."""
        return await self._in_thread(call, *args, **kwargs)

    def quiesce(self, timeout_s: float) -> bool:
        """Refuse every API call from now on and wait up to ``timeout_s`` for those running to end;
        ``True`` when none runs any more.

        A pass cancelled while the operator stops leaves its blocking call running in its worker
        thread (cancelling the awaiting task does not stop the thread): the runner waits for that
        before it gives the Lease up, so no write of this replica lands after another one leads."""
        with self._calls:
            self._quiesced = True
            self._calls.notify_all()  # a pass waiting out a Retry-After (_resending) stops waiting
            return self._calls.wait_for(lambda: self._running == 0, timeout_s)

    # ---- async surface ------------------------------------------------------------------------------
    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._in_thread(self._get, api_version, kind, namespace, name)

    async def list(
        self, api_version: str, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        return await self._in_thread(self._list, api_version, kind, namespace, label_selector)

    async def delete_controlled(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str,
        labels: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete ``kind`` ``namespace/name`` if the object ``uid`` controls it, or it is an orphan of
        the data plane labelled ``labels`` (``_delete_controlled``)."""
        return await self._in_thread(self._delete_controlled, api_version, kind, namespace, name, uid, labels)

    async def delete_if(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        check: Callable[[Mapping[str, Any]], bool],
    ) -> bool:
        """Delete ``kind`` ``namespace/name`` if it exists and ``check`` accepts it (``_delete_if``)."""
        return await self._in_thread(self._delete_if, api_version, kind, namespace, name, check)

    async def apply(self, desired: Mapping[str, Any], *, initial_only: tuple[str, ...] = ()) -> bool:
        return await self._in_thread(self._apply, desired, initial_only)

    async def apply_all(
        self,
        objects: Sequence[tuple[Mapping[str, Any], tuple[str, ...]]],
        *,
        abandon: Callable[[], bool] = lambda: False,
        terminating: Callable[[], None] = lambda: None,
    ) -> tuple[str, ...]:
        """Put every ``(desired, initial_only)`` in place, in order, all or nothing as far as the API
        allows; the labels (``Kind ns/name``) of the objects written (unchanged ones are not).

        Kubernetes has no transaction over several objects, and writing them one by one let a refusal
        of a later one (a Service or Deployment the API server rejects: validation, a quota, an
        admission webhook) leave the earlier ones written: the served ConfigMap first, which the
        running gateway pods hot-reload, so they served the new configuration while the status said
        ``ApplyFailed``. So the pass goes in three steps:

        1. every object is read and its write prepared; an object of that name the operator may not
           replace (:class:`NotOwnedError`) or a failed read ends the pass before anything is sent;
        2. every write is sent as a server-side dry run (``?dryRun=All``), which the API server puts
           through defaulting, validation, quota and admission (webhooks included: admissionregistration
           v1 only has webhooks without side effects on dry runs) without storing anything; any
           refusal, all of them listed, ends the pass with :class:`NothingApplied`;
        3. only then is each written for real, in order, a replace carrying the resourceVersion read in
           step 1. What can still fail here is what changed since the dry run (someone's write: 409; a
           quota another object used up; a webhook that answers differently); that raises
           :class:`PartlyApplied` naming what was written, what was refused and what was not written.

        Step 3 does not roll the written objects back: a rollback is more writes that can fail in
        turn, makes the gateways hot-reload twice, and the pass is level-triggered - the next one
        (at the latest at the resync) dry-runs and writes again. The one write whose dry run is
        skipped is a RoleBinding to a Role created in the same pass (:meth:`_dry_run_skipped`).

        ``abandon`` is asked before each request (each object's read for its plan too): true (the
        object the pass is for, or its namespace, is being deleted), nothing more is sent and
        :class:`PassAbandoned` is raised. ``terminating`` is called in the worker thread at the pass's
        first refusal because the namespace is being deleted (403 ``NamespaceTerminating``), as it
        comes, not when the pass ends: passes of other objects there, running in other worker threads,
        can then stop before their next request (through their ``abandon``)."""
        return tuple(await self._in_thread(self._apply_all, objects, abandon, terminating))

    async def dry_run_all(self, objects: Sequence[tuple[Mapping[str, Any], tuple[str, ...]]]) -> None:
        """Steps 1 and 2 of :meth:`apply_all` alone: read, plan and dry-run every object, writing
        nothing; raises as :meth:`apply_all` would before its first write (:class:`NothingApplied`).
        For a write that must precede the apply only when the apply can go through (the last-admitted
        annotation: written ahead of a spec the API server refuses whole, it was written back again
        on every pass)."""
        await self._in_thread(self._dry_run_all, objects)

    async def write_status(
        self,
        obj: Mapping[str, Any],
        status: Mapping[str, Any],
        *,
        api_version: str = IGWC_API_VERSION,
        kind: str = KIND,
    ) -> bool:
        """Write ``status`` (a merge patch onto the status ``obj`` was read with) to the status of
        ``obj`` (an InferenceGatewayConfig unless told otherwise) if it is still that object, not one
        deleted and made anew under its name; ``False`` (nothing written) when it is gone or another.

        A plain merge patch of ``/status`` is not conditional on anything: a pass still running while
        its object was deleted and created again wrote the old object's status onto the new one (its
        conditions, ``observedGeneration``, models, even ``status.tls`` naming the old object's ACM
        import). A ``metadata.uid`` in the merge patch does not help on a custom resource: the API
        server's status strategy copies the stored object and keeps only the patched ``status``, so
        the uid sent is dropped. So the write is a JSON patch whose first op tests ``/metadata/uid``,
        applied atomically against the stored object (422 when it differs), and whose second sets the
        status that the merge patch would have given: the operator is the status's only writer, and
        passes over one object never overlap."""
        return await self._in_thread(self._write_status, obj, status, api_version, kind)

    async def annotate(
        self,
        obj: Mapping[str, Any],
        key: str,
        value: str | None,
        *,
        api_version: str = IGWC_API_VERSION,
        kind: str = KIND,
    ) -> bool:
        """Set the annotation ``key`` of ``obj`` (an InferenceGatewayConfig unless told otherwise) to
        ``value`` (``None``: remove it, which the object must have) if it is still that object (a JSON
        patch testing ``/metadata/uid``, as :meth:`write_status`); ``False`` when it is gone or made anew."""
        return await self._in_thread(self._annotate, obj, key, value, api_version, kind)

    async def event(self, involved: Mapping[str, Any], *, reason: str, message: str, warning: bool) -> None:
        await self._in_thread(self._event, involved, reason=reason, message=message, warning=warning)
