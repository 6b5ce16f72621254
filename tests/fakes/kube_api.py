"""Fake Kubernetes API server: the project's ONE seam for the Kubernetes API.

No kube-apiserver can run here, so tests start this aiohttp server on 127.0.0.1 (ephemeral port)
and point the REAL ``kubernetes`` client at it over HTTP. It serves:

* core/v1 pods, services, configmaps, secrets, serviceaccounts, namespaces, nodes; apps/v1
  deployments, statefulsets (a Deployment's ``spec.replicas`` defaulted to 1, as the API server
  does); policy/v1 poddisruptionbudgets; autoscaling/v2 horizontalpodautoscalers;
  networking.k8s.io/v1 networkpolicies, ingresses; apiextensions.k8s.io/v1 customresourcedefinitions.
  A custom kind, ``inference.sagemaker.aws.amazon.com/v1alpha1`` inferencegatewayconfigs and the
  add-ons' ``cert-manager.io/v1`` certificates and ``elbv2.k8s.aws/v1beta1`` ingressclassparams
  included (:meth:`FakeKubeApiServer.install_cert_manager`,
  :meth:`FakeKubeApiServer.install_load_balancer_controller`), is served only once its CRD is
  created (404 before, as on a cluster; then the CRD gets its ``NamesAccepted``/``Established``
  conditions in a MODIFIED event, as the apiextensions controllers write them) and no more once
  the CRD is deleted (its objects deleted with it, and the watches open on the kind ended after
  their DELETED events, as its storage goes); :meth:`FakeKubeApiServer.register_kind`
  registers one without a CRD. A CRD itself is validated as apiextensions-apiserver validates it
  (names, versions, structural schema, defaults, CEL rules that do not compile...) and a malformed
  one is refused whole with 422 ``Invalid``, nothing registered (:mod:`tests.fakes.kube_crd_validation`,
  where what is not modelled is listed).
* list (namespaced and all-namespaces) honouring ``labelSelector`` (equality, set-based, existence),
  ``fieldSelector`` (``path=value``/``!=`` on dotted paths) and ``limit``/``continue`` paging; get;
  create (POST); replace (PUT); patch (merge, strategic merge by the built-in types' patch strategies -
  :mod:`tests.fakes.kube_strategic_merge`, JSON patch, and
  server-side apply with ``fieldManager`` required: ``metadata.managedFields`` kept for every write,
  409 ``Conflict`` for an apply over another manager's field unless ``force=true``, fields an
  applier stops setting removed, 201 for an apply that creates: :mod:`tests.fakes.kube_field_managers`,
  where what is not modelled is listed), the object the update
  carries checked against the URL's name and namespace (400), a create's or update's ``apiVersion``
  and ``kind`` against the URL's resource (:mod:`tests.fakes.kube_type_meta`; absent: the URL's,
  but an apply patch must name its ``apiVersion``),
  ``metadata.generation`` kept only for the kinds that have one
  (:attr:`tests.fakes.kube_store.ResourceKind.generation`), a write that changes nothing
  storing nothing (same resourceVersion, no watch event: ``kubectl patch`` prints ``(no change)``);
  delete; ``/status`` subresources (of the built-in kinds that have a status, and of CRDs declaring
  one: a create over HTTP starts without the status sent, an update of the object keeps the stored
  one - :data:`tests.fakes.kube_store.BUILTIN_KINDS`); JSON patch operations refused (422) below a
  missing parent;
  ``/scale`` of Deployments and StatefulSets (what ``kubectl scale`` and an HPA write the count
  through); ``/version/``.
* custom resources admitted as apiextensions admits them, on every create, replace, patch and
  apply of the object and of its ``/status``, for any kind whose CRD the fake was given: unknown
  fields pruned (``fieldValidation``: ``Strict`` refuses them with 400, ``Warn`` - the default -
  answers ``Warning`` headers, ``Ignore`` drops them silently), ``default`` s filled in, the OpenAPI
  schema validated and the CRD's ``x-kubernetes-validations`` CEL rules evaluated (transition rules
  on update); a violation refuses the whole write with 422 ``Invalid`` and a Status whose
  ``details.causes`` name each field (:mod:`tests.fakes.kube_admission`, where what is not modelled
  is listed). Built-in kinds get the metadata rules only (:mod:`tests.fakes.kube_validation`).
  Writing a CRD again registers its new generation.
* WATCH (``?watch=true``) for every kind: newline-delimited ``{"type": ADDED|MODIFIED|DELETED,
  "object": …}`` events, each object carrying its ``metadata.resourceVersion``. Without a
  resourceVersion (or "0") the stream starts with synthetic ADDED events for the current state;
  with one it replays later events; after :meth:`KubeStore.compact` an old version gets an
  ``ERROR`` event with a 410 Status (so relist logic can be tested; :meth:`FakeKubeApiServer.expire_watches`
  also ends every open watch, so running clients resume, get 410 and must re-list;
  :meth:`FakeKubeApiServer.gone_open_watches` ends every open watch with that ``ERROR`` event, as the
  API server's watch cache does when a watcher's resourceVersion falls out of its window).
  ``timeoutSeconds`` is honoured.
  With a label/field selector, a modification that makes an object start (stop) matching arrives as
  ADDED (DELETED), as the API server's watch cache does.
* what controllers and ``kubectl`` need beyond CRUD: legacy discovery (``/api/v1``, ``/apis``,
  ``/apis/<group>/<version>`` with short names and ``<plural>/status``), OpenAPI v3 documents just
  complete enough for ``kubectl`` to leave field validation to the server, ``meta.k8s.io/v1``
  ``Table`` answers (CRD printer columns) for ``kubectl get``, ``BOOKMARK`` events on idle watches
  that set ``allowWatchBookmarks``, ``coordination.k8s.io`` Leases, core Events, RBAC objects,
  owner-reference garbage collection (done at once, transitive; ``propagationPolicy: Orphan`` keeps
  the dependents and drops their owner reference; ``Foreground`` keeps the owner, marked with the
  ``foregroundDeletion`` finalizer, until its ``blockOwnerDeletion`` dependents are gone; an object
  written with owner references whose uids are gone is collected, or loses the dangling ones:
  :meth:`KubeStore.delete`), and writes to a main
  resource that keep its ``/status`` subresource as stored (optimistic concurrency by
  ``resourceVersion`` on replace: 409 Conflict).
* server-side dry run (``?dryRun=All`` on create, replace, patch, ``/status``, ``/scale`` and
  delete, what ``kubectl --dry-run=server`` and a client's ``dry_run="All"`` send): the write goes
  through defaulting, validation and admission (webhooks included) and is answered with the object as
  it would be stored, but nothing is stored: no resourceVersion consumed, no watch event, no CRD
  registered. Any other value is refused 422 as the API server refuses it.
* namespace lifecycle (:mod:`tests.fakes.kube_namespaces`): a deleted Namespace stays
  ``Terminating`` until :meth:`KubeStore.finalize_namespace`, and creating anything in it meanwhile
  is refused 403 with the ``NamespaceTerminating`` cause.
* failure modes: :meth:`forbid` (403 with the real message shape, for all or some resources),
  :meth:`enforce_rbac` (403 for whatever some Roles and ClusterRoles, e.g. a rendered chart's, do not
  grant: :mod:`tests.fakes.kube_rbac`, and with it the ``OwnerReferencesPermissionEnforcement``
  admission plugin's checks of owner references: :mod:`tests.fakes.kube_owner_refs`),
  :meth:`add_validating_webhook` (a validating admission webhook that denies some writes, answered as
  the API server answers a denial), :attr:`required_token` (401 without it),
  :meth:`throttle` (every request answered 429 TooManyRequests, or 503, with a ``Retry-After``
  header for a while: API Priority and Fairness rejecting an overloaded client),
  :meth:`cut_off` (one client's requests, told apart by their bearer token, dropped unanswered: a
  partition between it and the API server), :meth:`hang` (one client's requests read in full and
  never answered: a black-holed connection or a stuck API server, as a client sees it),
  :meth:`stall_open_watches` (the watches open now go
  silent and never end, ``timeoutSeconds``
  included, while new requests are served: a connection black-holed on the way, e.g. the API
  server's node lost behind the cluster endpoint's load balancer, as a client sees it), and
  :func:`unreachable_url` (nothing listening).

Usage from a sync test (the sync client blocks, so the server runs on its own loop thread)::

    from tests.fakes.kube_api import running_fake_kube
    with running_fake_kube() as kube:
        kube.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
                  "labels": {"app": "m"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        api = kubernetes.client.CoreV1Api(kube.api_client())
        pods = api.list_namespaced_pod("ns", label_selector="app in (m,n)")
        kube.write_kubeconfig(tmp_path / "kubeconfig")       # for code that loads a kubeconfig

Usage from an async test (same loop; call the sync client through ``asyncio.to_thread``)::

    async with FakeKubeApiServer() as kube:
        api = kubernetes.client.CoreV1Api(kube.api_client())
        pods = await asyncio.to_thread(api.list_pod_for_all_namespaces)

``kube.requests`` records ``(method, path, query)`` of every request, for asserting what the code
under test asked for (e.g. that it sent the label selector instead of filtering client-side).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import yaml
from aiohttp import ClientConnectionError, web

from tests.fakes import kube_field_managers as field_managers
from tests.fakes.kube_builtin_schemas import type_error
from tests.fakes.kube_crds import cert_manager_crds, ingress_class_params_crd
from tests.fakes.kube_discovery import (
    SCALABLE,
    group_document,
    group_list,
    resource_list,
    table,
    wants_table,
)
from tests.fakes.kube_field_errors import FieldError, invalid_details, invalid_message, quoted
from tests.fakes.kube_openapi import openapi_group_version, openapi_root
from tests.fakes.kube_openapi_v2 import PROTOBUF, encoded, openapi_v2
from tests.fakes.kube_owner_refs import owner_reference_refusal
from tests.fakes.kube_rbac import Rbac
from tests.fakes.kube_request_info import RequestAttributes, request_attributes
from tests.fakes.kube_selectors import SelectorError, parse_field_selector, parse_label_selector
from tests.fakes.kube_store import (
    BUILTIN_KINDS,
    CRD_KEY,
    FIELD_VALIDATION_DIRECTIVES,
    FieldsRecorder,
    KubeStore,
    ResourceKind,
    StoreError,
    json_patch,
    merge_patch,
)
from tests.fakes.kube_strategic_merge import strategic_merge_patch
from tests.fakes.kube_type_meta import check_apply_patch, check_patched_type_meta, check_type_meta

__all__ = [
    "FakeKubeApiServer",
    "KubeStore",
    "ResourceKind",
    "make_pod",
    "running_fake_kube",
    "unreachable_url",
    "write_kubeconfig",
]

VERSION_INFO: dict[str, str] = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.4-eks-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-08-01T00:00:00Z",
    "goVersion": "go1.24.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_RETURNS_OBJECT_ON_DELETE = {"pods", "services", "serviceaccounts"}


def _status(
    code: int, reason: str, message: str, *, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if not reason:  # an error that is no ``Status`` (``ErrorToAPIStatus``: reason unknown, left out)
        del body["reason"]
    if details:
        body["details"] = dict(details)
    return body


_JSON: Final = "application/json"
_YAML: Final = "application/yaml"
_BODY_TYPES: Final = (_JSON, _YAML)
"""The request bodies the fake decodes: those of a server without protobuf (an aggregated API
server's, apiextensions' for custom resources)."""


def _unsupported_body() -> StoreError:
    """The 415 ``UnsupportedMediaType`` Status kube-apiserver answers a body in a type it has no
    serializer for (``NewUnsupportedMediaTypeError``).

    A real kube-apiserver decodes ``application/vnd.kubernetes.protobuf`` for the built-in kinds, and
    ``kubectl create deployment|namespace|configmap|secret ...`` (typed client-go clients) send it;
    the fake has no protobuf decoder and answers as a server without one does, naming the types it
    takes. client-go retries in JSON only after a 415 to CBOR (KEP-4222), never to protobuf, so
    such a command fails here (``kubectl apply``/``create -f`` send JSON and work). The fake read the
    protobuf as text: 500 for a Deployment, 400 ``malformed request body`` for a Namespace."""
    return StoreError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(_BODY_TYPES),
    )


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _error(exc: StoreError) -> web.Response:
    return _json(_status(exc.code, exc.reason, exc.message, details=exc.details), exc.code)


def _field_validation(query: Mapping[str, str]) -> str:
    """The write's ``fieldValidation`` directive (``Warn`` when absent, as the API server defaults)."""
    directive = query.get("fieldValidation") or "Warn"
    if directive not in FIELD_VALIDATION_DIRECTIVES:
        raise StoreError(
            400,
            "BadRequest",
            f"fieldValidation must be one of {', '.join(FIELD_VALIDATION_DIRECTIVES)}, got {directive!r}",
        )
    return directive


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    """The integer query parameter ``name`` (``default`` when absent or empty). One that is not an
    integer is refused 400 ``BadRequest`` before anything is served, as the API server refuses
    options it cannot decode; the fake raised ``ValueError`` (500, and for a watch a stream already
    started with 200 and cut off)."""
    text = query.get(name)
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise StoreError(400, "BadRequest", f'{name}: Invalid value: "{text}": must be an integer') from None


