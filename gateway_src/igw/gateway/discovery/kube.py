"""In-cluster discovery through the Kubernetes API (the real ``kubernetes`` client).

Per scheduler, a list+watch of Pods matching its ``modelSelector`` (the selector is sent to the API
server, not applied client-side); an endpoint is ``podIP:targetPort`` (``[podIP]:targetPort`` for an
IPv6 pod, :func:`~igw.gateway.endpoints.endpoint_key`) of a pod that is Running,
Ready and not terminating. Another watch follows ConfigMaps labelled
``inference.networking.k8s.io/bbr-managed: "true"`` (data ``baseModel`` and ``adapters``, a YAML
list) and feeds LoRA adapter -> base model mappings to the body-based router.

The ``kubernetes`` client is synchronous, so each watch runs in a daemon thread and hands its
objects to the event loop with ``call_soon_threadsafe``; a change reaches routing as soon as the API
server sends the event, except during a burst of events, when deliveries are coalesced
(:class:`_WatchThread`). A watch that ends or fails is restarted (after a short back-off on errors),
re-listing so nothing is missed; one that stays silent past its ``timeoutSeconds`` (a lost
connection) is given up and restarted the same way (:data:`WATCH_READ_GRACE_S`). A watch ended by
410 Gone (its resourceVersion fell out of the API server's window: routine on a busy cluster) is
no failure: it is re-listed at once and logged at INFO, as client-go's reflector treats it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from igw.config.documents import parse_text
from igw.config.model import SchedulerSpec
from igw.gateway.discovery import DiscoverySink
from igw.gateway.discovery.kube_client import unreachable_reason
from igw.gateway.endpoints import DiscoveredEndpoint, endpoint_key

log = logging.getLogger("igw.gateway.discovery")

BBR_LABEL: Final = "inference.networking.k8s.io/bbr-managed"
WATCH_TIMEOUT_S: Final = 30
"""Seconds the API server keeps one watch open (``timeoutSeconds``); then it is listed again."""
WATCH_READ_GRACE_S: Final = 5.0
"""Seconds past :data:`WATCH_TIMEOUT_S` that a watch may stay silent before the client gives it up.

