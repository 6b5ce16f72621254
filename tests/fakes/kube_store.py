"""In-memory object store of the fake Kubernetes API server: objects, resource versions, events.

Thread-safe (one lock) because tests seed and mutate it from the test thread while the HTTP
server reads it from its own event-loop thread. Every mutation bumps a global resourceVersion
and appends a watch event; watchers are woken through :attr:`KubeStore.on_change`.

A write with ``dry_run`` (the API's ``?dryRun=All``) goes through everything a write goes through -
defaulting, validation, CRD admission, the :attr:`KubeStore.validators` (validating admission) and
the conflict checks - and answers the object as it would be stored, but stores nothing: no
resourceVersion is consumed, no watch event recorded (apiserver's ``DryRunnableStorage``).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import random
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from tests.fakes.kube_admission import Admission, admit, admit_status, read_back
from tests.fakes.kube_builtin_schemas import decoded, type_error
from tests.fakes.kube_crd_validation import crd_errors, stored_versions, with_defaults
from tests.fakes.kube_field_errors import FieldError, invalid_details, invalid_message
from tests.fakes.kube_immutable import update_errors
from tests.fakes.kube_jobs import default_job, generate_selector, job_spec_errors, takes_template_labels
from tests.fakes.kube_namespaces import (
    IMMORTAL_NAMESPACES,
    TERMINATING,
    default_namespace,
    holds_finalizer,
    immortal_refusal,
    terminating,
    terminating_refusal,
)
from tests.fakes.kube_services import allocate, normalize_cluster_ips, set_defaults, taken
from tests.fakes.kube_services import immutable_errors as service_immutable_errors
from tests.fakes.kube_validation import object_problems
from tests.fakes.kube_workload_defaults import default_pod, default_workload

FieldsRecorder = Callable[[Mapping[str, Any] | None, dict[str, Any]], None]
"""Sets a write's ``metadata.managedFields`` from the stored object (``None`` on create) and the one
about to be stored (:class:`tests.fakes.kube_field_managers.Updater`); a write without one keeps the
stored ``managedFields`` unless it sends its own."""


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """One served resource: ``group`` is "" for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    """A CRD's ``names.categories`` (``kubectl get <category>`` lists every kind in it); the built-in
    kinds' are :data:`tests.fakes.kube_discovery.BUILT_IN_CATEGORIES`."""
    status_subresource: bool = False
    """Whether ``/status`` is a separate subresource: then writes to the main resource keep the
    stored status, as the API server does for built-in kinds and CRDs declaring it."""
    generation: bool = True
    """Whether the API server keeps ``metadata.generation`` for it (1 on create, one more on each
    change outside ``metadata`` and a ``/status`` subresource's ``status``): the strategies of
    workloads, policies, networking kinds and CRDs do, apiextensions does for every custom resource.
    A ConfigMap, Secret, ServiceAccount, Service, Namespace, Node, Event, Lease, Role or RoleBinding
    has none (nor a Pod on 1.33, where ``PodObservedGenerationTracking`` is off by default); the
    fake gave every object one, so a client reading a ConfigMap's generation passed here and read
    nothing on a cluster."""
    printer_columns: tuple[Mapping[str, Any], ...] = ()
    """A CRD's ``additionalPrinterColumns`` (server-side ``kubectl get`` tables)."""
    schema: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, hash=False)
    """A CRD version's ``openAPIV3Schema``: every write of the object, and of its ``/status``, is
    pruned, defaulted and validated against it, CEL rules included (:mod:`tests.fakes.kube_admission`),
    as the real API server does."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)


BUILTIN_KINDS: tuple[ResourceKind, ...] = (
    ResourceKind("", "v1", "pods", "Pod", True, ("po",), status_subresource=True, generation=False),
    ResourceKind("", "v1", "events", "Event", True, ("ev",), generation=False),
    ResourceKind("coordination.k8s.io", "v1", "leases", "Lease", True, generation=False),
    ResourceKind("rbac.authorization.k8s.io", "v1", "roles", "Role", True, generation=False),
    ResourceKind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, generation=False),
    ResourceKind("", "v1", "services", "Service", True, ("svc",), status_subresource=True, generation=False),
    ResourceKind("", "v1", "configmaps", "ConfigMap", True, ("cm",), generation=False),
    ResourceKind("", "v1", "secrets", "Secret", True, generation=False),
    ResourceKind("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), generation=False),
    ResourceKind(
        "", "v1", "namespaces", "Namespace", False, ("ns",), status_subresource=True, generation=False
    ),
    ResourceKind("", "v1", "nodes", "Node", False, ("no",), status_subresource=True, generation=False),
    ResourceKind("apps", "v1", "deployments", "Deployment", True, ("deploy",), status_subresource=True),
    ResourceKind("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), status_subresource=True),
    ResourceKind("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), status_subresource=True),
    ResourceKind("batch", "v1", "jobs", "Job", True, status_subresource=True),
    ResourceKind("batch", "v1", "cronjobs", "CronJob", True, ("cj",), status_subresource=True),
    ResourceKind(
        "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), status_subresource=True
    ),
    ResourceKind(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        ("hpa",),
        status_subresource=True,
    ),
    ResourceKind("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
    ResourceKind("networking.k8s.io", "v1", "ingresses", "Ingress", True, ("ing",), status_subresource=True),
    ResourceKind("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False),
    ResourceKind(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        status_subresource=True,
    ),
)
"""The kinds every API server serves; those with a ``status`` have it as a ``/status`` subresource,
as the API server does: an update of the object keeps the stored status (its strategy's
``PrepareForUpdate``) and a create over HTTP starts without one (``PrepareForCreate``; a Pod's is
``phase: Pending``), so only a ``/status`` write - a controller's, a kubelet's - sets it. Seeding
(:meth:`KubeStore.create`, ``FakeKubeApiServer.add``) stores the status given, as those controllers
would have written it. An add-on's kinds (cert-manager's, the Load Balancer
Controller's IngressClassParams) are not among them: served only once their CRDs are installed
(:mod:`tests.fakes.kube_crds`), as a cluster without the add-on answers 404 for them."""

ObjectKey = tuple[tuple[str, str, str], str, str]
"""(resource key, namespace or "", name)."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    resource_version: int
    resource: tuple[str, str, str]
    namespace: str
    type: str
    object: dict[str, Any]
    previous: dict[str, Any] | None = None
    """The object before a MODIFIED event (lets selector watches turn it into ADDED/DELETED)."""