_DRY_RUN_OPTIONS = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions"}


def _dry_run(method: str, query: Mapping[str, str]) -> bool:
    """Whether the write is a server-side dry run: ``dryRun=All``; any other value is refused as the
    API server's ``ValidateDryRun`` refuses it (422, naming the request's options kind)."""
    value = query.get("dryRun")
    if value is None:
        return False
    if value != "All":
        options = _DRY_RUN_OPTIONS.get(method, "DeleteOptions")
        raise StoreError(
            422,
            "Invalid",
            f'{options}.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{{"{value}"}}: '
            'supported values: "All"',
        )
    return True


WebhookReview = Callable[[str, Mapping[str, Any], Mapping[str, Any] | None], "str | None"]
"""A validating webhook's verdict on ``(operation, object, old object)``: ``None`` allows the write,
a string denies it with that message."""


def _written(body: Any, warnings: list[str], status: int = 200) -> web.Response:
    """A write's answer, with one ``Warning`` header per warning (``kubectl`` prints them)."""
    response = _json(body, status)
    for warning in warnings:
        escaped = warning.replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


def forget_discovery_cache(host: str) -> None:
    """Remove the kubernetes dynamic client's discovery cache of ``host``: a new API server at an
    address has none, but the client keeps its cache in the temporary folder by host and port
    (``osrcp-<md5 of host>.json``, ``kubernetes.dynamic.discovery``) and reads it back without
    asking the server; a fake server started on a port an earlier one (other kinds, another tree's
    fake) used then looked like that one, and a lookup of a subresource the earlier one lacked failed
    with ``KeyError('scale')`` (a CI run, 2026-12-05)."""
    name = f"osrcp-{hashlib.md5(host.encode(), usedforsecurity=False).hexdigest()}.json"
    Path(tempfile.gettempdir(), name).unlink(missing_ok=True)