Why a read deadline at all: the ``kubernetes`` client sets none by default, and the server's
``timeoutSeconds`` ends a watch only when the server can still reach the client. A watch whose
connection was black-holed on the way (the API server's node lost behind the cluster endpoint's load
balancer, a NAT entry dropped) sent nothing and never ended: the thread blocked in a socket read for
good, and the scheduler's pool stopped following its pods - new pods never received traffic, until
the gateway restarted (measured: a pod added after the stall was still unseen 60 s later)."""
CONNECT_TIMEOUT_S: Final = 10.0
"""Seconds to connect to the API server, for a list or a watch."""
LIST_TIMEOUT_S: Final = 60.0
"""Longest silence while reading a list answer."""
RETRY_DELAY_S: Final = 1.0
"""Seconds before a failed list or watch is tried again; doubled for each failure in a row, up to
:data:`MAX_RETRY_DELAY_S` (client-go's reflector backs off the same way, 0.8 s to 30 s)."""
MAX_RETRY_DELAY_S: Final = 30.0
HTTP_GONE: Final = 410
"""A watch's resourceVersion is too old (``Expired``/``Gone``): re-list at once, not a failure."""
REPEAT_LOG_S: Final = 60.0
"""A failure repeating with the same reason is logged as an ERROR again only this often. Before, an
RBAC 403 was logged every second for each watch, without the API server's message that names the
missing permission, and the list was retried every second for as long as the Role was missing."""
MAX_STATUS_MESSAGE: Final = 500
"""Most characters of an API server's ``Status`` message quoted in a log line."""


def pod_endpoint(pod: Any, *, target_port: int) -> DiscoveredEndpoint | None:
    """The endpoint of a typed ``V1Pod``, or ``None`` if it must not receive traffic."""
    meta, status = pod.metadata, pod.status
    if meta is None or status is None or meta.deletion_timestamp is not None:
        return None
    if status.phase != "Running" or not status.pod_ip:
        return None
    ready = any(c.type == "Ready" and c.status == "True" for c in (status.conditions or []))
    if not ready:
        return None
    return DiscoveredEndpoint(
        key=endpoint_key(status.pod_ip, target_port),
        labels=dict(meta.labels or {}),
        pod=f"{meta.namespace}/{meta.name}",
    )


def adapters_from_config_map(cm: Any) -> dict[str, str]:
    """``adapter -> baseModel`` of one bbr-managed ConfigMap; ``ValueError`` naming the bad key."""
    name = f"{cm.metadata.namespace}/{cm.metadata.name}"
    data = cm.data or {}
    base = data.get("baseModel")
    if not isinstance(base, str) or not base.strip():
        raise ValueError(f"ConfigMap {name}: data.baseModel is missing or empty")
    documents = parse_text(data.get("adapters") or "[]", source=f"ConfigMap {name}: data.adapters")
    adapters = documents[0].content if len(documents) == 1 else None
    if not isinstance(adapters, list) or not all(isinstance(a, str) and a for a in adapters):
        raise ValueError(f"ConfigMap {name}: data.adapters must be a YAML list of adapter names")
    return dict.fromkeys(adapters, base.strip())


DELIVERY_INTERVAL_S: Final = 0.05
"""Least time between two deliveries of one watch's objects to the event loop."""
DELIVERY_SHARE: Final = 0.2
"""Most of the event loop's time a burst of one watch's events may take: after a delivery that took
``t`` seconds the next waits at least ``t * (1 / DELIVERY_SHARE - 1)``."""


class _WatchThread:
    """list+watch of one resource kind in a daemon thread; its objects go to ``on_objects`` on the loop.

    Deliveries are coalesced: each hands over the whole current set of objects, so while one is due
    a newer set replaces the older, and the loop gets the latest. The first delivery after a quiet
    spell is immediate; during a burst of events (a rolling update: several per pod) deliveries are
    at least :data:`DELIVERY_INTERVAL_S` apart, and further apart when the handler is slow, so that
    they take at most :data:`DELIVERY_SHARE` of the loop. Why: the handler walks the scheduler's
    whole pool, and one delivery per event held the loop that serves the requests for most of a
    large pool's rolling update (measured in docs/gateway.md, "Large pools")."""

    def __init__(
        self,
        *,
        name: str,
        list_fn: Callable[..., Any],
        kwargs: Mapping[str, Any],
        on_objects: Callable[[dict[str, Any]], None],
        loop: asyncio.AbstractEventLoop,
        min_interval_s: float = DELIVERY_INTERVAL_S,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        read_grace_s: float = WATCH_READ_GRACE_S,
        retry_delay_s: float = RETRY_DELAY_S,
    ) -> None:
        """``watch_timeout_s``, ``read_grace_s`` and ``retry_delay_s``: see :data:`WATCH_TIMEOUT_S`,
        :data:`WATCH_READ_GRACE_S` and :data:`RETRY_DELAY_S` (tests change them)."""
        self.name = name
        self._retry_delay_s = retry_delay_s
        self._watch_timeout_s = watch_timeout_s
        self._read_grace_s = read_grace_s
        self._list_fn = list_fn
        self._kwargs = dict(kwargs)
        self._on_objects = on_objects
        self._loop = loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"igw-watch-{name}", daemon=True)
        self._watch: Any = None
        self._min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._pending: dict[str, Any] | None = None
        """The latest objects not delivered yet (set by the watch thread, taken by the loop)."""
        self._scheduled = False
        """Whether a delivery is due on the loop (the watch thread schedules one only if not)."""
        self._next_at = -math.inf
        """Loop time before which no delivery starts (set after each delivery)."""
        self._last_failure = ""
        self._last_logged = -math.inf
        """The reason of the last failure logged as an ERROR, and when (``time.monotonic``)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def _publish(self, objects: dict[str, Any]) -> None:
        """The watch thread's side: ``objects`` (copied) are the latest; a delivery is scheduled
        unless one is due already (it will carry these)."""
        snapshot = dict(objects)
        with self._lock:
            self._pending = snapshot
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._deliver_when_due)
        except RuntimeError:  # loop closed during shutdown
            self._stop.set()

    def _deliver_when_due(self) -> None:
        wait = self._next_at - self._loop.time()
        if wait > 0:
            self._loop.call_later(wait, self._deliver)
        else:
            self._deliver()

    def _deliver(self) -> None:
        with self._lock:
            snapshot, self._pending = self._pending, None
            self._scheduled = False
        if snapshot is None:
            return
        started = time.perf_counter()
        try:
            self._on_objects(snapshot)
        finally:
            took = time.perf_counter() - started
            spacing = max(self._min_interval_s, took * (1 / DELIVERY_SHARE - 1))
            self._next_at = self._loop.time() + spacing

    def _run(self) -> None:
        # deferred: start-up cost: the kubernetes client is heavy and only the in-cluster path needs it
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        failures = 0
        # 410s in a row with no event between them: the first re-lists at once, later ones back off
        # (a list whose resourceVersion is already too old for the watch would otherwise loop).
        expired = 0
        while not self._stop.is_set():
            ran = False
            try:
                listed = self._list_fn(**self._kwargs, _request_timeout=(CONNECT_TIMEOUT_S, LIST_TIMEOUT_S))
                objects = {f"{o.metadata.namespace}/{o.metadata.name}": o for o in listed.items}
                self._publish(objects)
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(
                    self._list_fn,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=self._watch_timeout_s,
                    # a read deadline: a silent watch past its timeout is a lost connection
                    _request_timeout=(CONNECT_TIMEOUT_S, self._watch_timeout_s + self._read_grace_s),
                    **self._kwargs,
                ):
                    ran = True
                    expired = 0
                    if self._stop.is_set():
                        return
                    obj = event["object"]
                    if event["type"] == "ERROR" or not hasattr(obj, "metadata"):
                        break  # e.g. 410 Gone: relist
                    key = f"{obj.metadata.namespace}/{obj.metadata.name}"
                    if event["type"] == "DELETED":
                        objects.pop(key, None)
                    else:
                        objects[key] = obj
                    self._publish(objects)
                ran = True  # the watch ran to its timeout: a working list+watch
                expired = 0
            except ApiException as exc:
                if exc.status == HTTP_GONE and not self._stop.is_set():
                    # With ``timeoutSeconds`` set the client raises the watch's 410 ERROR event
                    # instead of retrying it: the list worked, the watch only fell behind. Logged as
                    # a failure and re-listed a second later, the routine end of a watch on a busy
                    # cluster read as an outage and left pod changes unseen for that second.
                    expired += 1
                    if failures:
                        log.info("watch %s works again after %d failed attempt(s)", self.name, failures)
                    failures = 0
                    log.log(
                        logging.INFO if expired == 1 else logging.DEBUG,
                        "watch %s: resourceVersion expired (HTTP 410 %s); listing again",
                        self.name,
                        exc.reason,
                    )
                    if expired > 1:
                        self._stop.wait(min(self._retry_delay_s * 2 ** (expired - 2), MAX_RETRY_DELAY_S))
                    continue
                failures = self._failed(
                    failures, ran, f"HTTP {exc.status} {exc.reason}{_status_message(exc)}"
                )
            except Exception as exc:  # connection errors of every kind: keep watching
                failures = self._failed(failures, ran, f"{type(exc).__name__}: {exc}")
            else:
                if failures:
                    log.info("watch %s works again after %d failed attempt(s)", self.name, failures)
                failures = 0
            if failures:
                self._stop.wait(min(self._retry_delay_s * 2 ** (failures - 1), MAX_RETRY_DELAY_S))

    def _failed(self, failures: int, ran: bool, why: str) -> int:
        """Log a failed list or watch and return the failures in a row (a watch that delivered events
        before failing starts a new row). The first failure of a row is an ERROR, and so is one whose
        reason changed; the same reason again is a DEBUG line, except every :data:`REPEAT_LOG_S`."""
        if self._stop.is_set():
            return 0
        failures = 1 if ran else failures + 1
        now = time.monotonic()
        if failures == 1 or why != self._last_failure or now - self._last_logged >= REPEAT_LOG_S:
            again = "" if failures == 1 else f" ({failures} attempts in a row)"
            log.error("watch %s failed: %s; retrying%s", self.name, why, again)
            self._last_failure, self._last_logged = why, now
        else:
            log.debug("watch %s failed again: %s", self.name, why)
        return failures


def _status_message(exc: Any) -> str:
    """``: <message>`` of the Kubernetes ``Status`` an API error carries (a 403 names the verb, the
    resource and the service account missing the permission), or ``""``."""
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, TypeError, AttributeError):
        return ""
    return f": {message[:MAX_STATUS_MESSAGE]}" if isinstance(message, str) and message else ""


class KubeDiscovery:
    def __init__(
        self,
        *,
        api_client: Any,
        namespace: str,
        schedulers: tuple[SchedulerSpec, ...],
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        read_grace_s: float = WATCH_READ_GRACE_S,
        retry_delay_s: float = RETRY_DELAY_S,
    ) -> None:
        """``watch_timeout_s``, ``read_grace_s``, ``retry_delay_s``: each watch's (:class:`_WatchThread`)."""
        self.api_client = api_client
        self._watch_timeout_s = watch_timeout_s
        self._read_grace_s = read_grace_s
        self._retry_delay_s = retry_delay_s
        self.namespace = namespace
        self.schedulers = schedulers
        self._threads: list[_WatchThread] = []
        self._pod_threads: dict[str, tuple[tuple[str, int], _WatchThread]] = {}
        self._generation: dict[str, int] = {}
        self._sink: DiscoverySink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def describe(self) -> str:
        return f"Kubernetes API, namespace {self.namespace}"

    async def start(self, sink: DiscoverySink) -> None:
        # deferred: start-up cost: the kubernetes client is heavy and only the in-cluster path needs it
        from kubernetes import client

        core = client.CoreV1Api(self.api_client)
        loop = asyncio.get_running_loop()
        self._sink, self._loop = sink, loop
        self.retarget(self.schedulers)
        self._threads.append(
            _WatchThread(
                name="configmaps/bbr-managed",
                list_fn=core.list_namespaced_config_map,
                kwargs={"namespace": self.namespace, "label_selector": f"{BBR_LABEL}=true"},
                on_objects=self._config_maps_handler(sink),
                loop=loop,
                watch_timeout_s=self._watch_timeout_s,
                read_grace_s=self._read_grace_s,
                retry_delay_s=self._retry_delay_s,
            )
        )
        for t in self._threads:
            t.start()

    def retarget(self, schedulers: tuple[SchedulerSpec, ...]) -> None:
        """(Re)start the pod watch of every scheduler whose name, selector or target port changed."""
        # deferred: start-up cost: the kubernetes client is heavy and only the in-cluster path needs it
        from kubernetes import client

        if self._sink is None or self._loop is None:
            self.schedulers = schedulers
            return
        core = client.CoreV1Api(self.api_client)
        wanted = {s.name: ((s.model_selector.to_query(), s.target_port), s) for s in schedulers}
        for name, (identity, thread) in list(self._pod_threads.items()):
            if name not in wanted or wanted[name][0] != identity:
                thread.stop()
                del self._pod_threads[name]
                self._generation[name] = self._generation.get(name, 0) + 1
        for name, (identity, spec) in wanted.items():
            if name in self._pod_threads:
                continue
            handler = self._pods_handler(self._sink, spec)
            generation = self._generation[name] = self._generation.get(name, 0) + 1

            def current_only(
                pods: dict[str, Any], name: str = name, generation: int = generation, handler: Any = handler
            ) -> None:
                # A stopped watch may still have a snapshot queued on the loop: drop it.
                if self._generation.get(name) == generation:
                    handler(pods)

            thread = _WatchThread(
                name=f"pods/{name}",
                list_fn=core.list_namespaced_pod,
                kwargs={"namespace": self.namespace, "label_selector": identity[0]},
                on_objects=current_only,
                loop=self._loop,
                watch_timeout_s=self._watch_timeout_s,
                read_grace_s=self._read_grace_s,
                retry_delay_s=self._retry_delay_s,
            )
            self._pod_threads[name] = (identity, thread)
            thread.start()
        self.schedulers = schedulers

    @staticmethod
    def _pods_handler(sink: DiscoverySink, spec: SchedulerSpec) -> Callable[[dict[str, Any]], None]:
        # What each pod object was found to be at the previous delivery. The watch keeps a pod's
        # object until an event replaces it, so an object seen before is evaluated already; every
        # delivery carries the whole pool, and evaluating each pod again was most of its cost.
        seen: dict[str, tuple[Any, DiscoveredEndpoint | None]] = {}

        def apply(pods: dict[str, Any]) -> None:
            found = []
            known: dict[str, tuple[Any, DiscoveredEndpoint | None]] = {}
            for name, pod in pods.items():
                kept = seen.get(name)
                if kept is not None and kept[0] is pod:
                    ep = kept[1]
                # The selector went to the API server; re-check in case a watch event carries a pod
                # that stopped matching (a real server sends DELETED for that, some do not).
                elif spec.model_selector.matches(pod.metadata.labels or {}):
                    ep = pod_endpoint(pod, target_port=spec.target_port)
                else:
                    ep = None
                known[name] = (pod, ep)
                if ep is not None:
                    found.append(ep)
            seen.clear()
            seen.update(known)
            sink.apply_endpoints(spec.name, sorted(found, key=lambda e: e.key))

        return apply

    @staticmethod
    def _config_maps_handler(sink: DiscoverySink) -> Callable[[dict[str, Any]], None]:
        reported: set[str] = set()

        def apply(config_maps: dict[str, Any]) -> None:
            adapters: dict[str, str] = {}
            for key in sorted(config_maps):
                try:
                    adapters.update(adapters_from_config_map(config_maps[key]))
                except ValueError as exc:
                    if str(exc) not in reported:
                        reported.add(str(exc))
                        log.error("%s; its adapters are not routed", exc)
            sink.apply_bbr_adapters(adapters)

        return apply

    async def stop(self) -> None:
        for t in self._threads:
            t.stop()
        for _, t in self._pod_threads.values():
            t.stop()
        self._threads.clear()
        self._pod_threads.clear()


def read_picker_config(api_client: Any, *, namespace: str, name: str, key: str) -> Mapping[str, Any]:
    """The EndpointPickerConfig in ConfigMap ``name`` under ``key`` (``configMapRef``)."""
    # deferred: start-up cost: the kubernetes client is heavy and only the in-cluster path needs it
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        cm = client.CoreV1Api(api_client).read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        raise ValueError(f"configMapRef {namespace}/{name}: HTTP {exc.status} {exc.reason}") from exc
    except (HTTPError, OSError) as exc:  # no answer at all: a traceback at start before session s42
        raise ValueError(
            f"configMapRef {namespace}/{name}: cannot reach the API server: {unreachable_reason(exc)}"
        ) from exc
    text = (cm.data or {}).get(key)
    if text is None:
        raise ValueError(f"configMapRef {namespace}/{name}: no key {key!r} in data")
    documents = parse_text(text, source=f"configMapRef {namespace}/{name} key {key}")
    doc = documents[0].content if len(documents) == 1 else None
    if not isinstance(doc, Mapping):
        raise ValueError(f"configMapRef {namespace}/{name}: {key} is not a YAML mapping")
    return doc