FOREGROUND_FINALIZER = "foregroundDeletion"
"""What a foreground delete adds to the owner (``metav1.FinalizerDeleteDependents``): it stays, with
its ``deletionTimestamp``, until the garbage collector has deleted its blocking dependents."""

PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")
"""A delete's ``propagationPolicy`` values (``Background`` when absent, for most kinds)."""

FIELD_VALIDATION_DIRECTIVES = ("Ignore", "Warn", "Strict")
"""The ``fieldValidation`` query parameter's values (``Warn`` when absent, as on the API server)."""


Validator = Callable[[str, "ResourceKind", Mapping[str, Any], Mapping[str, Any] | None, bool], None]
"""Validating admission (a webhook): called with the operation (``CREATE``/``UPDATE``), the kind, the
object about to be stored, the stored one (``None`` on create) and whether the write is a dry run;
raises :class:`StoreError` to refuse the write."""


class StoreError(Exception):
    """An API error the server turns into a ``Status`` response (``details``: its ``details``)."""

    def __init__(
        self, code: int, reason: str, message: str, *, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details


def _default(kind: ResourceKind, body: dict[str, Any]) -> None:
    """The API server's defaulting of built-in kinds on every create and replace: a Deployment written
    without ``spec.replicas`` gets 1 (so a replace that leaves the count out resets it, as on a
    cluster), and Pods, apps/v1 workloads (:mod:`tests.fakes.kube_workload_defaults`) and Services
    (:func:`tests.fakes.kube_services.set_defaults`) get the fields a cluster fills in."""
    spec = body.get("spec")
    if kind.key == SERVICE_KEY and isinstance(spec, dict):
        set_defaults(spec)
    if kind.key == POD_KEY and isinstance(spec, dict):
        default_pod(spec)
    if kind.group == "apps" and kind.version == "v1" and isinstance(spec, dict):
        default_workload(kind.plural, spec)
    if kind.key == JOB_KEY and isinstance(spec, dict):
        if takes_template_labels(body):  # the template's label map itself, on a cluster
            body.setdefault("metadata", {})["labels"] = dict(spec["template"]["metadata"]["labels"])
        default_job(body)
    if kind.key == NAMESPACE_KEY:
        default_namespace(body)


def _refuse_immutable_changes(
    kind: ResourceKind, name: str, new: dict[str, Any], current: Mapping[str, Any]
) -> None:
    """Update validation's refusal of changed immutable fields (:mod:`tests.fakes.kube_immutable`,
    :func:`tests.fakes.kube_services.immutable_errors`): 422 ``Invalid``, before any allocation."""
    errors = update_errors(kind.key, new, current)
    spec, old_spec = new.get("spec"), current.get("spec")
    if kind.key == SERVICE_KEY and isinstance(spec, dict) and isinstance(old_spec, Mapping):
        normalize_cluster_ips(spec, old_spec)
        errors.extend(service_immutable_errors(spec, old_spec))
    if errors:
        raise _invalid(kind, name, errors)


def _invalid(kind: ResourceKind, name: str, errors: Sequence[FieldError]) -> StoreError:
    """The API server's 422 ``Invalid`` Status for ``errors`` (field errors) of ``kind`` ``name``, the
    kind group-qualified as ``NewInvalid`` names it (``Job.batch "j" is invalid``; ``kubectl apply``
    rewrites it to ``The Job "j" is invalid`` from ``details``, ``kubectl set image`` prints it as is)."""
    qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    return StoreError(
        422,
        "Invalid",
        invalid_message(qualified, name, errors),
        details=invalid_details(kind.group, kind.kind, name, errors),
    )


_REASONS: Final = {
    "Required value": "FieldValueRequired",
    "Forbidden": "FieldValueForbidden",
    "Too long": "FieldValueTooLong",
    "Invalid value": "FieldValueInvalid",
    "Unsupported value": "FieldValueNotSupported",
}


def _field_error(problem: str) -> FieldError:
    """One of :func:`tests.fakes.kube_validation.object_problems`' ``field: body`` lines as the
    cause it stands for."""
    field, _, body = problem.partition(": ")
    label, _, rest = body.partition(": ")
    return FieldError(field, _REASONS.get(label, "FieldValueInvalid"), detail=rest)


def _validate(kind: ResourceKind, body: Mapping[str, Any]) -> None:
    """Metadata (and workload label) validation: a 422 ``Invalid`` as :func:`_invalid` words it - the
    kind group-qualified, several causes in brackets, each one in ``details.causes``. The fake said
    ``Job "j" is invalid: a, b`` with no details, so ``kubectl`` printed the raw message where a
    cluster's answer gives ``The Job "j" is invalid:`` and one cause a line."""
    problems = object_problems(kind.kind, body)
    if problems:
        name = str((body.get("metadata") or {}).get("name") or "")
        raise _invalid(kind, name, [_field_error(problem) for problem in problems])


CRD_KEY = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NAMESPACE_KEY = ("", "v1", "namespaces")
SERVICE_KEY = ("", "v1", "services")
SECRET_KEY = ("", "v1", "secrets")
POD_KEY = ("", "v1", "pods")
DEPLOYMENT_KEY = ("apps", "v1", "deployments")
"""``deploymentStrategy.PrepareForUpdate`` bumps its generation on a spec or an annotation change:
the annotations are copied to its ReplicaSets, so an annotation edit is a rollout input."""
JOB_KEY = ("batch", "v1", "jobs")
MAX_GENERATED_NAME_BASE = 58
"""apiserver's ``names.MaxGeneratedNameLength`` (63 less the 5 random characters): a longer
``generateName`` is cut to it before the suffix is added."""


GENERATED_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
"""apimachinery ``util/rand``'s alphabet for generated names."""
_random: Final = random.SystemRandom()

RESOURCE_VERSION_SET_ON_CREATE: Final = "resourceVersion should not be set on objects to be created"
"""``storage.ErrResourceVersionSetOnCreate``: the etcd3 store's ``Create`` refuses an object that
carries a resourceVersion (after admission, before it looks for an existing key). The error is no
``Status``, so the REST handler answers it as ``ErrorToAPIStatus`` answers any such error: 500, no
reason, this message (``kubectl`` prints ``Error from server: error when creating ...``). An export
(``kubectl get -o yaml``) carries one, so restoring it unstripped fails on a cluster. The dry-run
storage answers a dry-run create without that check, and so does the fake."""


def _version_set(meta: Mapping[str, Any]) -> bool:
    """Whether ``meta.resourceVersion`` is one the API server refuses on create: a non-zero unsigned
    integer, as ``APIObjectVersioner.ObjectResourceVersion`` parses it (empty, ``"0"`` or one that
    does not parse, ``"-1"`` say, gets through: kubernetes/kubernetes#113847)."""
    version = str(meta.get("resourceVersion") or "")
    return version.isascii() and version.isdigit() and 0 < int(version) < 2**64


def _details(kind: ResourceKind, name: str) -> dict[str, str]:
    """A ``StatusDetails`` naming an object (``group`` left out for the core group: ``omitempty``)."""
    details = {"name": name, "group": kind.group, "kind": kind.plural}
    return {key: value for key, value in details.items() if value}


def _qualified(kind: ResourceKind) -> str:
    """The resource as ``schema.GroupResource.String`` names it in a Status message: ``deployments.apps``,
    plain ``configmaps`` for the core group."""
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def _not_found(kind: ResourceKind, name: str) -> StoreError:
    """The 404 ``NewNotFound`` answers for a named object: the resource group-qualified
    (``deployments.apps "x" not found``) and ``details`` naming it. The fake said ``deployments "x"
    not found`` with no details, so a client reading ``details.group``/``details.kind`` (or matching
    the message ``kubectl`` prints) saw what no cluster sends."""
    return StoreError(404, "NotFound", f'{_qualified(kind)} "{name}" not found', details=_details(kind, name))


def _already_exists(kind: ResourceKind, name: str, existing: Mapping[str, Any]) -> str:
    """The AlreadyExists message, prefixed ``object is being deleted: `` while the object in the way
    has a ``deletionTimestamp`` (held by a finalizer), as genericregistry ``Store.Create`` answers it;
    the resource group-qualified (``deployments.apps``), as ``NewAlreadyExists`` names it. The fake
    said only ``deployments "x" already exists``, so a client retrying a create over an object still
    being deleted could not tell the two cases apart as it can on a cluster."""
    message = f'{_qualified(kind)} "{name}" already exists'
    if (existing.get("metadata") or {}).get("deletionTimestamp"):
        return f"object is being deleted: {message}"
    return message


def generated_name(base: str) -> str:
    """A name for ``generateName: base`` as the API server makes one (``SimpleNameGenerator``): the base
    cut to 58 characters, then 5 random ones from apimachinery's ``rand.String`` alphabet (no vowels,
    no 0/1/3, so no words and no look-alikes; the fake used hex, ``gen-c6002``, which no cluster
    makes). Uncut, a 253-character object's Event (``<name>.``) got a 259-character name the fake
    refused and a cluster never does."""
    suffix = "".join(_random.choice(GENERATED_NAME_ALPHABET) for _ in range(5))
    return f"{base[:MAX_GENERATED_NAME_BASE]}{suffix}"


def _admitted_crd(name: str, body: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """A CRD write as apiextensions-apiserver admits it: defaulted, validated (422 ``Invalid`` with one
    cause per field, :mod:`tests.fakes.kube_crd_validation`), its ``status.storedVersions`` the server's."""
    crd = with_defaults(body)
    errors = crd_errors(crd, old)
    if errors:
        raise StoreError(
            422,
            "Invalid",
            invalid_message("CustomResourceDefinition.apiextensions.k8s.io", name, errors),
            details=invalid_details("apiextensions.k8s.io", "CustomResourceDefinition", name, errors),
        )
    status = dict((old or {}).get("status") or {})
    status["storedVersions"] = stored_versions(crd, old)
    crd["status"] = status
    return crd


def _admitted(
    kind: ResourceKind,
    name: str,
    admission: Admission,
    field_validation: str,
    warnings: MutableSequence[str] | None,
) -> dict[str, Any]:
    """The object to store, or the refusal the API server answers (400 for ``Strict`` unknown fields,
    422 ``Invalid`` with one cause per field); ``Warn`` appends one warning per unknown field."""
    unknown = [f'unknown field "{path}"' for path in admission.unknown_fields]
    if unknown and field_validation == "Strict":
        raise _strict_decoding_error(kind, unknown)
    if admission.errors:
        qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
        raise StoreError(
            422,
            "Invalid",
            invalid_message(qualified, name, admission.errors),
            details=invalid_details(kind.group, kind.kind, name, admission.errors),
        )
    if warnings is not None and field_validation == "Warn":
        warnings.extend(unknown)
    return admission.object


def _strict_decoding_error(kind: ResourceKind, unknown: Sequence[str]) -> StoreError:
    """The 400 a ``fieldValidation=Strict`` write with unknown fields gets (the decoder's wording)."""
    return StoreError(
        400,
        "BadRequest",
        f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
        "strict decoding error: " + ", ".join(unknown),
    )


def check_builtin_types(kind: ResourceKind, body: Mapping[str, Any]) -> None:
    """A built-in kind's write with a field of the wrong JSON type (``replicas: "3"``, ``spec: []``)
    is refused 400, as the API server's decoding into the Go type refuses it, whatever the
    ``fieldValidation`` directive (a type error trumps unknown fields), before any validation."""
    problem = type_error(kind.key, body) if kind.schema is None else None
    if problem is not None:
        raise StoreError(
            400,
            "BadRequest",
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: {problem}',
        )


def _merge_string_data(secret: dict[str, Any]) -> None:
    """A Secret's ``stringData`` as the conversion to the internal type (``Convert_v1_Secret_To_core_Secret``)
    takes it: each value base64-encoded into ``data`` over the key there, and ``stringData`` gone (the
    internal type has none, so it is never stored nor returned). On every create, update and patch,
    before validation: an immutable Secret's ``stringData`` edit is a ``data`` change refused. The
    fake stored and returned ``stringData`` beside ``data`` and left ``data`` without it."""
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, Mapping) and string_data:
        data = secret.get("data")
        merged = dict(data) if isinstance(data, Mapping) else {}
        for key, value in string_data.items():
            merged[key] = base64.b64encode(("" if value is None else str(value)).encode()).decode()
        secret["data"] = merged


def _decoded_builtin(
    kind: ResourceKind,
    body: dict[str, Any],
    field_validation: str,
    warnings: MutableSequence[str] | None,
) -> dict[str, Any]:
    """A built-in kind's write as its decoding leaves it (:mod:`tests.fakes.kube_builtin_schemas`):
    unknown fields refused 400 under ``Strict``, else dropped, with a warning each under ``Warn``."""
    dropped: list[str] = []
    result = decoded(kind.key, body, dropped)
    if kind.key == SECRET_KEY:
        _merge_string_data(result)
    unknown = [f'unknown field "{path}"' for path in dropped]
    if unknown and field_validation == "Strict":
        raise _strict_decoding_error(kind, unknown)
    if warnings is not None and field_validation == "Warn":
        warnings.extend(unknown)
    return result


class KubeStore:
    """Objects keyed by resource, namespace and name, with a bounded event history for watches."""

    def __init__(self, *, max_events: int = 10_000) -> None:
        self._lock = threading.RLock()
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._events: list[WatchEvent] = []
        self._max_events = max_events
        self._oldest_watchable = 0
        self._rv = 0
        self.kinds: dict[tuple[str, str, str], ResourceKind] = {k.key: k for k in BUILTIN_KINDS}
        self.on_change: Callable[[], None] = lambda: None
        self.validators: list[Validator] = []
        self.deleted_namespaces: set[str] = set()
        """Namespaces :meth:`finalize_namespace` removed (and not made again): creating in one is
        refused 404, as the API server refuses it (other absent namespaces are not checked)."""
        """Validating admission run on every create and update of an object or its status, dry runs
        included, after defaulting and schema validation (as the API server calls webhooks)."""

    def _admit_write(
        self,
        operation: str,
        kind: ResourceKind,
        obj: Mapping[str, Any],
        old: Mapping[str, Any] | None,
        dry_run: bool,
    ) -> None:
        for validator in list(self.validators):
            validator(operation, kind, obj, old, dry_run)

    # ---- kinds ---------------------------------------------------------------------------------
    def register_kind(self, kind: ResourceKind) -> None:
        with self._lock:
            self.kinds[kind.key] = kind

    def unregister_kinds(self, keys: Sequence[tuple[str, str, str]]) -> None:
        """Stop serving these resources (a CRD version no longer served); their objects stay stored."""
        with self._lock:
            for key in keys:
                self.kinds.pop(key, None)

    def kind_for(self, *, api_version: str, kind: str) -> ResourceKind:
        group, _, version = api_version.rpartition("/")
        for candidate in self.kinds.values():
            if candidate.group == group and candidate.version == version and candidate.kind == kind:
                return candidate
        raise StoreError(
            404, "NotFound", f"the server could not find the requested resource ({api_version} {kind})"
        )

    # ---- versions and events ---------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def compact(self, *, advance: bool = False) -> None:
        """Forget the event history, so older resourceVersions get 410 Gone on watch.

        ``advance`` also moves the resourceVersion on (as unrelated writes do on a real server), so
        even a client that had seen everything is too old afterwards.
        """
        with self._lock:
            if advance:
                self._rv += 1
            self._events.clear()
            self._oldest_watchable = self._rv

    def events_after(self, resource_version: int) -> list[WatchEvent]:
        with self._lock:
            if resource_version < self._oldest_watchable:
                raise StoreError(410, "Expired", f"too old resource version: {resource_version}")
            return [e for e in self._events if e.resource_version > resource_version]

    def _record(
        self,
        kind: ResourceKind,
        namespace: str,
        event_type: str,
        obj: dict[str, Any],
        previous: dict[str, Any] | None = None,
    ) -> None:
        self._events.append(
            WatchEvent(self._rv, kind.key, namespace, event_type, copy.deepcopy(obj), copy.deepcopy(previous))
        )
        if len(self._events) > self._max_events:
            dropped = self._events[: len(self._events) - self._max_events]
            self._oldest_watchable = dropped[-1].resource_version
            del self._events[: len(dropped)]

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    # ---- CRUD ------------------------------------------------------------------------------------
    def _allocate(
        self, kind: ResourceKind, name: str, body: dict[str, Any], current: Mapping[str, Any] | None
    ) -> None:
        """Give a Service being written its cluster IP and node ports (:mod:`tests.fakes.kube_services`),
        or refuse it 422 as the allocators do; what the other stored Services hold is taken."""
        spec = body.get("spec")
        if not isinstance(spec, dict):
            return
        others = (
            obj
            for (key, _, _), obj in self._objects.items()
            if key == SERVICE_KEY and (current is None or obj is not current)
        )
        used_ips, used_ports = taken(others)
        old = (current or {}).get("spec")
        errors = allocate(spec, used_ips, used_ports, old if isinstance(old, Mapping) else None)
        if errors:
            raise _invalid(kind, name, errors)

    def list(self, kind: ResourceKind, namespace: str | None) -> tuple[list[dict[str, Any]], int]:
        with self._lock:
            items = [
                self.as_read(kind, obj)
                for (res, ns, _), obj in sorted(self._objects.items())
                if res == kind.key and (namespace is None or ns == namespace)
            ]
            return items, self._rv

    def get(self, kind: ResourceKind, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self._objects.get((kind.key, namespace, name))
            if obj is None:
                raise _not_found(kind, name)
            return self.as_read(kind, obj)

    def as_read(self, kind: ResourceKind, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of stored ``obj`` as a client reads it: a custom resource pruned and defaulted under
        the schema its kind is served with now (:func:`tests.fakes.kube_admission.read_back`), which
        may be newer or older than the one it was written under; other kinds as stored."""
        served = self.kinds.get(kind.key, kind)
        if served.schema is None:
            return copy.deepcopy(dict(obj))
        return read_back(served.schema, obj)

    def create(
        self,
        kind: ResourceKind,
        namespace: str,
        obj: Mapping[str, Any],
        *,
        field_validation: str = "Warn",
        warnings: MutableSequence[str] | None = None,
        admit_custom: bool = True,
        dry_run: bool = False,
        record_fields: FieldsRecorder | None = None,
    ) -> dict[str, Any]:
        """Store a new object; a custom resource is admitted first (:mod:`tests.fakes.kube_admission`).

        ``admit_custom=False`` (seeding only, never over HTTP) stores it as a cluster holds an object
        written under an older or schema-less CRD (stored objects are not re-validated when a CRD
        changes): for tests of a controller's own defence against specs the current CRD refuses.
        ``dry_run``: the object as it would be created (a uid and creation time, no resourceVersion,
        as the API server answers a dry-run create), nothing stored."""
        body = copy.deepcopy(dict(obj))
        check_builtin_types(kind, body)
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = generated_name(str(meta["generateName"]))
            meta["name"] = name
        if not name:
            raise StoreError(422, "Invalid", f"{kind.kind}.metadata.name: Required value: name is required")
        if kind.key == CRD_KEY:
            body = _admitted_crd(name, body, None)
            meta = body["metadata"]
        _validate(kind, body)
        if kind.schema is None:
            body = _decoded_builtin(kind, body, field_validation, warnings)
            meta = body["metadata"]
        shared_labels = kind.key == JOB_KEY and takes_template_labels(body)
        _default(kind, body)
        if kind.schema is not None and admit_custom:
            admission = admit(kind.schema, body, status_subresource=kind.status_subresource)
            body = _admitted(kind, name, admission, field_validation, warnings)
            meta = body["metadata"]
        with self._lock:
            key = (kind.key, namespace, name)
            if kind.namespaced and terminating(self._objects.get((NAMESPACE_KEY, "", namespace))):
                message, details = terminating_refusal(kind.group, kind.plural, namespace, name)
                raise StoreError(403, "Forbidden", message, details=details)
            if kind.namespaced and namespace in self.deleted_namespaces:
                details = {"name": namespace, "kind": "namespaces"}
                raise StoreError(404, "NotFound", f'namespaces "{namespace}" not found', details=details)
            if not dry_run and _version_set(meta):
                raise StoreError(500, "", RESOURCE_VERSION_SET_ON_CREATE)
            if kind.key == SERVICE_KEY:  # allocated before the store looks for the name, as on a cluster
                self._allocate(kind, name, body, None)
            if key in self._objects:
                raise StoreError(
                    409,
                    "AlreadyExists",
                    _already_exists(kind, name, self._objects[key]),
                    details=_details(kind, name),
                )
            body["apiVersion"] = kind.api_version
            body["kind"] = kind.kind
            if kind.namespaced:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if kind.key == JOB_KEY:  # the Job strategy's PrepareForCreate, then its validation
                generate_selector(body, shared_labels)
                job_errors = job_spec_errors(body)
                if job_errors:
                    raise _invalid(kind, name, job_errors)
            if kind.generation:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            meta.pop("resourceVersion", None)
            if record_fields is not None:
                record_fields(None, body)
            self._admit_write("CREATE", kind, body, None, dry_run)
            if dry_run:
                return copy.deepcopy(body)
            meta["resourceVersion"] = self._bump()
            self._objects[key] = body
            if kind.key == NAMESPACE_KEY:
                self.deleted_namespaces.discard(name)
            self._record(kind, namespace, "ADDED", body)
            result = copy.deepcopy(body)
            self._collect_if_dangling(key)
        self.on_change()
        return result

    def replace(
        self,
        kind: ResourceKind,
        namespace: str,
        name: str,
        obj: Mapping[str, Any],
        *,
        status_only: bool = False,
        field_validation: str = "Warn",
        warnings: MutableSequence[str] | None = None,
        admit_custom: bool = True,
        dry_run: bool = False,
        precondition_uid: str | None = None,
        record_fields: FieldsRecorder | None = None,
    ) -> dict[str, Any]:
        """Replace an object (or only its status); a custom resource is admitted first, as an update
        (``admit_custom``: as for :meth:`create`). ``dry_run``: the object as it would be stored, its
        resourceVersion still the stored one, nothing changed.

        ``precondition_uid``: the ``metadata.uid`` a PUT's body carries. The API server makes it a
        storage precondition (``defaultUpdatedObjectInfo.Preconditions``), checked before anything
        else: another uid (the object deleted and made anew under its name) is refused 409. A PATCH
        has no such precondition (see :meth:`FakeKubeApiServer._patch`)."""
        body = copy.deepcopy(dict(obj))
        with self._lock:
            key = (kind.key, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise _not_found(kind, name)
            stored_uid = current["metadata"].get("uid", "")
            if precondition_uid and precondition_uid != stored_uid:
                raise StoreError(
                    409,
                    "Conflict",
                    uid_precondition_failed(kind, namespace, name, precondition_uid, stored_uid),
                )
            sent_rv = (body.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise StoreError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                )
            if status_only:
                new = copy.deepcopy(current)
                new.pop("status", None)
                sent_fields = (body.get("metadata") or {}).get("managedFields")
                if sent_fields:  # an apply to /status, its bookkeeping done
                    new["metadata"]["managedFields"] = copy.deepcopy(sent_fields)
                if kind.schema is None or not admit_custom:
                    new["status"] = body.get("status")
                else:
                    admission = admit_status(kind.schema, body.get("status"), old=current.get("status"))
                    new.update(_admitted(kind, name, admission, field_validation, warnings))
            else:
                check_builtin_types(kind, body)
                _validate(kind, {**body, "metadata": {**(body.get("metadata") or {}), "name": name}})
                new = (
                    body
                    if kind.schema is not None
                    else _decoded_builtin(kind, body, field_validation, warnings)
                )
                _default(kind, new)
                if kind.status_subresource or "status" not in body:
                    new["status"] = current.get("status")
                if new.get("status") is None:
                    new.pop("status", None)
                if kind.schema is not None and admit_custom:
                    admission = admit(
                        kind.schema, new, old=current, status_subresource=kind.status_subresource
                    )
                    new = _admitted(kind, name, admission, field_validation, warnings)
                if kind.key == CRD_KEY:
                    new = _admitted_crd(
                        name, {**new, "metadata": {**new.get("metadata", {}), "name": name}}, current
                    )
                _refuse_immutable_changes(kind, name, new, current)
                if kind.key == SERVICE_KEY:
                    self._allocate(kind, name, new, current)
                meta = new.setdefault("metadata", {})
                for field in ("uid", "creationTimestamp", "namespace", "name"):
                    if field in current["metadata"]:
                        meta[field] = current["metadata"][field]
                # apiextensions' strategy bumps a custom resource's generation on any change outside
                # metadata - its status too where no /status subresource keeps it apart; a built-in
                # kind's on spec changes, a Deployment's on annotation changes too.
                custom = kind.schema is not None or kind not in BUILTIN_KINDS
                kept = ("metadata",) if custom and not kind.status_subresource else ("metadata", "status")
                old_spec = {k: v for k, v in current.items() if k not in kept}
                new_spec = {k: v for k, v in new.items() if k not in kept}
                if kind.key == DEPLOYMENT_KEY:
                    old_spec["annotations"] = current["metadata"].get("annotations") or {}
                    new_spec["annotations"] = meta.get("annotations") or {}
                if kind.generation:
                    meta["generation"] = current["metadata"].get("generation", 1) + (old_spec != new_spec)
                else:  # a request cannot set it (``rest.BeforeUpdate``), and nothing else does
                    meta.pop("generation", None)
            new["apiVersion"] = kind.api_version
            new["kind"] = kind.kind
            deleting = current["metadata"].get("deletionTimestamp")
            if deleting:  # being deleted: the timestamp stays, and the last finalizer's removal deletes
                new["metadata"]["deletionTimestamp"] = deleting
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            if record_fields is not None:
                record_fields(current, new)
            elif not new["metadata"].get("managedFields") and current["metadata"].get("managedFields"):
                # A write that leaves managedFields out (or sends []) keeps the stored ones.
                new["metadata"]["managedFields"] = copy.deepcopy(current["metadata"]["managedFields"])
            self._admit_write("UPDATE", kind, new, current, dry_run)
            if dry_run or unchanged(new, current):
                return copy.deepcopy(new)
            new["metadata"]["resourceVersion"] = self._bump()
            held = kind.key == NAMESPACE_KEY and holds_finalizer(new)  # until finalize_namespace
            if deleting and not new["metadata"].get("finalizers") and not held:
                self._remove(key, new)
            else:
                self._objects[key] = new
                self._record(kind, namespace, "MODIFIED", new, previous=current)
                if _owners(new) != _owners(current):
                    self._collect_if_dangling(key)
            result = copy.deepcopy(new)
        self.on_change()
        return result

    def delete(
        self,
        kind: ResourceKind,
        namespace: str,
        name: str,
        *,
        propagation: str = "Background",
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete one object and, like the garbage collector, every object it owns (transitively).

        ``propagation`` is the request's ``propagationPolicy``: ``Orphan`` (``kubectl delete
        --cascade=orphan``) keeps the dependents and removes their owner reference to the object, as
        the garbage collector's orphan finalizer does; ``Background`` deletes the object, then its
        dependents; ``Foreground`` (``--cascade=foreground``) marks the object (``deletionTimestamp``
        and the ``foregroundDeletion`` finalizer, answered as such), deletes its dependents, and
        deletes it once no dependent with ``blockOwnerDeletion: true`` is left - at once, or when the
        last one held by its own finalizers goes. The collector's work is done at once here, where
        the real one does it moments later.

        An object with ``metadata.finalizers`` is only marked (``deletionTimestamp``, a MODIFIED
        event) and stays until a write removes its last finalizer, as the API server does: with the
        controller that owns the finalizer gone, ``kubectl delete`` waits for good.

        ``dry_run``: the object as the delete would leave it (marked, when it has finalizers), with
        nothing deleted, marked, orphaned or collected."""
        if propagation not in PROPAGATION_POLICIES:
            raise StoreError(
                400,
                "BadRequest",
                f'propagationPolicy: Unsupported value: "{propagation}": supported values: '
                + ", ".join(f'"{policy}"' for policy in PROPAGATION_POLICIES),
            )
        with self._lock:
            key = (kind.key, namespace, name)
            obj = self._objects.get(key)
            if obj is None:
                raise _not_found(kind, name)
            if kind.key == NAMESPACE_KEY and name in IMMORTAL_NAMESPACES:
                raise StoreError(
                    403, "Forbidden", immortal_refusal(name), details={"name": name, "kind": "namespaces"}
                )
            if dry_run:
                answer = copy.deepcopy(obj)
                if answer["metadata"].get("finalizers") and not answer["metadata"].get("deletionTimestamp"):
                    answer["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                return answer
            result: dict[str, Any] | None = None
            if propagation == "Orphan":
                self._orphan_dependents(str(obj["metadata"].get("uid", "")))
            if kind.key == NAMESPACE_KEY and holds_finalizer(obj):
                if not terminating(obj):  # the namespace controller empties it (finalize_namespace)
                    previous = copy.deepcopy(obj)
                    obj["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    obj.setdefault("status", {})["phase"] = TERMINATING
                    obj["metadata"]["resourceVersion"] = self._bump()
                    self._record(kind, namespace, "MODIFIED", obj, previous=previous)
            elif propagation == "Foreground" and not obj["metadata"].get("deletionTimestamp"):
                previous = copy.deepcopy(obj)
                obj["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                obj["metadata"]["finalizers"] = [*obj["metadata"].get("finalizers", []), FOREGROUND_FINALIZER]
                obj["metadata"]["resourceVersion"] = self._bump()
                self._record(kind, namespace, "MODIFIED", obj, previous=previous)
                result = copy.deepcopy(obj)
                self._delete_dependents(str(obj["metadata"].get("uid", "")))
                self._finish_foreground(key)
            elif obj["metadata"].get("finalizers"):
                if not obj["metadata"].get("deletionTimestamp"):
                    previous = copy.deepcopy(obj)
                    obj["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    obj["metadata"]["resourceVersion"] = self._bump()
                    self._record(kind, namespace, "MODIFIED", obj, previous=previous)
            else:
                obj["metadata"]["resourceVersion"] = self._bump()
                self._remove(key, obj)
            if result is None:
                result = copy.deepcopy(obj)
        self.on_change()
        return result

    def finalize_namespace(self, name: str) -> bool:
        """What the namespace controller does for a Terminating namespace: delete everything in it
        (an object with ``metadata.finalizers`` is only marked, and holds the namespace) and, once
        nothing is left, the Namespace itself. ``True`` when the Namespace is gone."""
        with self._lock:
            namespace_obj = self._objects.get((NAMESPACE_KEY, "", name))
            if namespace_obj is None:
                return True
            if not terminating(namespace_obj):
                raise ValueError(f"namespace {name} is not being deleted")
            for resource, ns, obj_name in sorted(self._objects):
                if ns == name and (resource, ns, obj_name) in self._objects:
                    self.delete(self.kinds[resource], ns, obj_name)
            if any(ns == name for _, ns, _ in self._objects):
                return False
            del self._objects[(NAMESPACE_KEY, "", name)]
            self.deleted_namespaces.add(name)
            namespace_obj["spec"]["finalizers"] = []
            namespace_obj["metadata"]["resourceVersion"] = self._bump()
            self._record(self.kinds[NAMESPACE_KEY], "", "DELETED", namespace_obj)
        self.on_change()
        return True

    # ---- the garbage collector ---------------------------------------------------------------------
    def _remove(self, key: ObjectKey, obj: dict[str, Any]) -> None:
        """Take ``obj`` (its new resourceVersion set) out of the store for good: the DELETED event, its
        dependents collected, an owner waiting in foreground deletion for it released, a CRD's kind
        no longer served. Called with the lock held."""
        resource, namespace, _ = key
        self._objects.pop(key, None)
        self._record(self.kinds[resource], namespace, "DELETED", obj)
        self._collect_dependents(str(obj["metadata"].get("uid", "")))
        for ref in _owners(obj):
            owner = self._find_uid(str(ref.get("uid", "")))
            if owner is not None:
                self._finish_foreground(owner)
        if resource == CRD_KEY:
            self._forget_crd(obj)

    def _find_uid(self, uid: str) -> ObjectKey | None:
        if not uid:
            return None
        for key, obj in self._objects.items():
            if (obj.get("metadata") or {}).get("uid") == uid:
                return key
        return None

    def _dependents(self, owner_uid: str) -> Sequence[ObjectKey]:
        return [
            key
            for key, obj in self._objects.items()
            if owner_uid and any(ref.get("uid") == owner_uid for ref in _owners(obj))
        ]

    def _delete_dependents(self, owner_uid: str) -> None:
        """The collector's part of a foreground deletion: each dependent deleted (in the foreground
        too when it has dependents of its own, as ``attemptToDeleteItem`` does). Lock held."""
        for resource, namespace, name in self._dependents(owner_uid):
            dependent = self._objects.get((resource, namespace, name))
            if dependent is None or (dependent.get("metadata") or {}).get("deletionTimestamp"):
                continue
            nested = self._dependents(str(dependent["metadata"].get("uid", "")))
            self.delete(
                self.kinds[resource], namespace, name, propagation="Foreground" if nested else "Background"
            )

    def _finish_foreground(self, key: ObjectKey) -> None:
        """An owner in foreground deletion loses its ``foregroundDeletion`` finalizer once no dependent
        with ``blockOwnerDeletion: true`` is left (then goes, unless other finalizers hold it), as the
        garbage collector's ``processDeletingDependentsItem`` does. Lock held."""
        obj = self._objects.get(key)
        if obj is None or FOREGROUND_FINALIZER not in (obj["metadata"].get("finalizers") or []):
            return
        uid = str(obj["metadata"].get("uid", ""))
        for dependent in self._dependents(uid):
            refs = _owners(self._objects[dependent])
            if any(ref.get("uid") == uid and ref.get("blockOwnerDeletion") is True for ref in refs):
                return
        previous = copy.deepcopy(obj)
        kept = [f for f in obj["metadata"]["finalizers"] if f != FOREGROUND_FINALIZER]
        if kept:
            obj["metadata"]["finalizers"] = kept
        else:
            obj["metadata"].pop("finalizers", None)
        obj["metadata"]["resourceVersion"] = self._bump()
        if kept:
            self._record(self.kinds[key[0]], key[1], "MODIFIED", obj, previous=previous)
        else:
            self._remove(key, obj)

    def _owner_state(self, ref: Mapping[str, Any], namespace: str) -> str:
        """``present``, ``absent`` (no object of that kind and name with that uid where the dependent
        can have its owner: its namespace, or the cluster scope) or ``unknown`` (a kind the server
        does not serve: the collector cannot look it up and leaves the dependent alone)."""
        group, _, version = str(ref.get("apiVersion", "")).rpartition("/")
        kind = next(
            (
                k
                for k in self.kinds.values()
                if (k.group, k.version, k.kind) == (group, version, ref.get("kind"))
            ),
            None,
        )
        if kind is None or not ref.get("uid"):
            return "unknown"
        owner = self._objects.get((kind.key, namespace if kind.namespaced else "", str(ref.get("name"))))
        return "present" if owner is not None and owner["metadata"].get("uid") == ref["uid"] else "absent"

    def _collect_if_dangling(self, key: ObjectKey) -> None:
        """The garbage collector's look at an object written with owner references: every owner gone
        (its uid no longer there: deleted, or deleted and made again) - the object is deleted; some
        gone, some there - the dangling references are removed. The collector does it moments after
        the write (``attemptToDeleteItem``); here at once. A reference to a kind the server does not
        serve leaves the object alone, as it does the collector. Lock held."""
        obj = self._objects.get(key)
        refs = _owners(obj or {})
        if obj is None or not refs:
            return
        states = [self._owner_state(ref, key[1]) for ref in refs]
        if "unknown" in states or "absent" not in states:
            return
        resource, namespace, name = key
        if "present" not in states:
            self.delete(self.kinds[resource], namespace, name)
            return
        previous = copy.deepcopy(obj)
        obj["metadata"]["ownerReferences"] = [
            r for r, state in zip(refs, states, strict=True) if state == "present"
        ]
        obj["metadata"]["resourceVersion"] = self._bump()
        self._record(self.kinds[resource], namespace, "MODIFIED", obj, previous=previous)

    def _forget_crd(self, crd: Mapping[str, Any]) -> None:
        """A deleted CRD's kind is no longer served (its URLs answer 404 again) and its objects are
        gone, as apiextensions-apiserver's ``customresourcecleanup`` finalizer deletes them before
        the CRD goes (here at once: their own finalizers are not waited for); called with the lock
        held."""
        spec = crd.get("spec") or {}
        group, plural = str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", ""))
        served = [key for key in self.kinds if key[0] == group and key[2] == plural]
        for key in served:
            for object_key in [k for k in self._objects if k[0] == key]:
                obj = self._objects.pop(object_key)
                obj["metadata"]["resourceVersion"] = self._bump()
                self._record(self.kinds[key], object_key[1], "DELETED", obj)
            del self.kinds[key]

    def _orphan_dependents(self, owner_uid: str) -> None:
        """Remove the owner references naming ``owner_uid`` (a MODIFIED event each, as the garbage
        collector's patch makes); called with the lock held."""
        if not owner_uid:
            return
        for (resource, namespace, _), obj in list(self._objects.items()):
            refs = (obj.get("metadata") or {}).get("ownerReferences") or []
            kept = [ref for ref in refs if ref.get("uid") != owner_uid]
            if len(kept) == len(refs):
                continue
            previous = copy.deepcopy(obj)
            if kept:
                obj["metadata"]["ownerReferences"] = kept
            else:
                obj["metadata"].pop("ownerReferences", None)
            obj["metadata"]["resourceVersion"] = self._bump()
            self._record(self.kinds[resource], namespace, "MODIFIED", obj, previous=previous)

    def _collect_dependents(self, owner_uid: str) -> None:
        """Delete objects whose ownerReferences name ``owner_uid``; called with the lock held."""
        if not owner_uid:
            return
        dependents = [
            key
            for key, obj in self._objects.items()
            if any(
                ref.get("uid") == owner_uid
                for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
            )
        ]
        for resource, namespace, name in dependents:
            self.delete(self.kinds[resource], namespace, name)

    def iter_all(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            snapshot = [copy.deepcopy(o) for o in self._objects.values()]
        yield from snapshot


def _owners(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    return [r for r in refs if isinstance(r, dict)] if isinstance(refs, list) else []


def unchanged(new: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether a write would store what is stored already (its resourceVersion aside): the API
    server's ``GuaranteedUpdate`` compares the encoded object with the stored bytes and, when they
    are equal, writes nothing - no new resourceVersion, no watch event - and answers the stored
    object, so ``kubectl patch`` with the same value prints ``(no change)``. A fake that bumped the
    version and sent ``MODIFIED`` let a controller that reacts to its own no-op writes look fine
    here and loop on a cluster, or the other way round, hid a controller waiting for an event that
    never comes."""

    def without_version(obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
        return {**obj, "metadata": meta}

    return without_version(new) == without_version(current)


def uid_precondition_failed(kind: ResourceKind, namespace: str, name: str, sent: str, stored: str) -> str:
    """The API server's answer to a write whose uid precondition fails (storage's ``InvalidObjError``,
    which ``InterpretUpdateError`` turns into 409 ``Conflict``), word for word."""
    resource = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    prefix = f"/registry/{kind.group}/{kind.plural}" if kind.group else f"/registry/{kind.plural}"
    key = f"{prefix}/{namespace}/{name}" if namespace else f"{prefix}/{name}"
    return (
        f'Operation cannot be fulfilled on {resource} "{name}": StorageError: invalid object, Code: 4, '
        f"Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: "
        f"{sent}, UID in object meta: {stored}"
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also used for strategic-merge and apply patches, see kube_api)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer_parts(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise StoreError(422, "Invalid", f"invalid JSON pointer {pointer!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _resolve(doc: Any, pointer: str) -> Any:
    """The value at ``pointer`` in ``doc`` (a ``from`` of move/copy)."""
    value = doc
    for part in _pointer_parts(pointer):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return copy.deepcopy(value)


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise StoreError(422, "Invalid", "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise StoreError(422, "Invalid", f"malformed json patch operation {op!r}")
        if op["op"] in ("move", "copy"):
            try:
                value = _resolve(doc, str(op.get("from", "")))
            except (KeyError, IndexError, ValueError, TypeError) as exc:
                raise StoreError(
                    422, "Invalid", f"json patch {op['op']} from {op.get('from')}: {exc}"
                ) from exc
            if op["op"] == "move":
                doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
            doc = json_patch(doc, [{"op": "add", "path": op["path"], "value": value}])
            continue
        parts = _pointer_parts(op["path"])
        if not parts:
            raise StoreError(422, "Invalid", "json patch on the whole document is not supported")
        kind = op["op"]
        parent: Any = doc
        for part in parts[:-1]:
            # Every operation needs its target's parent to exist (RFC 6902 4.1): the API server's
            # json-patch answers "doc is missing path" (422); the fake made the missing parents, so an
            # ``add`` of ``/metadata/annotations/x`` to an object without annotations - the classic
            # ``kubectl patch --type=json`` mistake - passed here and fails on a cluster.
            try:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            except (KeyError, IndexError, ValueError, TypeError):
                parent = None
            if not isinstance(parent, (dict, list)):
                raise StoreError(
                    422,
                    "Invalid",
                    f'{kind} operation does not apply: doc is missing path: "{op["path"]}": missing value',
                )
        last = parts[-1]
        try:
            if kind in ("add", "replace"):
                if isinstance(parent, list):
                    index = len(parent) if last == "-" else int(last)
                    if kind == "add":
                        parent.insert(index, op.get("value"))
                    else:
                        parent[index] = op.get("value")
                else:
                    if kind == "replace" and last not in parent:
                        raise StoreError(422, "Invalid", f"replace of missing path {op['path']}")
                    parent[last] = op.get("value")
            elif kind == "remove":
                if isinstance(parent, list):
                    del parent[int(last)]
                else:
                    del parent[last]
            elif kind == "test":
                actual = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                if actual != op.get("value"):
                    raise StoreError(422, "Invalid", f"test failed at {op['path']}")
            else:
                raise StoreError(422, "Invalid", f"unsupported json patch op {kind!r}")
        except (KeyError, IndexError, ValueError) as exc:
            raise StoreError(422, "Invalid", f"json patch {kind} {op['path']}: {exc}") from exc
    return doc