def _check_patched_types(kind: ResourceKind, content_type: str, patch: Any, updated: Any) -> None:
    """A patch that leaves a built-in object with a field of the wrong JSON type is refused 422 with
    one ``patch`` cause, as the API server's patcher refuses what it cannot decode (``NewInvalid``
    with no kind or name: `` "" is invalid: patch: Invalid value: ...``). The value shown is the
    patched object (JSON and merge patches) or the patch (strategic merge patches) as compact JSON;
    the real server prints the latter as a Go map with the unstructured converter's own wording."""
    problem = type_error(kind.key, updated)
    if problem is None:
        return
    shown = updated if content_type != "application/strategic-merge-patch+json" else patch
    error = FieldError(
        "patch", "FieldValueInvalid", quoted(json.dumps(shown, separators=(",", ":"))), problem
    )
    raise StoreError(
        422, "Invalid", invalid_message("", "", [error]), details=invalid_details("", "", "", [error])
    )


class FakeKubeApiServer:
    """An aiohttp app plus its :class:`KubeStore`; start it on a loop or in a thread."""

    def __init__(self, *, store: KubeStore | None = None) -> None:
        self.store = store or KubeStore()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.callers: list[tuple[str | None, str, str]] = []
        """Per request: ``(bearer token or None, method, path)``, to tell clients apart (one token each)."""
        self._cut_off: set[str] = set()
        """Bearer tokens whose requests get no answer (:meth:`cut_off`)."""
        self._hung: dict[str, Callable[[str, str], bool] | None] = {}
        """Bearer tokens whose requests are held unanswered (:meth:`hang`), each with the test of
        ``(method, path)`` a request must pass to be held (``None``: every request)."""
        self._held: set[asyncio.Event] = set()
        """One per request held unanswered; set when the server stops."""
        self.required_token: str | None = None
        self._forbidden: set[str] | None = set()
        self._forbidden_all = False
        self._rbac: Rbac | None = None
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch_wakeups: set[asyncio.Event] = set()
        self._open_watches: dict[asyncio.Event, tuple[str, dict[str, str]]] = {}
        self._open_watches_lock = threading.Lock()
        self._closing = False
        self._watch_epoch = 0
        self._stall_epoch = 0
        """Watches opened before the last :meth:`stall_open_watches` send nothing more."""
        self._gone_epoch = 0
        """Watches opened before the last :meth:`gone_open_watches` end with a 410 ``ERROR`` event."""
        self.gone_sent = 0
        """How many watches were answered 410 Gone (see :meth:`expire_watches`)."""
        self._thread: threading.Thread | None = None
        self.port = 0
        self._throttle: tuple[float, int, int | None] | None = None
        """``(until, status, retry_after_s)`` while :meth:`throttle` is on (monotonic time)."""
        self.bookmark_interval_s = 1.0
        """How often an idle watch that asked for bookmarks gets a ``BOOKMARK`` event."""
        self.store.on_change = self._notify_threadsafe

    # ---- lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> str:
        self._loop = asyncio.get_running_loop()
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.05)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        forget_discovery_cache(self.url)
        return self.url

    async def stop(self) -> None:
        """Stop serving, and remove the clients' discovery cache of this address: the server it
        describes is gone (each fake's port left an ``osrcp-*.json`` file in the temporary folder,
        about 1,800 after one run of the suite)."""
        self._closing = True
        for wakeup in list(self._watch_wakeups):
            wakeup.set()
        for held in list(self._held):
            held.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.port:
            forget_discovery_cache(self.url)

    async def __aenter__(self) -> FakeKubeApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self) -> FakeKubeApiServer:
        """Run the server on a private event loop in a daemon thread (for the sync client)."""
        started = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # pragma: no cover - surfaced to the caller below
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=serve, name="fake-kube-api", daemon=True)
        self._thread.start()
        started.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop_thread(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None

    # ---- seeding and fault injection -------------------------------------------------------------------
    def add(self, obj: Mapping[str, Any], *, admit_custom: bool = True) -> dict[str, Any]:
        """Create ``obj`` (kind from apiVersion/kind, namespace from metadata, default "default").

        ``admit_custom=False`` skips the CRD's admission: see :meth:`KubeStore.create`."""
        kind = self.store.kind_for(api_version=str(obj["apiVersion"]), kind=str(obj["kind"]))
        namespace = str((obj.get("metadata") or {}).get("namespace") or "default") if kind.namespaced else ""
        created = self.store.create(kind, namespace, obj, admit_custom=admit_custom)
        if kind.plural == "customresourcedefinitions":
            self._register_crd(created)
            return self._establish(created)
        return created

    def add_all(self, objs: Iterable[Mapping[str, Any]]) -> None:
        for obj in objs:
            self.add(obj)

    def install_cert_manager(self) -> None:
        """Install cert-manager's CRDs (Certificate, Issuer, ClusterIssuer): a cluster without them
        answers 404 for ``cert-manager.io`` (:mod:`tests.fakes.kube_crds`)."""
        self.add_all(cert_manager_crds())

    def install_load_balancer_controller(self) -> None:
        """Install the AWS Load Balancer Controller's IngressClassParams CRD (``elbv2.k8s.aws``)."""
        self.add(ingress_class_params_crd())

    def register_kind(self, kind: ResourceKind) -> None:
        self.store.register_kind(kind)

    def open_watches(self) -> list[tuple[str, dict[str, str]]]:
        """``(path, query)`` of every watch being served now (one that ended is gone from the list)."""
        with self._open_watches_lock:
            return list(self._open_watches.values())

    def expire_watches(self) -> None:
        """Compact the history past every client and end all open watches (an API server restart
        after etcd compaction): clients that resume from their resourceVersion get 410 Gone and
        must re-list."""
        self.store.compact(advance=True)
        self._watch_epoch += 1
        self._notify_threadsafe()

    def gone_open_watches(self) -> None:
        """End every open watch mid-stream with an ``ERROR`` event carrying a 410 ``Expired`` Status,
        as the API server does when the resourceVersion a watcher is at is too old for its watch
        cache (history compacted under a slow watcher). Counted in :attr:`gone_sent`."""
        self._gone_epoch += 1
        self._notify_threadsafe()

    def stall_open_watches(self) -> None:
        """The watches open now send nothing more and never end (not at their ``timeoutSeconds``
        either): what a client sees of a connection black-holed on the way. Requests made after
        this, watches included, are served as before."""
        self._stall_epoch += 1
        self._notify_threadsafe()

    def throttle(self, seconds: float, *, status: int = 429, retry_after_s: int | None = 1) -> None:
        """For ``seconds`` from now, answer every request ``status`` (429 TooManyRequests, or 503)
        with ``Retry-After: retry_after_s`` (no such header when ``None``), as the API server's
        priority and fairness filter rejects a client it has no seat for (before anything is read
        or written)."""
        self._throttle = (time.monotonic() + seconds, status, retry_after_s)

    def cut_off(self, token: str) -> None:
        """Requests carrying ``token`` (``Authorization: Bearer <token>``) get no answer: the connection
        is dropped without a response, as a client sees a network partition between it and the API
        server (a reset), while every other client is served. :meth:`reconnect` ends it."""
        self._cut_off.add(token)

    def hang(self, token: str, *, where: Callable[[str, str], bool] | None = None) -> None:
        """Requests carrying ``token`` are read in full and never answered: the connection stays open
        and silent, as a client sees a black-holed connection (a dropped route, a stuck API server)
        that only its own timeout ends. :meth:`reconnect` ends it for new requests; those held
        meanwhile stay silent until the server stops (a stuck connection stays stuck).

        ``where(method, path)``: hold only the requests it accepts, to hang some calls of a process
        that sends all of them with one token (an ``igw operator`` subprocess: its Lease calls
        answered, its passes' calls not)."""
        self._hung[token] = where

    def reconnect(self, token: str) -> None:
        """End :meth:`cut_off` and :meth:`hang` for ``token``."""
        self._cut_off.discard(token)
        self._hung.pop(token, None)

    def _holds(self, token: str, request: web.Request) -> bool:
        """Whether :meth:`hang` holds this request of ``token``."""
        if token not in self._hung:
            return False
        where = self._hung[token]
        return where is None or where(request.method, request.path)

    def forbid(self, *plurals: str) -> None:
        """Answer 403 for these resources (e.g. ``"pods"``), or for everything when none are given."""
        if plurals:
            assert self._forbidden is not None
            self._forbidden.update(plurals)
        else:
            self._forbidden_all = True

    def allow_all(self) -> None:
        self._forbidden = set()
        self._forbidden_all = False
        self._rbac = None

    def enforce_rbac(self, roles: Iterable[Mapping[str, Any]]) -> None:
        """Answer 403, as the API server does, for every request the rules of ``roles`` (Roles and
        ClusterRoles, e.g. a rendered chart's; other kinds are ignored) do not allow
        (:mod:`tests.fakes.kube_rbac`); :meth:`allow_all` ends it."""
        self._rbac = Rbac(roles)

    def add_validating_webhook(
        self, name: str, plurals: Iterable[str], review: WebhookReview, *, code: int = 400
    ) -> list[tuple[str, str, bool]]:
        """A validating admission webhook ``name`` (Gatekeeper, Kyverno, a cloud provider's) matching
        creates and updates of ``plurals``: ``review`` denies a write by returning a message, which
        the API server answers with the webhook's ``code`` (400 when the webhook sets none) and the
        message ``admission webhook "<name>" denied the request: <message>``. Dry runs are reviewed
        too (a webhook with ``sideEffects: None``, the only kind admissionregistration/v1 allows to
        see them). Returns the list of ``(operation, object name, dry run)`` reviewed, for asserting
        what reached admission."""
        matched = set(plurals)
        reviewed: list[tuple[str, str, bool]] = []

        def validate(
            operation: str,
            kind: ResourceKind,
            obj: Mapping[str, Any],
            old: Mapping[str, Any] | None,
            dry_run: bool,
        ) -> None:
            if kind.plural not in matched:
                return
            reviewed.append((operation, str((obj.get("metadata") or {}).get("name")), dry_run))
            denial = review(operation, obj, old)
            if denial is not None:
                raise StoreError(code, "", f'admission webhook "{name}" denied the request: {denial}')

        self.store.validators.append(validate)
        return reviewed

    def api_client(self, *, token: str | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` talking to this server."""
        import kubernetes

        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        if token or self.required_token:
            configuration.api_key = {"authorization": f"Bearer {token or self.required_token}"}
        return kubernetes.client.ApiClient(configuration)

    def write_kubeconfig(
        self, path: Path | str, *, namespace: str = "default", token: str | None = None
    ) -> Path:
        return write_kubeconfig(
            path, server=self.url, namespace=namespace, token=token or self.required_token
        )

    # ---- HTTP ------------------------------------------------------------------------------------------
    def _notify_threadsafe(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._wake_watchers)

    def _wake_watchers(self) -> None:
        for wakeup in list(self._watch_wakeups):
            wakeup.set()

    def _register_crd(self, crd: Mapping[str, Any]) -> None:
        """Serve the CRD's kind at each version it marks ``served`` (and at no other: a version marked
        ``served: false``, or dropped by an update, answers 404 as on a cluster; the fake served every
        version listed, so a client still on an unserved version passed here)."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, plural = str(spec.get("group", "")), str(names.get("plural"))
        served = [v for v in spec.get("versions") or [] if v.get("served", True) is not False]
        served_keys = {(group, str(v.get("name")), plural) for v in served}
        self.store.unregister_kinds(
            [
                key
                for key in self.store.kinds
                if key[0] == group and key[2] == plural and key not in served_keys
            ]
        )
        for version in served:
            self.store.register_kind(
                ResourceKind(
                    group=str(spec.get("group", "")),
                    version=str(version.get("name")),
                    plural=str(names.get("plural")),
                    kind=str(names.get("kind")),
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                    short_names=tuple(names.get("shortNames") or ()),
                    categories=tuple(str(c) for c in names.get("categories") or ()),
                    status_subresource="status" in (version.get("subresources") or {}),
                    printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                    schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                )
            )

    def _establish(self, crd: Mapping[str, Any]) -> dict[str, Any]:
        """Once a new CRD's kind is served, its ``NamesAccepted`` and ``Established`` conditions, written
        as apiextensions-apiserver's naming and establishing controllers write them just after the
        create (a ``MODIFIED`` event of the CRD). Clients rely on that event: kopf scans discovery
        again on every CRD event, and the ``ADDED`` one can arrive before the kind is served (here it
        always did), so without this later event an operator started before its CRD never served it
        (and ``kubectl wait --for=condition=Established`` never returned)."""
        names = (crd.get("spec") or {}).get("names") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ]
        status = {**(crd.get("status") or {}), "acceptedNames": dict(names), "conditions": conditions}
        kind = self.store.kinds[CRD_KEY]
        name = str(crd["metadata"]["name"])
        return self.store.replace(kind, "", name, {**crd, "status": status}, status_only=True)

    def _discovery(self, parts: list[str], accept: str = "") -> web.Response | None:
        """Legacy discovery documents, or ``None`` when the path is not a discovery path."""
        kinds = list(self.store.kinds.values())
        if parts == ["openapi", "v2"]:
            swagger = openapi_v2(kinds)
            if "protobuf" in accept:
                return web.Response(body=encoded(swagger), headers={"Content-Type": PROTOBUF})
            return _json(swagger)
        if parts == ["openapi", "v3"]:
            return _json(openapi_root(kinds))
        if parts[:2] == ["openapi", "v3"]:
            document = openapi_group_version("/".join(parts[2:]), kinds)
            return _json(document) if document is not None else None
        if parts == ["api", "v1"]:
            return _json(resource_list("v1", [k for k in kinds if not k.group]))
        if parts == ["apis"]:
            return _json(group_list(kinds))
        if len(parts) == 2 and parts[0] == "apis":
            versions = sorted({k.version for k in kinds if k.group == parts[1]})
            if versions:
                return _json(group_document(parts[1], versions))
        if len(parts) == 3 and parts[0] == "apis":
            group, version = parts[1], parts[2]
            matching = [k for k in kinds if k.group == group and k.version == version]
            if matching:
                return _json(resource_list(f"{group}/{version}", matching))
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append((request.method, request.path, query))
        authorization = request.headers.get("Authorization", "")
        token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
        self.callers.append((token, request.method, request.path))
        if token is not None and token in self._cut_off and request.transport is not None:
            request.transport.close()  # no answer: the client's connection is reset
            return web.Response(status=503)
        if token is not None and self._holds(token, request) and not self._closing:
            await request.read()  # the request arrived; no answer ever leaves
            held = asyncio.Event()
            self._held.add(held)
            try:
                await held.wait()
            finally:
                self._held.discard(held)
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=503)
        throttled = self._throttled()
        if throttled is not None:
            return throttled
        expected_auth = f"Bearer {self.required_token}"
        if self.required_token is not None and request.headers.get("Authorization") != expected_auth:
            return _json(_status(401, "Unauthorized", "Unauthorized"), 401)
        parts = [p for p in request.path.split("/") if p]
        if parts in (["version"],):
            return _json(VERSION_INFO)
        if parts == ["api"]:
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        discovery = self._discovery(parts, request.headers.get("Accept", ""))
        if discovery is not None:
            return discovery
        # Authorization comes before routing, as in the API server's filter chain: a request the
        # caller may not make is answered 403 whether or not its resource is served (a kind whose CRD
        # is not installed included); only an allowed one can learn that it is not (404).
        attributes = request_attributes(parts)
        if attributes is not None:
            denied = self._denial(request.method, query, attributes)
            if denied is not None:
                return denied
        try:
            kind, namespace, name, subresource = self._route(parts)
        except StoreError as exc:
            return _error(exc)
        if self._rbac is not None and request.method in ("POST", "PUT") and subresource is None:
            refused = await self._owner_reference_refusal(request, kind, namespace or "", name)
            if refused is not None:
                return _json(_status(403, "Forbidden", refused, details={"kind": kind.plural}), 403)
        try:
            return await self._dispatch(request, kind, namespace, name, subresource, query)
        except StoreError as exc:
            return _error(exc)
        except SelectorError as exc:
            return _json(_status(400, "BadRequest", str(exc)), 400)

    def _throttled(self) -> web.Response | None:
        if self._throttle is None or time.monotonic() >= self._throttle[0]:
            return None
        _, status, retry_after_s = self._throttle
        reason = "TooManyRequests" if status == 429 else "ServiceUnavailable"
        message = "Too many requests, please try again later."
        if retry_after_s is None:
            return _json(_status(status, reason, message), status)
        body = _status(status, reason, message, details={"retryAfterSeconds": retry_after_s})
        response = _json(body, status)
        response.headers["Retry-After"] = str(retry_after_s)
        return response

    async def _owner_reference_refusal(
        self, request: web.Request, kind: ResourceKind, namespace: str, name: str | None
    ) -> str | None:
        """The ``OwnerReferencesPermissionEnforcement`` plugin's answer (:mod:`tests.fakes.kube_owner_refs`)
        to this create or replace; a body the handler would refuse anyway is left to it."""
        assert self._rbac is not None
        try:
            body = await self._body(request)
        except StoreError:
            return None
        old = None
        if request.method == "PUT" and name is not None:
            try:
                old = self.store.get(kind, namespace, name)
            except StoreError:
                old = None
        return owner_reference_refusal(self._rbac, self.store, kind, namespace, name, body, old)

    def _denial(
        self, method: str, query: Mapping[str, str], attributes: RequestAttributes
    ) -> web.Response | None:
        """The 403 answer to a request :meth:`forbid` or :meth:`enforce_rbac` refuses, worded as the
        RBAC authorizer words it, or ``None`` when it is allowed."""
        name = attributes.name
        verb = {
            "GET": ("watch" if query.get("watch") in ("true", "1") else "list") if name is None else "get",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }.get(method, "get")
        plural, group, namespace = attributes.resource, attributes.group, attributes.namespace
        resource = f"{plural}/{attributes.subresource}" if attributes.subresource else plural
        denied = self._forbidden_all or bool(self._forbidden and plural in self._forbidden)
        if not denied and self._rbac is not None:
            denied = not self._rbac.allows(
                verb=verb, group=group, resource=resource, namespace=namespace or None, name=name
            )
        if not denied:
            return None
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        qualified = f"{plural}.{group}" if group else plural
        message = (
            f'{qualified} is forbidden: User "system:serviceaccount:igw:test" cannot {verb} resource '
            f'"{resource}" in API group "{group}"{where}'
        )
        details = {"group": group, "kind": plural} if group else {"kind": plural}
        return _json(_status(403, "Forbidden", message, details=details), 403)

    def _route(self, parts: list[str]) -> tuple[ResourceKind, str | None, str | None, str | None]:
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise StoreError(404, "NotFound", "the server could not find the requested resource")

        def kind_of(plural: str) -> ResourceKind:
            kind = self.store.kinds.get((group, version, plural))
            if kind is None:
                raise StoreError(404, "NotFound", "the server could not find the requested resource")
            return kind

        namespaced_path = (
            len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in self.store.kinds
        )
        if namespaced_path:
            kind = kind_of(rest[2])
            name = rest[3] if len(rest) > 3 else None
            sub = rest[4] if len(rest) > 4 else None
            return kind, rest[1], name, sub
        if not rest:
            raise StoreError(404, "NotFound", "the server could not find the requested resource")
        kind = kind_of(rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if name is None:
            return kind, None, None, None
        if kind.namespaced:
            raise StoreError(404, "NotFound", "the server could not find the requested resource")
        return kind, "", name, sub

    async def _dispatch(
        self,
        request: web.Request,
        kind: ResourceKind,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
        query: dict[str, str],
    ) -> web.StreamResponse:
        ns = namespace or ""
        method = request.method
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    return await self._watch(request, kind, namespace, query)
                return self._list(
                    kind, namespace, query, table_wanted=wants_table(request.headers.get("Accept", ""))
                )
            if method == "POST":
                body = await self._body(request)
                if kind.namespaced and namespace is None:
                    raise StoreError(405, "MethodNotAllowed", "create requires a namespace")
                check_type_meta(kind, body, custom=_custom(kind))
                meta_ns = (body.get("metadata") or {}).get("namespace")
                if kind.namespaced and meta_ns and meta_ns != ns:
                    raise StoreError(
                        400,
                        "BadRequest",
                        "the namespace of the provided object does not match the namespace sent "
                        "on the request",
                    )
                warnings: list[str] = []
                dry_run = _dry_run(method, query)
                created = self.store.create(
                    kind,
                    ns,
                    _status_reset(kind, body),
                    field_validation=_field_validation(query),
                    warnings=warnings,
                    dry_run=dry_run,
                    record_fields=_updater(request, kind, None),
                )
                if kind.plural == "customresourcedefinitions" and not dry_run:
                    self._register_crd(created)
                    self._establish(created)
                return _written(created, warnings, 201)
            raise StoreError(405, "MethodNotAllowed", f"method {method} not allowed on a collection")
        if subresource == "scale" and kind.key in SCALABLE:
            return await self._scale(request, kind, ns, name)
        if subresource not in (None, "status"):
            raise StoreError(404, "NotFound", f"subresource {subresource!r} is not served by the fake")
        if subresource == "status" and not kind.status_subresource:  # a ConfigMap's, say
            raise StoreError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET":
            found = self.store.get(kind, ns, name)
            if wants_table(request.headers.get("Accept", "")):
                return _json(table(kind, [found], found["metadata"]["resourceVersion"]))
            return _json(found)
        if method in ("PUT", "PATCH"):
            write_warnings: list[str] = []
            made = False  # an apply that creates the object is answered 201, as a create is
            directive = _field_validation(query)
            dry_run = _dry_run(method, query)
            if method == "PUT":
                body = await self._body(request)
                check_type_meta(kind, body, custom=_custom(kind))
                _check_url_names(kind, name, ns, body)
                written = self.store.replace(
                    kind,
                    ns,
                    name,
                    body,
                    status_only=subresource == "status",
                    field_validation=directive,
                    warnings=write_warnings,
                    dry_run=dry_run,
                    precondition_uid=str((body.get("metadata") or {}).get("uid") or "") or None,
                    record_fields=_updater(request, kind, subresource),
                )
            else:
                written, made = await self._patch(
                    request, kind, ns, name, subresource, directive, write_warnings, dry_run=dry_run
                )
            if kind.plural == "customresourcedefinitions" and not dry_run:
                self._register_crd(written)  # a new CRD generation: its schema and rules apply from now
            return _written(written, write_warnings, 201 if made else 200)
        if method == "DELETE":
            deleted = self.store.delete(
                kind,
                ns,
                name,
                propagation=await self._propagation(request, query),
                dry_run=_dry_run(method, query),
            )
            if kind.plural in _RETURNS_OBJECT_ON_DELETE:
                return _json(deleted)
            return _json(
                {
                    **_status(200, "", ""),
                    "status": "Success",
                    "details": {"name": name, "kind": kind.plural, "uid": deleted["metadata"]["uid"]},
                }
            )
        raise StoreError(405, "MethodNotAllowed", f"method {method} not allowed")

    async def _scale(self, request: web.Request, kind: ResourceKind, ns: str, name: str) -> web.Response:
        """``/scale`` of a Deployment or StatefulSet: an ``autoscaling/v1`` ``Scale`` read from the
        object, and a write of one (PUT, or a merge patch) setting the object's ``spec.replicas``, as
        ``kubectl scale`` and the HPA controller use it."""
        current = self.store.get(kind, ns, name)
        if request.method in ("PUT", "PATCH"):
            dry_run = _dry_run(request.method, request.query)
            body = await self._body(request, json_types=("application/merge-patch+json",))
            replicas = (body.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise StoreError(422, "Invalid", f'Scale "{name}" is invalid: spec.replicas: must be >= 0')
            current = self.store.replace(
                kind,
                ns,
                name,
                {**current, "spec": {**(current.get("spec") or {}), "replicas": replicas}},
                dry_run=dry_run,
                record_fields=_updater(request, kind, "scale"),
            )
        elif request.method != "GET":
            raise StoreError(405, "MethodNotAllowed", f"method {request.method} not allowed on scale")
        meta = current["metadata"]
        kept = ("name", "namespace", "uid", "resourceVersion")
        selector = ((current.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return _json(
            {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {k: meta[k] for k in kept if k in meta},
                "spec": {"replicas": int((current.get("spec") or {}).get("replicas", 1))},
                "status": {
                    "replicas": int((current.get("status") or {}).get("replicas", 0)),
                    "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
                },
            }
        )

    async def _propagation(self, request: web.Request, query: Mapping[str, str]) -> str:
        """A delete's ``propagationPolicy``: the query parameter, else the ``DeleteOptions`` body
        (``kubectl delete --cascade=orphan`` and the Python client send it there), else Background."""
        policy = query.get("propagationPolicy")
        if policy is None and request.can_read_body:
            options = await self._body(request)
            policy = options.get("propagationPolicy")
            if options.get("orphanDependents") is True and policy is None:
                policy = "Orphan"
        return str(policy or "Background")

    async def _body(self, request: web.Request, *, json_types: tuple[str, ...] = ()) -> dict[str, Any]:
        """A create's, update's or delete's body, decoded as the API server's
        ``NegotiateInputSerializer`` decodes it: by ``Content-Type`` (JSON when absent), a type the
        fake cannot decode refused 415 (:func:`_unsupported_body`), never a 500. ``json_types``: more
        types read as JSON (``/scale``'s merge patch)."""
        content_type = request.content_type if "Content-Type" in request.headers else _JSON
        if content_type not in (*_BODY_TYPES, *json_types):
            raise _unsupported_body()
        try:
            text = (await request.read()).decode()
            body = yaml.safe_load(text) if content_type == _YAML else json.loads(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise StoreError(400, "BadRequest", f"malformed request body: {exc}") from exc
        if not isinstance(body, dict):
            raise StoreError(400, "BadRequest", "request body must be a JSON object")
        return body

    async def _patch(
        self,
        request: web.Request,
        kind: ResourceKind,
        ns: str,
        name: str,
        subresource: str | None,
        field_validation: str,
        warnings: list[str],
        *,
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """The patched object, and whether the patch (an apply) created it."""
        content_type = request.content_type
        text = await request.text()
        try:
            patch = yaml.safe_load(text) if "yaml" in content_type else json.loads(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise StoreError(400, "BadRequest", f"malformed patch: {exc}") from exc
        apply: Callable[[Any, Any], Any]
        # A custom resource takes no strategic merge patch (it has no patch strategies to merge by):
        # the API server answers 415 naming the types it takes, and ``kubectl patch`` (strategic
        # unless told otherwise) fails on an InferenceGatewayConfig. The fake merged it as a merge patch.
        accepted = [*_PATCH_TYPES[:2], *_PATCH_TYPES[3:]] if _custom(kind) else list(_PATCH_TYPES)
        if content_type not in accepted:
            raise StoreError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(accepted),
            )
        _check_patch_options(content_type, request.query)
        if content_type == "application/apply-patch+yaml":
            check_apply_patch(kind, patch)
            patch = patch or {}
            field_managers.check_no_duplicates(kind, patch)
        if content_type == "application/json-patch+json":
            apply = json_patch
        elif content_type == "application/strategic-merge-patch+json":
            apply = functools.partial(strategic_merge_patch, kind.kind)
        else:
            apply = merge_patch
        # Atomic, as the API server's GuaranteedUpdate: the patch applies to the version it replaces
        # (a write landing between read and write is retried on the newer version, never overwritten),
        # unless the patch itself names a resourceVersion - a precondition, answered 409 when stale.
        while True:
            applying = content_type == "application/apply-patch+yaml"
            manager = field_managers.manager_from(request.query, request.headers.get("User-Agent", ""))
            try:
                current = self.store.get(kind, ns, name)
            except StoreError:
                if applying:
                    _check_url_names(kind, name, ns, patch)
                    made = self.store.create(
                        kind,
                        ns,
                        _status_reset(kind, patch),
                        field_validation=field_validation,
                        warnings=warnings,
                        dry_run=dry_run,
                        record_fields=field_managers.Applier(kind, manager, patch).record,
                    )
                    return made, True
                raise
            read_version = current["metadata"]["resourceVersion"]
            if applying:
                updated = field_managers.apply(
                    kind,
                    current,
                    patch,
                    manager=manager,
                    force=request.query.get("force") in ("true", "1"),
                    subresource=subresource or "",
                )
            else:
                updated = apply(current, patch)
                if subresource is None and not _custom(kind):
                    _check_patched_types(kind, content_type, patch, updated)
                if content_type != "application/strategic-merge-patch+json":
                    check_patched_type_meta(kind, updated, custom=_custom(kind))
            _check_url_names(kind, name, ns, updated)
            _check_patched_uid(kind, name, subresource, current, updated)
            sent_version = updated.setdefault("metadata", {}).get("resourceVersion")
            pinned = sent_version is not None and sent_version != read_version
            if not pinned:
                updated["metadata"]["resourceVersion"] = read_version
            try:
                replaced = self.store.replace(
                    kind,
                    ns,
                    name,
                    updated,
                    status_only=subresource == "status",
                    record_fields=None if applying else _updater(request, kind, subresource),
                    field_validation=field_validation,
                    warnings=warnings,
                    dry_run=dry_run,
                )
            except StoreError as exc:
                if exc.code != 409 or pinned:
                    raise
            else:
                return replaced, False

    def _list(
        self, kind: ResourceKind, namespace: str | None, query: dict[str, str], *, table_wanted: bool = False
    ) -> web.Response:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        items, rv = self.store.list(kind, namespace or None)
        selected = [o for o in items if labels((o.get("metadata") or {}).get("labels") or {}) and fields(o)]
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        start = 0
        if query.get("continue"):
            try:
                start = int(base64.urlsafe_b64decode(query["continue"].encode()).decode())
            except ValueError as exc:
                raise StoreError(410, "Expired", "the provided continue parameter is too old") from exc
        limit = _int_param(query, "limit", 0)
        if limit > 0:
            page = selected[start : start + limit]
            if start + limit < len(selected):
                metadata["continue"] = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
                metadata["remainingItemCount"] = len(selected) - start - limit
            selected = page
        else:
            selected = selected[start:]
        if table_wanted:
            return _json(table(kind, selected, str(rv)))
        return _json(
            {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": metadata,
                "items": selected,
            }
        )

    async def _watch(
        self, request: web.Request, kind: ResourceKind, namespace: str | None, query: dict[str, str]
    ) -> web.StreamResponse:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        loop = asyncio.get_running_loop()
        timeout = _int_param(query, "timeoutSeconds", 3600)
        deadline = loop.time() + timeout
        from_version = _int_param(query, "resourceVersion", 0)  # refused before the stream starts

        def wanted(obj: Mapping[str, Any]) -> bool:
            return bool(labels((obj.get("metadata") or {}).get("labels") or {}) and fields(obj))

        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)

        async def send(event_type: str, obj: Mapping[str, Any]) -> None:
            await response.write(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")

        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        if not from_version:
            items, last_rv = self.store.list(kind, namespace or None)
            for obj in items:
                if wanted(obj):
                    await send("ADDED", obj)
        else:
            last_rv = from_version
        wakeup = asyncio.Event()
        self._watch_wakeups.add(wakeup)
        with self._open_watches_lock:
            self._open_watches[wakeup] = (request.path, dict(query))
        epoch, stall, gone = self._watch_epoch, self._stall_epoch, self._gone_epoch
        try:
            while not self._closing and self._watch_epoch == epoch:
                if self._stall_epoch != stall:  # black-holed: silent until the server stops
                    while not self._closing:
                        wakeup.clear()
                        await wakeup.wait()
                    return response
                if self._gone_epoch != gone:  # the watch cache's window moved past this watcher
                    self.gone_sent += 1
                    message = f"too old resource version: {last_rv} ({self.store.resource_version})"
                    await send("ERROR", _status(410, "Expired", message))
                    break
                # Read before the events: a CRD's deletion records its objects' DELETED events and
                # stops serving the kind in one step, so once it is seen gone they are all below.
                withdrawn = self.store.kinds.get(kind.key) is None
                try:
                    events = self.store.events_after(last_rv)
                except StoreError as exc:
                    self.gone_sent += exc.code == 410
                    await send("ERROR", _status(exc.code, exc.reason, exc.message))
                    break
                for event in events:
                    last_rv = event.resource_version
                    if event.resource != kind.key or (namespace and event.namespace != namespace):
                        continue
                    event_type = _selected_event_type(
                        event.type,
                        wanted(event.object),
                        event.previous is not None and wanted(event.previous),
                    )
                    if event_type is not None:  # decoded as read now, under the CRD served now
                        await send(event_type, self.store.as_read(kind, event.object))
                if withdrawn:  # the CRD is gone (or no longer serves this version): its storage with it
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                wakeup.clear()
                if self.store.resource_version != last_rv:
                    continue
                wait_s = min(remaining, self.bookmark_interval_s) if bookmarks else remaining
                try:
                    await asyncio.wait_for(wakeup.wait(), wait_s)
                except TimeoutError:
                    if bookmarks:
                        marker = {"apiVersion": kind.api_version, "kind": kind.kind}
                        await send("BOOKMARK", {**marker, "metadata": {"resourceVersion": str(last_rv)}})
        except (ConnectionResetError, ClientConnectionError):
            return response
        finally:
            self._watch_wakeups.discard(wakeup)
            with self._open_watches_lock:
                self._open_watches.pop(wakeup, None)
        with contextlib.suppress(ConnectionResetError, ClientConnectionError):
            await response.write_eof()
        return response


_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
"""The patch types a built-in kind takes, in the API server's order (a custom resource: all but the
strategic merge patch)."""


def _updater(request: web.Request, kind: ResourceKind, subresource: str | None) -> FieldsRecorder:
    """The ``managedFields`` bookkeeping of a write other than an apply, by the request's manager."""
    manager = field_managers.manager_from(request.query, request.headers.get("User-Agent", ""))
    return field_managers.Updater(kind, manager, subresource or "").record


def _custom(kind: ResourceKind) -> bool:
    """Whether ``kind`` is served from a CRD (apiextensions' handler), not a built-in kind."""
    return kind.schema is not None or kind not in BUILTIN_KINDS


def _status_reset(kind: ResourceKind, body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as a create over HTTP starts it, for a kind with a ``/status`` subresource (built-in,
    or a CRD declaring one): without the ``status`` the client sent (the strategies'
    ``PrepareForCreate``; a Pod's is ``phase: Pending``), which only a ``/status`` write sets."""
    if not kind.status_subresource:
        return dict(body)
    reset = {k: v for k, v in body.items() if k != "status"}
    if kind.key == ("", "v1", "pods"):
        reset["status"] = {"phase": "Pending"}
    return reset


def _check_patch_options(content_type: str, query: Mapping[str, str]) -> None:
    """A patch's options as the API server validates them (``ValidatePatchOptions``: 422): an apply
    patch names its ``fieldManager`` (``kubectl apply --server-side`` sends one; a controller must),
    and ``force`` goes with an apply patch only. The fake took both, so a client that applied with
    no field manager, or sent ``force`` with a merge patch, passed here and is refused on a cluster."""
    problems = []
    if content_type != "application/apply-patch+yaml":
        if "force" in query:
            problems.append("force: Forbidden: may not be specified for non-apply patch")
    elif not query.get("fieldManager"):
        problems.append("fieldManager: Required value: is required for apply patch")
    if problems:
        raise StoreError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: ' + ", ".join(problems))


def _check_url_names(kind: ResourceKind, name: str, namespace: str, obj: Any) -> None:
    """An update's object (a PUT's body, a patched object, an apply's) must carry the name on the URL,
    and a namespaced one no other namespace than the URL's, as the API server's update and patch
    handlers check (``checkName``, ``EnsureObjectNamespaceMatchesRequestNamespace``: 400
    ``BadRequest``). The fake took the URL's and stored the write under it, so a client that sent one
    object's body to another's URL, or a patch renaming the object, passed here and fails on a
    cluster."""
    meta = (obj.get("metadata") if isinstance(obj, Mapping) else None) or {}
    sent = meta.get("name") if isinstance(meta, Mapping) else None
    if (sent or "") != name:
        message = f"the name of the object ({sent or ''}) does not match the name on the URL ({name})"
        raise StoreError(400, "BadRequest", message)
    sent_namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if kind.namespaced and sent_namespace and sent_namespace != namespace:
        raise StoreError(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        )


def _check_patched_uid(
    kind: ResourceKind, name: str, subresource: str | None, current: Mapping[str, Any], patched: Any
) -> None:
    """A patch that changes ``metadata.uid``, as the API server answers it. A PATCH is no uid
    precondition (its ``UpdatedObjectInfo`` holds no object to take one from, unlike a PUT's): the
    changed uid fails update validation (``rest.BeforeUpdate``: 422, ``field is immutable``), on the
    object and on a built-in kind's ``/status`` (a kubelet's pod status patch relies on that). On a
    custom resource's ``/status`` the status strategy copies the stored object and keeps only the
    patched ``status`` (``statusStrategy.PrepareForUpdate``), so the uid sent is dropped and the
    write lands on whatever object has that name now; a JSON patch's ``test`` op on
    ``/metadata/uid`` is what makes such a status write conditional on it."""
    stored = str((current.get("metadata") or {}).get("uid") or "")
    sent = str(((patched.get("metadata") if isinstance(patched, Mapping) else None) or {}).get("uid") or "")
    if (subresource == "status" and _custom(kind)) or not sent or sent == stored:
        return
    error = FieldError("metadata.uid", "FieldValueInvalid", quoted(sent), "field is immutable")
    qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    raise StoreError(
        422,
        "Invalid",
        invalid_message(qualified, name, [error]),
        details=invalid_details(kind.group, kind.kind, name, [error]),
    )


def _selected_event_type(event_type: str, matches_now: bool, matched_before: bool) -> str | None:
    """What a selector watch sees: entering the selection is ADDED, leaving it DELETED."""
    if event_type != "MODIFIED":
        return event_type if matches_now else None
    if matches_now:
        return "MODIFIED" if matched_before else "ADDED"
    return "DELETED" if matched_before else None


@contextlib.contextmanager
def running_fake_kube(*, store: KubeStore | None = None) -> Iterator[FakeKubeApiServer]:
    """Sync tests: a fake API server on a background thread, stopped on exit."""
    server = FakeKubeApiServer(store=store).start_in_thread()
    try:
        yield server
    finally:
        server.stop_thread()


@contextlib.asynccontextmanager
async def serving_fake_kube(*, store: KubeStore | None = None) -> AsyncIterator[FakeKubeApiServer]:
    """Async tests: the same server on the running loop."""
    async with FakeKubeApiServer(store=store) as server:
        yield server


def unreachable_url() -> str:
    """A loopback URL where nothing listens (bind an ephemeral port, then close it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def write_kubeconfig(
    path: Path | str, *, server: str, namespace: str = "default", token: str | None = None
) -> Path:
    """Write a kubeconfig with one context ``fake`` pointing at ``server``."""
    user: dict[str, Any] = {"token": token} if token else {"username": "fake"}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": user}],
        "contexts": [
            {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}
        ],
        "current-context": "fake",
    }
    target = Path(path)
    target.write_text(yaml.safe_dump(config))
    return target


def make_pod(
    *,
    name: str,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    image: str = "vllm/vllm-openai:v0.10.1",
    args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    port: int = 8000,
    ready: bool = True,
    pod_ip: str = "10.0.0.10",
) -> dict[str, Any]:
    """A realistic Pod (complete enough for the typed client's models) for seeding the fake: its one
    container running, ``status.containerStatuses`` agreeing with the ``Ready``/``ContainersReady``
    conditions (``kubectl get pods`` shows READY ``1/1``, or ``0/1`` when not ready, as on a node),
    and ``podIP``/``podIPs`` set."""
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    flag = "True" if ready else "False"
    digest = hashlib.sha256(image.encode()).hexdigest()
    repository = image.partition("@")[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": image,
                    "args": list(args or []),
                    "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                    "ports": [{"containerPort": port, "name": "http", "protocol": "TCP"}],
                }
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": started,
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": flag},
                {"type": "ContainersReady", "status": flag},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {
                    "name": "server",
                    "image": image,
                    "imageID": f"{repository}@sha256:{digest}",
                    "containerID": f"containerd://{hashlib.sha256(name.encode()).hexdigest()}",
                    "ready": ready,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                }
            ],
        },
    }
