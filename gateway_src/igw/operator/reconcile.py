"""One reconciliation pass over one InferenceGatewayConfig: admit, apply, observe, report.

The pass is level-triggered and idempotent, so kopf may call it on every create / update / resume
and on a timer: it re-reads the object, admits it (:mod:`igw.operator.admission`), applies the
data plane only when admitted (a refused spec keeps the previous data plane serving: what of it was
deleted or changed is put back from the last admitted spec, :meth:`Reconciler._last_admitted`) and
then all or nothing (:meth:`igw.operator.kube.Kube.apply_all`: every object dry-run on the API server first,
so a Service or Deployment the API server refuses leaves the served ConfigMap as it was), observes
what runs (the rendered configuration actually served, the gateway Deployment and Service, the
model-server pods of each served scheduler), then writes the status when it changed and posts
one Event per condition transition (best effort: one the API server refuses is logged), and once per
generation a Warning Event naming AWS's fields the spec sets that igw accepts without effect
(``FieldsWithoutEffect``, :mod:`igw.config.unused_fields`). Passes over the same object never overlap.

InferenceObjective and InferenceModelRewrite objects bound to the config (``spec.poolRef.name`` is its
name, same namespace; :mod:`igw.operator.bindings`) are merged into the spec before admission, so the
ConfigMap carries them and the gateway's hot reload serves them; each gets ``Accepted`` and
``ResolvedRefs`` conditions. An object naming no config gets ``PoolNotFound``.

For ``spec.tls: {}`` the pass first obtains the auto-issued certificate (:mod:`igw.operator.tls`):
it imports the Secret's certificate into ACM once cert-manager has written it, and applies the
cert-manager Certificate with the rest of the data plane (all or nothing), the Service with that ARN on
its TLS listener only once there is one. When the spec stops asking for it, the pass deletes the
import once the listener has moved off it, then the Certificate and the Secret cert-manager wrote for
it (left in place, cert-manager kept renewing them and the Secret kept the private key); the same
happens when the object is deleted (:meth:`Reconciler.forget`). With auto-issue switched off
(:attr:`AutoTlsSettings.enabled`) none of this runs and ``tls: {}`` is reported ``AutoTlsDisabled``.
With the gateways' NetworkPolicy switched off (:attr:`DataPlaneSettings.network_policy`) the pass
deletes the one it made before, which would otherwise keep filtering the pods, never updated again.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import gzip
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from igw import __version__
from igw.config.build import build_gateway_config
from igw.config.crd import CRD_NAME
from igw.config.documents import DocumentReadError, parse_text
from igw.config.errors import Problem
from igw.config.inference_extension import API_VERSION as EXTENSION_API_VERSION
from igw.config.inference_extension import OBJECTIVE_KIND, REWRITE_KIND, validate_resource
from igw.config.model import API_VERSION, KIND
from igw.config.unused_fields import unused_field_notes
from igw.config.validate import validate_document
from igw.operator.admission import (
    Claim,
    Refusal,
    admit,
    model_names,
    served_models,
    spec_refusal,
)
from igw.operator.bindings import Checked, Merge, Verdict, conditions, merge, pool_name, unbound
from igw.operator.crd_skew import (
    EXTENSION_CRDS,
    UNKNOWN_FIELD_RULE,
    ServedSchema,
    Skew,
    resolve_skew,
    served_schema,
)
from igw.operator.dataplane import (
    CONFIG_KEY,
    HPA_API_VERSION,
    HPA_KIND,
    MANAGED_BY,
    NETWORK_POLICY_API_VERSION,
    NETWORK_POLICY_KIND,
    DataPlaneSettings,
    base_name,
    desired_objects,
    horizontal_autoscaler,
    initial_only_fields,
    object_metadata,
    served_document,
)
from igw.operator.kube import (
    ADOPTION_LABELS,
    IGWC_API_VERSION,
    Kube,
    NothingApplied,
    OperatorStopping,
    PassAbandoned,
    namespace_terminating,
    refusal_text,
)
from igw.operator.service_ports import CachedReader, ServiceEgress, resolve, service_refs
from igw.operator.status import (
    Observation,
    Transition,
    compute_status,
    namespace_terminating_conditions,
)
from igw.operator.tls import (
    CERT_MANAGER_API,
    CERTIFICATE_KIND,
    CERTIFICATE_NAME_ANNOTATION,
    AcmImporter,
    AutoTlsSettings,
    IssuedCertificate,
    certificate,
    client_hostnames,
    expired,
    foreign_secret,
    issuance_failure,
    issued_secret,
    issuer_problem,
    renewal_problem,
    rfc3339,
    secret_name,
    wants_auto_issue,
    without_key_material,
)
from igw.operator.tls_sweep import ClusterIdentity

log = logging.getLogger("igw.operator")
NOTES_REASON = "FieldsWithoutEffect"
SKEW_REASON = "NewerCRDDefaultsLeftOut"
"""Normal Event: fields the served CRD (newer than this operator) defaults, left out of what is served
(:mod:`igw.operator.crd_skew`); on an InferenceObjective or InferenceModelRewrite, by its own CRD."""
WITHDRAWN_REASON = "RestoredWithoutNewerFields"
"""Warning Event: fields of the last admitted spec that neither this operator nor the served CRD knows
(written by a newer operator, rolled back since), left out of the data plane restored for a refused
spec (:mod:`igw.operator.crd_skew`)."""
CRD_API_VERSION = "apiextensions.k8s.io/v1"
PORTS_REASON = "ServicePortUnresolved"
"""Warning Event: a Service port the config names whose pod port the operator could not resolve, so
its NetworkPolicy may keep the gateway's connections out (:mod:`igw.operator.service_ports`)."""
"""The reason of the Event naming AWS's fields an object sets that igw accepts without acting on."""
RENEWAL_REASON = "CertificateRenewalFailed"
"""Warning Event: cert-manager is not renewing the auto-issued certificate the load balancer serves
(:func:`igw.operator.tls.renewal_problem`); the current one keeps being served until it expires."""
EXPIRED_REASON = "CertificateExpired"
"""GatewayProgrammed's reason while the auto-issued certificate the load balancer serves is past its
notAfter (:func:`igw.operator.tls.expired`): every client that verifies it fails the TLS handshake."""
LAST_ADMITTED_ANNOTATION = "operator.igw.dev/last-admitted-spec"
"""Annotation the operator keeps on each config: the last spec it admitted (objectives and rewrites
merged), written before that spec is applied (never behind what is served), so a refused spec's data
plane can be restored after an operator restart even when its served ConfigMap is gone too
(:meth:`Reconciler._last_admitted`). Compact JSON up to :data:`LAST_ADMITTED_PLAIN_MAX_CHARS`, larger
specs gzip-compressed behind :data:`LAST_ADMITTED_GZIP`
(:func:`last_admitted_text`); empty when even that does not fit (:data:`LAST_ADMITTED_MAX_CHARS`, a
``LastAdmittedSpecNotKept`` Warning Event says so). Under the operator's own prefix (``KOPF_PREFIX`` of
:mod:`igw.operator.handlers`), which the runbook's backup leaves out: a restored config is admitted anew."""
LAST_ADMITTED_GZIP = "gzip+base64:"
"""Marks an annotation value holding the spec's compact JSON gzip-compressed, then base64-encoded; a
value without it is the JSON itself (as every operator before session s47 wrote it, still read)."""
LAST_ADMITTED_PLAIN_MAX_CHARS = 16 * 1024
"""The largest spec kept as readable JSON; a larger one is compressed. Uncompressed, a spec over 96 KiB
was not kept at all, and its restore was lost at the next operator restart."""
LAST_ADMITTED_MAX_CHARS = 96 * 1024
"""The largest annotation value the operator writes (compressed or not): an object's annotations may
hold 256 KiB in all (keys and values, apimachinery's ``TotalAnnotationSizeLimitB``), ``kubectl apply``
keeps another copy of the whole object in its own, and a value that took the rest would make the
user's next ``kubectl apply`` of a larger spec fail (``metadata.annotations: Too long``)."""
LAST_ADMITTED_MAX_SPEC_BYTES = 4 * 1024 * 1024
"""The most a compressed annotation is inflated to (anyone who may edit the object may write one)."""
ANNOTATIONS_MAX_BYTES = 256 * 1024
"""apimachinery's ``TotalAnnotationSizeLimitB``: all of an object's annotations, keys and values."""
ANNOTATIONS_RESERVE_BYTES = 4 * 1024
"""Room left for kopf's own annotations (a digest and a marker) when the last admitted spec is kept."""
NOT_KEPT_REASON = "LastAdmittedSpecNotKept"
"""Warning Event: the admitted spec does not fit in :data:`LAST_ADMITTED_ANNOTATION`, even compressed,
so after an operator restart a refused spec's data plane is restored only from its served ConfigMap."""
UNREADABLE_REASON = "LastAdmittedSpecUnreadable"
"""Warning Event: :data:`LAST_ADMITTED_ANNOTATION` holds no spec the operator can read (edited by hand:
not JSON, not an object, bad base64 or gzip, or inflating past :data:`LAST_ADMITTED_MAX_SPEC_BYTES`), so
it is ignored: it was skipped silently, and a refused spec's data plane was then restored from the
served ConfigMap alone (or not at all) with nothing saying why."""
RESTORED_REASON = "RestoredLastAdmitted"
"""Normal Event: a refused spec's pass put objects of the previous data plane back from the last
admitted spec (:meth:`Reconciler._last_admitted`), naming them and where that spec was read (the served
ConfigMap, the operator's memory or :data:`LAST_ADMITTED_ANNOTATION`), never its content; once per
generation. Only INFO lines said it, so ``kubectl describe`` showed the refusal but not the restore."""
ISSUER_READ_TTL_S = 60.0
"""Seconds one read of the configured issuer serves every pass that checks it once the certificate is
issued (:meth:`Reconciler._issuer_problem`): one GET per issuer (the ClusterIssuer, or each namespace's
Issuer) a minute, not one per object every resync (5 s), to see an issuer go away before a renewal."""

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _error_text(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    return f"{type(exc).__name__}: {body or exc}"[:2000]


@dataclass(frozen=True, slots=True)
class TlsOutcome:
    """What obtaining an auto-issued certificate gave: its ARN and ``status.tls``, or why not yet."""

    acm_arn: str | None = None
    status: Mapping[str, Any] | None = None
    problem: tuple[str, str] | None = None
    """``(reason, message)`` for GatewayProgrammed=False while there is no certificate to serve."""
    certificate: Mapping[str, Any] | None = None
    """The cert-manager Certificate to apply with the rest of the data plane (all or nothing), when
    the cluster serves the kind."""
    renewal: str | None = None
    """Why the certificate served is not being renewed (it still is, until it expires), else ``None``."""
    issuer: tuple[str, str] | None = None
    """``(reason, message)`` when the issuer went missing or NotReady after the certificate served was
    issued (:func:`igw.operator.tls.issuer_problem`): its next renewal will fail."""
    reissue: str | None = None
    """The Secret holds no certificate while the one issued before is still served from ACM
    (:meth:`Reconciler._reissuing`): what is served meanwhile, else ``None``."""


@dataclass(frozen=True, slots=True)
class NamespaceListing:
    """What every pass of one resync reads about a namespace, listed once for all its objects.

    Each pass listed every InferenceGatewayConfig of its namespace (admission's neighbours) and the
    InferenceObjectives and InferenceModelRewrites there: with n configs in a namespace a resync read
    n lists of n objects, O(n^2) - 200 configs in one namespace took about 12 s of
    operator CPU per resync (5 s apart by default), where one list per namespace takes O(n)."""

    sequence: int
    """:attr:`Reconciler` pass sequence when the listing began: a pass of the object started since
    then read newer lists than these, so its next pass lists again instead of going back to these."""
    configs: list[dict[str, Any]]
    objectives: list[dict[str, Any]]
    rewrites: list[dict[str, Any]]


class Reconciler:
    """Reconciles objects by ``(namespace, name)``; one lock per object serialises its passes."""

    def __init__(
        self,
        kube: Kube,
        settings: DataPlaneSettings,
        *,
        clock: Clock = _utc_now,
        auto_tls: AutoTlsSettings | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: wall time (UTC), for status times and certificates' notAfter. ``monotonic``:
        seconds that never go back, for the read caches' ages: on the wall clock, a clock stepped back
        (NTP, a VM restored) kept every cached read (the issuer's, Services') fresh until the wall
        clock caught up again, so an issuer deleted meanwhile went unreported for that long."""
        self._kube = kube
        self._settings = settings
        self._clock = clock
        self._auto_tls = auto_tls or AutoTlsSettings()
        self._acm = AcmImporter(self._auto_tls.acm_client_factory)
        self._cluster = ClusterIdentity(kube)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._pending: dict[tuple[str, str], int] = {}
        """Passes of each object running or waiting for its lock (:meth:`busy`)."""
        self._sequence = 0
        """Counts passes begun (and listings, :class:`NamespaceListing`), so a listing can tell
        whether a pass of an object read fresher lists after it was taken."""
        self._last_pass: dict[tuple[str, str], int] = {}
        self._certificates_gone: dict[tuple[str, str], str] = {}
        """``(namespace, name): uid`` of objects not asking for auto-issue whose Certificate and Secret
        this process has seen gone (checked once per object, not on every pass; dropped with the object)."""
        self._leaving: dict[tuple[str, str], str] = {}
        """``(namespace, name): uid`` of objects the watch reported deleted or being deleted
        (:meth:`leaving`): a pass of one still running stops at its next step, writing nothing more.
        Deleting a namespace of 50 configs, the passes that had read them before made 44 status
        writes and ~600 reads for objects already gone (before session s48)."""
        self._terminating: set[tuple[str, str]] = set()
        self._doomed: dict[str, set[str]] = {}
        self._doomed_lock = threading.Lock()
        """``namespace: uids`` of the configs it held when the API server first refused a pass there
        ``NamespaceTerminating``: they go with the namespace (nothing is created in one being deleted,
        so no config of it is newer), and a pass of one reads the config, says so once in its status
        and stops (:meth:`_doomed_config`). Deleting a namespace of 50 configs, every resync pass of
        each read its whole data plane, dry-ran what the namespace controller had already removed and
        read the Deployment and Service again, every resync until the namespace was gone (before
        session s49; counts in docs/operating.md). By uid, not name: a config made in a new namespace
        of that name is not one. Marked at the first refusal, in the Kube worker thread that got it
        (:meth:`_doom`), so passes running in other worker threads stop before their next request; so
        read and written under ``_doomed_lock``."""
        """Objects whose namespace the API server said is being deleted (logged once, not every pass;
        dropped with the object, which the namespace's deletion removes)."""
        self._noted: dict[tuple[str, str], tuple[object, object]] = {}
        """``(namespace, name): (uid, generation)`` whose accepted-unused notes this process has
        handled (:meth:`_post_notes`): one Event per generation, not one per pass."""
        self._service_reads = CachedReader(kube, monotonic)
        self._skew_noted: dict[tuple[str, str], _SkewMark] = {}
        """``(namespace, name): (uid, generation, paths)`` whose newer-CRD defaults left out this
        process has noted (:meth:`_resolve_skew`)."""
        self._bound_skew_noted: dict[tuple[str, str], dict[tuple[str, str], _SkewMark]] = {}
        """``(namespace, config name): {(kind, name): (uid, generation, paths)}``: the same, for the
        objects bound to the config (:meth:`_resolve_bound_skew`)."""
        self._served_crd: dict[str, tuple[object, ServedSchema | None]] = {}
        """The served CRDs' schemas, by CRD name, with their ``(uid, generation)``
        (:meth:`_served_schema`)."""
        self._crd_unreadable: dict[str, str] = {}
        """Why each CRD could not be read last (logged when it changes)."""
        """The Services and pods behind configs' in-cluster Services, reused across the passes of one
        resync (:meth:`_service_egress`)."""
        self._ports_noted: dict[tuple[str, str], tuple[object, tuple[str, ...]]] = {}
        """``(namespace, name): (uid, problems)`` of the unresolved Service ports last reported
        (:meth:`_service_egress`): one Event when they change, not one per pass."""
        self._renewal_noted: dict[tuple[str, str], tuple[object, str]] = {}
        """``(namespace, name): (uid, problem)`` of the renewal failure last reported
        (:meth:`_post_renewal`): one Warning Event when it changes, not one per pass."""
        self._import_noted: dict[tuple[str, str], tuple[object, str]] = {}
        """``(namespace, name): (uid, message)`` of the first import ACM refused, last logged
        (:meth:`_tls`): one WARNING line when it changes, not one per pass. Its condition and Event
        said it, the operator's log nothing, where every other refusal is logged."""
        self._issuer_noted: dict[tuple[str, str], tuple[object, str]] = {}
        """``(namespace, name): (uid, problem)`` of the issuer problem last reported for an issued
        certificate (:meth:`_post_renewal`): one Warning Event when it changes, not one per pass."""
        self._admitted: dict[tuple[str, str], tuple[object, dict[str, Any]]] = {}
        """``(namespace, name): (uid, spec)`` last applied for an admitted spec: restores the data plane
        of a refused spec when its served ConfigMap is gone too (:meth:`_last_admitted`)."""
        self._withdrawn_noted: dict[tuple[str, str], tuple[object, tuple[str, ...]]] = {}
        """``(namespace, name): (uid, paths)`` of a restored spec's fields left out last reported
        (:meth:`_resolve_restored_skew`): one Warning Event when they change."""
        self._restore_noted: dict[tuple[str, str], tuple[object, str]] = {}
        """``(namespace, name): (uid, message)`` of the last admitted spec last found unfit to restore
        (:meth:`_last_admitted`): one WARNING line when it changes, not one per pass."""
        self._not_kept_noted: dict[tuple[str, str], tuple[object, object]] = {}
        """``(namespace, name): (uid, generation)`` whose admitted spec this process reported not kept in
        :data:`LAST_ADMITTED_ANNOTATION` (:meth:`_note_not_kept`): one Event per generation."""
        self._unreadable_noted: dict[tuple[str, str], tuple[object, object]] = {}
        """``(namespace, name): (uid, generation)`` whose unreadable :data:`LAST_ADMITTED_ANNOTATION`
        this process reported (:meth:`_annotated`): one WARNING line and Event per generation."""
        self._restored_noted: dict[tuple[str, str], tuple[object, object]] = {}
        """``(namespace, name): (uid, generation)`` whose restore this process reported
        (:meth:`_note_restored`): one Event per generation, not one per pass that puts objects back."""
        self._apply_failed_noted: dict[tuple[str, str], tuple[object, object, str]] = {}
        """``(namespace, name): (uid, generation, message)`` of the apply failure last logged
        (:meth:`_note_apply_failed`): one WARNING line per generation and message, and one INFO line
        when an apply succeeds again. A spec the API server kept refusing (``NothingApplied``) logged
        the same WARNING on every pass and resync (before session s47)."""
        self._claims: dict[tuple[str, str], Claim] = {}
        self._recalled: set[str] = set()
        """Namespaces whose served ConfigMaps :meth:`_recall_claims` has read into :attr:`_claims`."""
        """``(namespace, name)``: the models this process admitted for the config and may be serving
        (:class:`igw.operator.admission.Claim`), recorded in the step that admits, so a concurrent
        pass, or one reading a list older than a neighbour's status, sees them (:meth:`_claim`)."""
        self._issuer_reads = CachedReader(kube, monotonic, ISSUER_READ_TTL_S)
        """Reads of the configured issuer once a certificate is issued, shared by every object's
        passes for :data:`ISSUER_READ_TTL_S`."""

    @property
    def acm(self) -> AcmImporter:
        """The ACM client side of auto-issue (shared with the orphan sweep)."""
        return self._acm

    @property
    def cluster(self) -> ClusterIdentity:
        """This cluster's identity, tagged on every import (shared with the orphan sweep)."""
        return self._cluster

    async def listing(self, namespace: str) -> NamespaceListing:
        """The configs, objectives and rewrites of ``namespace``, for every pass of one resync."""
        self._sequence += 1
        sequence = self._sequence
        configs = await self._kube.list(IGWC_API_VERSION, KIND, namespace)
        listed = {_identity(config)[2] for config in configs}
        with self._doomed_lock:
            if namespace in self._doomed:  # uids not listed are gone for good
                self._doomed[namespace] &= listed
                if not self._doomed[namespace]:
                    del self._doomed[namespace]
        objectives, rewrites = await self._list_bindable(namespace)
        return NamespaceListing(sequence, configs, objectives, rewrites)

    def served(self, api_version: str, kind: str) -> None:
        """A watch delivered an object of ``kind``: it is served (see :meth:`Kube.served`)."""
        self._kube.served(api_version, kind)

    async def reconcile(self, namespace: str, name: str, *, listed: NamespaceListing | None = None) -> bool:
        """One pass over the object; ``False`` when it no longer exists (or is being deleted).

        ``listed``: the namespace's lists taken once for a whole resync (:meth:`listing`); ignored
        when a pass of this object began after it was taken (that pass read newer lists: going back
        to older ones would undo what it applied until the next resync)."""
        key = (namespace, name)
        self._pending[key] = self._pending.get(key, 0) + 1
        try:
            return await self._reconcile(key, listed)
        finally:
            if self._pending[key] == 1:
                del self._pending[key]
            else:
                self._pending[key] -= 1

    def busy(self, namespace: str, name: str) -> bool:
        """Whether a pass of the object is running or waiting its turn: a resync pass queued behind it
        would read the same state again (:meth:`igw.operator.handlers.Resync.pass_all` skips it)."""
        return (namespace, name) in self._pending

    async def _reconcile(self, key: tuple[str, str], listed: NamespaceListing | None) -> bool:
        namespace, name = key
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if listed is not None and self._last_pass.get(key, 0) > listed.sequence:
                listed = None
            self._sequence += 1
            self._last_pass[key] = self._sequence
            igwc = await self._kube.get(IGWC_API_VERSION, KIND, namespace, name)
            if igwc is not None and self._leaving.get(key) != (igwc.get("metadata") or {}).get("uid"):
                self._leaving.pop(key, None)  # made anew under its name
            if igwc is None or (igwc.get("metadata") or {}).get("deletionTimestamp"):
                self._leaving.pop(key, None)
                self._locks.pop(key, None)
                self._last_pass.pop(key, None)
                self._certificates_gone.pop(key, None)
                self._terminating.discard(key)
                self._noted.pop(key, None)
                self._renewal_noted.pop(key, None)
                self._import_noted.pop(key, None)
                self._issuer_noted.pop(key, None)
                self._restore_noted.pop(key, None)
                self._withdrawn_noted.pop(key, None)
                self._not_kept_noted.pop(key, None)
                self._unreadable_noted.pop(key, None)
                self._restored_noted.pop(key, None)
                self._apply_failed_noted.pop(key, None)
                self._skew_noted.pop(key, None)
                self._bound_skew_noted.pop(key, None)
                self._admitted.pop(key, None)
                self._claims.pop(key, None)
                return False
            if self._doomed_config(igwc):
                await self._report_doomed(igwc)
                return True
            await self._pass(igwc, listed)
            return True

    def leaving(self, igwc: Mapping[str, Any]) -> None:
        """The watch shows ``igwc`` deleted, or being deleted (its namespace's too): a pass of it
        still running applies, writes and posts nothing more (:meth:`_gone`)."""
        namespace, name, uid = _identity(igwc)
        if namespace and name and uid:
            self._leaving[(namespace, name)] = uid

    def _gone(self, igwc: Mapping[str, Any]) -> bool:
        """Whether the watch reported ``igwc`` deleted or being deleted since its pass read it
        (:meth:`leaving`); the pass then ends where it is: every write after it was pointless
        (refused, or about an object the namespace controller is removing)."""
        namespace, name, uid = _identity(igwc)
        if self._leaving.get((namespace, name)) != uid:
            return False
        log.debug("%s/%s: deleted while its pass ran; pass ended", namespace, name)
        return True

    def _doomed_config(self, igwc: Mapping[str, Any]) -> bool:
        """Whether ``igwc`` was in its namespace when the API server refused a pass there because the
        namespace is being deleted (:attr:`_doomed`)."""
        namespace, _, uid = _identity(igwc)
        with self._doomed_lock:
            return bool(uid) and uid in self._doomed.get(namespace, ())

    def _doom(self, namespace: str, configs: Sequence[Mapping[str, Any]]) -> None:
        """``namespace`` is being deleted: ``configs`` (listed in it) go with it (:attr:`_doomed`).
        Called in a Kube worker thread too (:meth:`Kube.apply_all`'s ``terminating``)."""
        uids = {uid for config in configs if (uid := _identity(config)[2])}
        with self._doomed_lock:
            self._doomed.setdefault(namespace, set()).update(uids)

    async def _report_doomed(self, igwc: Mapping[str, Any]) -> None:
        """The pass of a config whose namespace is being deleted: ``GatewayProgrammed``
        ``NamespaceTerminating`` once in its status, nothing read or written of its data plane."""
        namespace, name, _ = _identity(igwc)
        self._terminating.add((namespace, name))
        message = (
            f"namespace {namespace} is being deleted: the API server creates nothing new in it, so "
            "the operator no longer reconciles this object; its data plane goes with the namespace"
        )
        log.debug("%s/%s: %s", namespace, name, message)
        wanted = namespace_terminating_conditions(igwc, message, now=self._clock())
        if wanted is not None:
            await self._kube.write_status(igwc, {"conditions": wanted})

    async def reconcile_bound(self, obj: Mapping[str, Any]) -> None:
        """An InferenceObjective / InferenceModelRewrite changed: reconcile its config, or mark it unbound."""
        meta = obj.get("metadata") or {}
        namespace, pool = meta.get("namespace"), pool_name(obj)
        if not namespace or meta.get("deletionTimestamp"):
            return
        if pool and await self._kube.get(IGWC_API_VERSION, KIND, namespace, pool) is not None:
            await self.reconcile(namespace, pool)
            return
        message = f'no InferenceGatewayConfig "{pool}" in namespace "{namespace}" (spec.poolRef.name)'
        await self._write_verdict(obj, unbound("PoolNotFound", message))

    async def _list_bindable(self, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every InferenceObjective and InferenceModelRewrite of ``namespace`` (none of a kind whose
        CRD is not installed)."""
        found: list[list[dict[str, Any]]] = []
        for kind in (OBJECTIVE_KIND, REWRITE_KIND):
            try:
                found.append(await self._kube.list(EXTENSION_API_VERSION, kind, namespace))
            except Exception as exc:  # the CRD is not installed: nothing can bind
                log.debug("%s: cannot list %s: %s", namespace, kind, _error_text(exc))
                found.append([])
        return found[0], found[1]

    async def _bound(
        self, namespace: str, name: str, listed: NamespaceListing | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The objectives and rewrites of ``namespace`` whose ``spec.poolRef.name`` is ``name``."""
        objectives, rewrites = (
            (listed.objectives, listed.rewrites)
            if listed is not None
            else await self._list_bindable(namespace)
        )
        return [o for o in objectives if pool_name(o) == name], [o for o in rewrites if pool_name(o) == name]

    async def _report_bindings(
        self,
        igwc: Mapping[str, Any],
        bound: tuple[list[dict[str, Any]], list[dict[str, Any]]],
        merged: Merge,
        refusal: Refusal | None,
    ) -> None:
        name = igwc["metadata"]["name"]
        for kind, objects in zip((OBJECTIVE_KIND, REWRITE_KIND), bound, strict=True):
            for obj in objects:
                verdict = merged.verdicts[kind, obj["metadata"]["name"]]
                if refusal is not None and verdict.accepted:
                    verdict = unbound(
                        "PoolNotAccepted",
                        f'InferenceGatewayConfig "{name}" is not admitted ({refusal.reason}): '
                        + refusal.message,
                    )
                await self._write_verdict(obj, verdict)

    async def _write_verdict(self, obj: Mapping[str, Any], verdict: Verdict) -> None:
        meta = obj["metadata"]
        previous = (obj.get("status") or {}).get("conditions") or []
        wanted = conditions(verdict, previous, now=self._clock(), generation=meta.get("generation"))
        if wanted == previous:
            return
        try:
            await self._kube.write_status(
                obj, {"conditions": wanted}, api_version=EXTENSION_API_VERSION, kind=str(obj.get("kind"))
            )
        except Exception as exc:  # reported in the log; the next pass writes it again
            log.warning(
                "%s/%s: writing %s status failed: %s",
                meta["namespace"],
                meta["name"],
                obj.get("kind"),
                _error_text(exc),
            )

    async def _pass(self, igwc: dict[str, Any], listed: NamespaceListing | None = None) -> None:
        meta = igwc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if listed is not None:
            neighbours = listed.configs
        else:
            neighbours = await self._kube.list(IGWC_API_VERSION, KIND, namespace)
        bound = await self._bound(namespace, name, listed)
        spec = igwc.get("spec") or {}
        if isinstance(spec, Mapping) and isinstance(spec.get("extensions", {}), Mapping):
            resolved, bound_checked = await self._resolve_bound_skew(igwc, bound)
            merged = merge(spec, *resolved, bound_checked)
            served = {**igwc, "spec": merged.spec}
        else:  # admission refuses it, naming the type (a cluster without the CRD's schema stores it)
            merged, served = Merge(spec={}), igwc
        served, checked = await self._resolve_skew(served)
        await self._recall_claims(namespace, neighbours)  # the last await before admit and _claim
        claims = [claim for (where, _), claim in self._claims.items() if where == namespace]
        refusal = admit(served, neighbours, claims, checked)
        self._claim(igwc, served, admitted=refusal is None)  # no await between: passes interleave
        if self._gone(igwc):
            return
        if self._doomed_config(igwc):  # a neighbour's pass found the namespace being deleted
            await self._report_doomed(igwc)
            return
        apply_error: str | None = None
        apply_reason = "ApplyFailed"
        tls = TlsOutcome()
        target: dict[str, Any] | None = served
        issued_arn: str | None = None
        kept_over: tuple[str | None] | None = None  # the annotation's value this pass replaced
        source = ""  # where a refused spec's restore read the last admitted spec
        if refusal is not None:
            # The previous data plane keeps serving: objects of it deleted or changed meanwhile are
            # put back from the last admitted spec (none: nothing is applied).
            target, source = await self._last_admitted(igwc)
            if target is not None and _names_import(igwc):
                issued_arn = str(((igwc.get("status") or {}).get("tls") or {}).get("acmArn"))
        elif wants_auto_issue(igwc.get("spec") or {}):
            self._certificates_gone.pop(_identity(igwc)[:2], None)
            tls = await self._auto_issue(igwc) if self._auto_tls.enabled else _AUTO_TLS_DISABLED
            issued_arn = tls.acm_arn
        if target is not None:
            try:
                egress = await self._service_egress(igwc, target)
                objects = [
                    *([] if tls.certificate is None else [tls.certificate]),
                    *desired_objects(
                        target, self._settings, issued_acm_arn=issued_arn, service_egress=egress
                    ),
                ]
                planned = [(desired, initial_only_fields(desired, target)) for desired in objects]
                if refusal is None:  # before the apply: the annotation is never behind what is served
                    kept_over = await self._keep_admitted(igwc, target, planned)
                refused_here: list[bool] = []

                def terminating() -> None:  # in the worker thread, at this pass's first refusal
                    refused_here.append(True)  # this pass goes on: its status names what was refused
                    self._doom(namespace, [*neighbours, igwc])

                written = await self._kube.apply_all(
                    planned,
                    abandon=lambda: self._gone(igwc) or (not refused_here and self._doomed_config(igwc)),
                    terminating=terminating,
                )
                for label in written:
                    log.info(
                        "%s/%s: applied %s%s",
                        namespace,
                        name,
                        label,
                        ""
                        if refusal is None
                        else f" (restored from the last admitted spec, read from {source})",
                    )
                if refusal is None:
                    self._admitted[(namespace, name)] = (meta.get("uid"), dict(served["spec"]))
                elif written:
                    await self._note_restored(igwc, refusal, written, source)
                self._claim(igwc, target, applied=True)
                self._note_applied(igwc)
                await self._retire_autoscaler(target)
                await self._retire_network_policy(target)
            except Exception as exc:  # any API refusal is reported on the object, not raised
                if isinstance(exc, PassAbandoned):
                    if not self._gone(igwc):  # a neighbour's pass found the namespace being deleted
                        await self._report_doomed(igwc)
                    return
                apply_error = _error_text(exc)
                if kept_over is not None and isinstance(exc, NothingApplied):
                    await self._put_back_admitted(igwc, kept_over[0])
                if namespace_terminating(exc):
                    # Not a fault to retry: the namespace's deletion removes the object and its data
                    # plane; logged once, where a WARNING every resync pass went on until it was gone.
                    apply_reason = "NamespaceTerminating"
                    self._doom(namespace, [*neighbours, igwc])
                    first = (namespace, name) not in self._terminating
                    self._terminating.add((namespace, name))
                    log.log(logging.INFO if first else logging.DEBUG, "%s/%s: %s", namespace, name, exc)
                elif await self._deleted_meanwhile(igwc):
                    return
                else:
                    self._note_apply_failed(igwc, apply_error)
        retired = False
        if refusal is None and apply_error is None and not wants_auto_issue(igwc.get("spec") or {}):
            # The spec stopped asking for auto-issue and the Service no longer names the imported
            # certificate: delete it (ACM refuses while the load balancer still uses it; retried).
            # Once ACM let it go, the Certificate and its Secret go too.
            retired = await self._forget_import(igwc)
            if retired or not _names_import(igwc):
                await self._retire_certificate(igwc)
        if self._gone(igwc):
            return
        seen = Observation(
            refusal=refusal,
            programmed=False,
            apply_error=apply_error,
            apply_reason=apply_reason,
            served_spec=None,
            deployment=None,
            service=None,
            tls_problem=tls.problem,
            tls_status=tls.status,
            tls_retired=retired,
            tls_renewal=tls.renewal,
            tls_issuer=None if tls.issuer is None else tls.issuer[1],
            tls_reissue=tls.reissue,
            network_policy=self._settings.network_policy,
        )
        try:
            seen = await self._observe(igwc, seen)
        except Exception as exc:  # a read the API server refuses (RBAC, a policy) is reported on the object
            if await self._deleted_meanwhile(igwc):
                return
            # Raised, it ended the pass before the status write: the object kept no status at all (not
            # even an ApplyFailed this pass found) and the resync logged an ERROR every pass.
            text = refusal_text(exc)
            log.warning("%s/%s: reading the data plane failed: %s", namespace, name, text)
            seen = replace(seen, observe_error=f"the operator could not read the data plane: {text}")
        if self._gone(igwc):
            return
        await self._report_bindings(igwc, bound, merged, refusal)
        status, transitions = compute_status(igwc, seen, now=self._clock())
        if _differs(status, igwc.get("status") or {}) and not await self._kube.write_status(igwc, status):
            # Deleted during the pass, or deleted and made anew under its name: the new object's own
            # pass reports on it; this one's status and transitions were the old object's.
            log.debug("%s/%s: deleted or made anew while its pass ran; status not written", namespace, name)
            return
        if self._gone(igwc) or (namespace, name) in self._terminating:
            return  # an Event in a namespace being deleted is refused (it takes nothing new)
        for transition in transitions:
            await self._post(igwc, transition)
        await self._post_notes(igwc)
        await self._post_renewal(igwc, tls.renewal)
        await self._post_renewal(igwc, tls.issuer, noted=self._issuer_noted)

    async def _recall_claims(self, namespace: str, configs: list[dict[str, Any]]) -> None:
        """Start this process's record of ``namespace`` (:attr:`_claims`) from what its configs'
        data planes serve, once: the models of each served ConfigMap (one list of the namespace's
        ConfigMaps) and of its :data:`LAST_ADMITTED_ANNOTATION` (written before the spec is applied:
        ahead of the ConfigMap when a process stopped between the two writes).

        The record is per process. Started from ``status.models`` alone, a config admitted just before
        a restart (or a change of leader) whose status was never written looked to serve nothing: an
        older config edited to take its model was admitted, and both data planes served it. A config
        already recorded (a pass of this process admitted it meanwhile) is left as recorded; a list
        refused (RBAC narrowed by hand) is logged, the statuses serve meanwhile, and the next pass
        tries again."""
        if namespace in self._recalled:
            return
        try:
            config_maps = await self._kube.list(
                "v1", "ConfigMap", namespace, label_selector=f"app.kubernetes.io/managed-by={MANAGED_BY}"
            )
        except OperatorStopping:
            raise
        except Exception as exc:  # logged, not raised: the pass goes on from the statuses
            log.warning(
                "%s: listing the served ConfigMaps failed (model claims from the statuses only): %s",
                namespace,
                refusal_text(exc),
            )
            return
        self._recalled.add(namespace)
        served: dict[str, frozenset[str]] = {}
        for config_map in config_maps:
            for ref in (config_map.get("metadata") or {}).get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == KIND and ref.get("uid"):
                    served[str(ref["uid"])] = _config_map_models(config_map)
        for config in configs:
            meta = config.get("metadata") or {}
            key, uid = (namespace, str(meta.get("name") or "")), str(meta.get("uid") or "")
            if not uid or key in self._claims:
                continue
            annotated = await self._annotated(config)
            # Both: the annotation is written before its spec is applied, so a process stopped
            # between the two leaves it ahead of the ConfigMap, and a refusal restores it.
            models = served.get(uid, frozenset()) | (
                model_names(annotated) if annotated is not None else frozenset()
            )
            if models:
                self._claims[key] = Claim(
                    uid=uid,
                    name=key[1],
                    namespace=namespace,
                    created=str(meta.get("creationTimestamp") or ""),
                    wanted=model_names(config),
                    serving=models,
                )

    def _claim(
        self,
        igwc: Mapping[str, Any],
        spec_of: Mapping[str, Any],
        *,
        admitted: bool = False,
        applied: bool = False,
    ) -> None:
        """Record what ``igwc`` may serve (:class:`~igw.operator.admission.Claim`): the models of
        ``spec_of`` added when it is ``admitted`` (before the apply: the data plane may serve either
        spec until it is written), exactly those once ``applied`` in full. A config this process has
        no record of starts from its ``status.models`` (after a restart, a change of leader)."""
        meta = igwc["metadata"]
        key, uid = (meta["namespace"], meta["name"]), str(meta.get("uid") or "")
        previous = self._claims.get(key)
        models = model_names(spec_of)
        same = previous is not None and previous.uid == uid
        serving = previous.serving if previous is not None and same else frozenset(served_models(igwc))
        if applied:
            serving = models
        elif admitted:
            serving = serving | models
        wanted = previous.wanted if applied and previous is not None and same else models
        self._claims[key] = Claim(
            uid=uid,
            name=meta["name"],
            namespace=meta["namespace"],
            created=str(meta.get("creationTimestamp") or ""),
            wanted=wanted,
            serving=serving,
        )

    async def _keep_admitted(
        self,
        igwc: Mapping[str, Any],
        admitted: Mapping[str, Any],
        planned: list[tuple[Mapping[str, Any], tuple[str, ...]]],
    ) -> tuple[str | None] | None:
        """Write ``admitted``'s spec into ``igwc``'s :data:`LAST_ADMITTED_ANNOTATION` when it differs,
        before that spec is applied, returning the value it replaced (``(None,)``: there was none) for
        :meth:`_put_back_admitted`, ``None`` when nothing was written; a write refused (or the process
        stopping) raises
        :class:`~igw.operator.kube.NothingApplied`, so nothing is applied this pass (the next one
        tries again). The ``planned`` data plane is dry-run first (:meth:`Kube.dry_run_all`): while the
        API server refuses it whole, every pass (each resync too) wrote the annotation forward and
        then back (:meth:`_put_back_admitted`), two writes of the object per pass; now its refusal
        (:class:`~igw.operator.kube.NothingApplied`) ends the pass before any write.

        Written after the apply, an operator stopped between the two writes left the
        annotation one admitted spec behind the ConfigMap: after a restart the ConfigMap, differing from
        it, was distrusted and a refusal restored the older spec - taking back a model the newer one
        gave up, which another config may hold by then. Ahead is safe: the spec was admitted (and
        claimed, :meth:`_recall_claims` reading both). A spec that does not fit even compressed
        (:func:`last_admitted_room`) empties it, so no older spec is restored in its place, and is
        reported: a WARNING line and a ``LastAdmittedSpecNotKept`` Warning Event once per generation."""
        meta = igwc["metadata"]
        text = last_admitted_text(admitted.get("spec") or {})
        room = last_admitted_room(meta.get("annotations") or {})
        too_large = len(text) > room
        if too_large:
            await self._note_not_kept(igwc, len(json.dumps(admitted.get("spec") or {})), len(text), room)
            text = ""
        current = (meta.get("annotations") or {}).get(LAST_ADMITTED_ANNOTATION)
        if current == text or (current is None and not text):
            return None
        await self._kube.dry_run_all(planned)
        try:
            kept = await self._kube.annotate(igwc, LAST_ADMITTED_ANNOTATION, text)
        except OperatorStopping:
            raise
        except Exception as exc:  # reported as the pass's apply failure: nothing is applied
            raise NothingApplied(
                f"keeping the admitted spec in annotation {LAST_ADMITTED_ANNOTATION} failed, so it was "
                f"not applied (the next pass tries again): {refusal_text(exc)}"
            ) from exc
        if not kept:  # deleted or made anew meanwhile: its own pass applies its spec
            raise NothingApplied(f"{meta['namespace']}/{meta['name']} was deleted or made anew meanwhile")
        return (current if isinstance(current, str) else None,)

    async def _put_back_admitted(self, igwc: Mapping[str, Any], previous: str | None) -> None:
        """Put :data:`LAST_ADMITTED_ANNOTATION` back to ``previous`` (``None``: remove it) after the API
        server refused the whole apply (:class:`~igw.operator.kube.NothingApplied`) of the spec
        :meth:`_keep_admitted` had just written into it. Left ahead of the served ConfigMap, it
        outlived the process: after a restart a refusal found the two differing, took the annotation
        for the admitted spec and restored the spec the API server refuses (``ApplyFailed`` again,
        the pods kept the older spec). Best effort: a refused write is logged (WARNING) and the
        annotation stays ahead until the next pass that applies."""
        meta = igwc["metadata"]
        try:
            await self._kube.annotate(igwc, LAST_ADMITTED_ANNOTATION, previous)
        except OperatorStopping:
            raise
        except Exception as exc:  # the apply failure is what the status reports
            log.warning(
                "%s/%s: putting annotation %s back after nothing was applied failed: %s",
                meta["namespace"],
                meta["name"],
                LAST_ADMITTED_ANNOTATION,
                refusal_text(exc),
            )
        else:
            log.info(
                "%s/%s: annotation %s put back to the last spec applied, as nothing of this one was",
                meta["namespace"],
                meta["name"],
                LAST_ADMITTED_ANNOTATION,
            )

    async def _note_not_kept(
        self, igwc: Mapping[str, Any], spec_chars: int, kept_chars: int, room: int
    ) -> None:
        """Report once per generation (per process) that the admitted spec is not kept in
        :data:`LAST_ADMITTED_ANNOTATION`, naming the sizes and what it means for a restore."""
        meta = igwc["metadata"]
        key, mark = (meta["namespace"], meta["name"]), (meta.get("uid"), meta.get("generation"))
        if not _newly_noted(self._not_kept_noted, key, mark):
            return
        message = (
            f"the admitted spec ({spec_chars} characters of JSON, {kept_chars} compressed) is not kept in "
            f"annotation {LAST_ADMITTED_ANNOTATION}: it holds at most {room} (of the API server's "
            f"{ANNOTATIONS_MAX_BYTES} bytes for all of an object's annotations, the other annotations "
            f"take the rest); if a later spec is refused, its data plane is restored from ConfigMap "
            f"{meta['namespace']}/{base_name(meta['name'])}-config, which an operator restart with that "
            "ConfigMap deleted leaves nothing to restore from"
        )
        log.warning("%s/%s: %s", key[0], key[1], message)
        await self._event(igwc, reason=NOT_KEPT_REASON, message=message, warning=True)

    async def _note_restored(
        self, igwc: Mapping[str, Any], refusal: Refusal, written: tuple[str, ...], source: str
    ) -> None:
        """Post the :data:`RESTORED_REASON` Normal Event once per generation (per process): the objects
        ``written`` back for the refused spec and the ``source`` of the spec they came from."""
        meta = igwc["metadata"]
        key, mark = (meta["namespace"], meta["name"]), (meta.get("uid"), meta.get("generation"))
        if not _newly_noted(self._restored_noted, key, mark):
            return
        message = (
            f"the spec is not accepted ({refusal.reason}), so the last admitted spec keeps serving: "
            f"put back {', '.join(written)} from {source}"
        )
        await self._event(igwc, reason=RESTORED_REASON, message=message, warning=False)

    async def _last_admitted(self, igwc: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
        """``igwc`` with the last spec admitted for it (to restore the data plane of a refused spec),
        or ``None`` when there is none to serve; and where that spec was read (for the log and the
        :data:`RESTORED_REASON` Event: a ConfigMap, this operator's memory or the annotation).

        From the served ConfigMap this object controls, which holds that spec (objectives and rewrites
        merged), so it survives an operator restart, unless it differs from what this process applied
        last, or else from the annotation (rewritten by hand: restored as it was, a ConfigMap of a refused
        config edited to take a neighbour's model was served, claimed, and the neighbour refused for
        it); when that ConfigMap is gone, from what this
        process applied last for the object, else from the object's :data:`LAST_ADMITTED_ANNOTATION`
        (after a restart: without it, a refused config whose ConfigMap was then deleted had no data
        plane to restore). A ConfigMap rewritten into no valid config is left as it
        is (``ServedConfigInvalid`` reports it) until a spec is admitted. Before, nothing was applied
        for a refused spec: a Deployment or ConfigMap deleted or scaled meanwhile stayed so, and
        GatewayProgrammed said no spec had ever been admitted."""
        meta = igwc["metadata"]
        namespace, base = meta["namespace"], base_name(meta["name"])
        uid = str(meta.get("uid") or "")
        config_map = _controlled(await self._kube.get("v1", "ConfigMap", namespace, f"{base}-config"), uid)
        candidate: dict[str, Any] | None = None
        if (remembered := self._admitted.get((namespace, meta["name"]))) and remembered[0] == uid:
            known: tuple[str, dict[str, Any] | None] = (
                "this operator's memory",
                {**igwc, "spec": remembered[1]},
            )
        else:
            known = (f"annotation {LAST_ADMITTED_ANNOTATION}", await self._annotated(igwc))
        if config_map is not None:
            where = f"ConfigMap {namespace}/{base}-config"
            document, _ = _served_document(config_map, where)
            same = document is not None and (document.get("metadata") or {}).get("name") == meta["name"]
            if not same or document is None:
                return None, where
            candidate = {**igwc, "spec": document["spec"]}
            if known[1] is not None and known[1].get("spec") != document["spec"]:
                # Rewritten by hand since it was admitted: the spec admitted is put back, not the
                # edit (which may take a neighbour's model: restored, it was served and claimed).
                where, candidate = known
        else:
            where, candidate = known
        refusal = None
        if candidate is not None:
            candidate, checked = await self._resolve_restored_skew(candidate, where)
            refusal = spec_refusal(candidate, checked)
        if refusal is not None:  # the checks of a new spec: see admission.spec_refusal
            mark = (uid, f"the last admitted spec ({where}) is not restored: {refusal.message}")
            if _newly_noted(self._restore_noted, (namespace, meta["name"]), mark):
                log.warning("%s/%s: %s", namespace, meta["name"], mark[1])
            return None, where
        return candidate, where

    async def _annotated(self, igwc: Mapping[str, Any]) -> dict[str, Any] | None:
        """``igwc`` with the spec its :data:`LAST_ADMITTED_ANNOTATION` keeps, else ``None``; a value that
        holds none (not empty: emptied on purpose, :meth:`_keep_admitted`) is reported once per
        generation, naming the object and why, never the value: a WARNING line and an
        :data:`UNREADABLE_REASON` Warning Event."""
        spec, problem = _annotated_spec(igwc)
        if problem is not None:
            meta = igwc.get("metadata") or {}
            key, mark = (
                (str(meta.get("namespace")), str(meta.get("name"))),
                (meta.get("uid"), meta.get("generation")),
            )
            if _newly_noted(self._unreadable_noted, key, mark):
                message = (
                    f"annotation {LAST_ADMITTED_ANNOTATION} is ignored: {problem}; until a spec is admitted "
                    f"(which rewrites it), a refused spec's data plane is restored only from ConfigMap "
                    f"{key[0]}/{base_name(key[1])}-config"
                )
                log.warning("%s/%s: %s", key[0], key[1], message)
                await self._event(igwc, reason=UNREADABLE_REASON, message=message, warning=True)
        return spec

    async def _deleted_meanwhile(self, igwc: Mapping[str, Any]) -> bool:
        """Whether ``igwc`` was deleted (or is being deleted, or was made anew) since its pass read it.

        A pass still running when the object, or its namespace, went refused its writes (``namespaces
        "x" not found``, an orphan it may not adopt) and logged that as a failure: a WARNING, then an
        ERROR with the client's traceback text when the status write found the object gone."""
        meta = igwc["metadata"]
        now = await self._kube.get(IGWC_API_VERSION, KIND, meta["namespace"], meta["name"])
        now_meta = (now or {}).get("metadata") or {}
        if (
            now is not None
            and now_meta.get("uid") == meta.get("uid")
            and not now_meta.get("deletionTimestamp")
        ):
            return False
        log.debug("%s/%s: deleted while its pass ran; nothing more to apply", meta["namespace"], meta["name"])
        return True

    async def _post(self, igwc: Mapping[str, Any], transition: Transition) -> None:
        """Post one transition as an Event, best effort: an Event the API server refuses (403 where
        the operator may not create Events, 429 under load, a namespace's quota) is logged, as
        client-go's recorder drops it. Raised, it ended the pass after the status write, so the
        transitions after it were never posted and kopf retried the whole handler a minute later."""
        await self._event(
            igwc,
            reason=f"{transition.type}{transition.reason}",
            message=f"{transition.type}={transition.status}: {transition.message}",
            warning=transition.warning,
        )

    async def _event(self, igwc: Mapping[str, Any], *, reason: str, message: str, warning: bool) -> None:
        """Post an Event about ``igwc``, best effort (:meth:`_post` says why): a refusal is logged, at
        DEBUG when the namespace is being deleted (it takes no new Event: expected), else WARNING."""
        try:
            await self._kube.event(igwc, reason=reason, message=message, warning=warning)
        except Exception as exc:  # events are best effort; the status already says it
            meta = igwc["metadata"]
            log.log(
                logging.DEBUG if namespace_terminating(exc) else logging.WARNING,
                "%s/%s: posting the %s event failed: %s",
                meta["namespace"],
                meta["name"],
                reason,
                refusal_text(exc),
            )

    async def _post_renewal(
        self,
        igwc: Mapping[str, Any],
        problem: str | tuple[str, str] | None,
        *,
        noted: dict[tuple[str, str], tuple[object, str]] | None = None,
    ) -> None:
        """One Warning Event each time a problem with the renewal of ``igwc``'s auto-issued certificate
        changes (the status's GatewayProgrammed message carries it meanwhile): ``CertificateRenewalFailed``
        for a message, or the ``(reason, message)`` given (the issuer gone or NotReady, remembered in
        ``noted``). Best effort, as :meth:`_post`."""
        meta = igwc["metadata"]
        key = (meta["namespace"], meta["name"])
        noted = self._renewal_noted if noted is None else noted
        if problem is None:
            noted.pop(key, None)
            return
        reason, message = (RENEWAL_REASON, problem) if isinstance(problem, str) else problem
        mark = (meta.get("uid"), message)
        if not _newly_noted(noted, key, mark):
            return
        log.warning("%s/%s: %s", key[0], key[1], message)
        await self._event(igwc, reason=reason, message=message, warning=True)

    async def _service_egress(self, igwc: Mapping[str, Any], served: Mapping[str, Any]) -> ServiceEgress:
        """The pod ports behind ``served``'s in-cluster Services (JWKS, OIDC discovery, Redis, default
        backend, the operator's OTLP collector and CloudWatch agent) for its NetworkPolicy; those it
        cannot resolve logged and reported in one Warning Event (``ServicePortUnresolved``) each time
        they change, naming the rule that opens them."""
        if not self._settings.network_policy:
            return ServiceEgress()
        settings = self._settings
        emf = settings.emf_endpoint if settings.emf_interval_s > 0 else None  # no interval: no documents
        refs = service_refs(served, otlp_endpoint=settings.otlp_endpoint, emf_endpoint=emf)
        egress = await resolve(self._service_reads, refs)
        meta = igwc["metadata"]
        key, mark = (meta["namespace"], meta["name"]), (meta.get("uid"), egress.unresolved)
        if not _newly_noted(self._ports_noted, key, mark):
            return egress
        if not egress.unresolved:
            return egress
        message = "; ".join(egress.unresolved)
        log.warning("%s/%s: %s", key[0], key[1], message)
        await self._event(igwc, reason=PORTS_REASON, message=message, warning=True)
        return egress

    async def _resolve_skew(self, served: dict[str, Any]) -> tuple[dict[str, Any], tuple[Problem, ...]]:
        """``served`` without the fields a newer served CRD defaults, and the problems of what is left,
        by :func:`igw.operator.crd_skew.resolve_skew` (an operator older than its CRD, mid-upgrade).
        The CRD is read only when the spec has a field this operator does not know. What was left
        out is noted once per generation: an INFO line and a Normal Event (not a Warning: nothing the
        user wrote is lost, a newer operator serves the default itself)."""
        problems = validate_document(served_document(served))
        if not any(p.rule == UNKNOWN_FIELD_RULE for p in problems):
            return served, tuple(problems)
        skew = resolve_skew(served, problems, await self._served_schema())
        if skew.dropped:
            meta = served["metadata"]
            key = (meta["namespace"], meta["name"])
            if _newly_noted(self._skew_noted, key, (meta.get("uid"), meta.get("generation"), skew.dropped)):
                said = (
                    f"{', '.join(skew.dropped)}: declared and defaulted by the served CRD {CRD_NAME}, "
                    f"which is newer than this operator (igw {__version__}); left out of the served "
                    "configuration (the value is the newer version's default)"
                )
                log.info("%s/%s: %s", key[0], key[1], said)
                await self._event(served, reason=SKEW_REASON, message=said, warning=False)
        return dict(skew.igwc), skew.problems

    async def _served_schema(self, name: str = CRD_NAME, version: str = API_VERSION) -> ServedSchema | None:
        """The served CRD ``name``'s schema of ``version`` (read at most every few seconds, parsed once
        per generation); ``None`` when it cannot be read (the operator's RBAC lacks it): unknown fields
        are refused."""
        try:
            crd = await self._service_reads.get(CRD_API_VERSION, "CustomResourceDefinition", "", name)
        except Exception as exc:  # refused as before; said once per distinct error
            text = _error_text(exc)
            if text != self._crd_unreadable.get(name):
                self._crd_unreadable[name] = text
                log.warning("reading the %s CRD failed (its defaults are refused): %s", name, text)
            return None
        self._crd_unreadable.pop(name, None)
        if crd is None:
            return None
        meta = crd.get("metadata") or {}
        mark = (meta.get("uid"), meta.get("generation"))
        known = self._served_crd.get(name)
        if known is None or known[0] != mark:
            known = self._served_crd[name] = (mark, served_schema(crd, version))
        return known[1]

    async def _resolve_bound_skew(
        self, igwc: Mapping[str, Any], bound: tuple[list[dict[str, Any]], list[dict[str, Any]]]
    ) -> tuple[tuple[list[dict[str, Any]], list[dict[str, Any]]], Checked]:
        """The objects bound to ``igwc`` without the fields their own served CRD (newer than this
        operator) defaults, and the problems of those that had a field this operator does not know
        (:func:`igw.operator.crd_skew.resolve_skew`, each looked up in the CRD of its kind). Each
        object's fields left out are noted once per generation of it: an INFO line and a Normal
        Event on the object. Before, such an object was refused ``unknown field`` (not merged)."""
        checked: dict[tuple[str, str], list[Problem]] = {}
        notes: dict[tuple[str, str], _SkewMark] = {}
        noted_objects: dict[tuple[str, str], Mapping[str, Any]] = {}
        resolved: list[list[dict[str, Any]]] = []
        for kind, objects in zip((OBJECTIVE_KIND, REWRITE_KIND), bound, strict=True):
            out: list[dict[str, Any]] = []
            for obj in objects:
                problems = validate_resource(obj)
                if not any(p.rule == UNKNOWN_FIELD_RULE for p in problems):
                    checked[kind, _name_of(obj)] = problems  # merge validates each object once
                    out.append(obj)
                    continue
                skew = resolve_skew(
                    obj,
                    problems,
                    await self._served_schema(*EXTENSION_CRDS[kind]),
                    validate=validate_resource,
                )
                meta = obj.get("metadata") or {}
                key = (kind, _name_of(obj))
                checked[key] = list(skew.problems)
                out.append(dict(skew.igwc))
                if skew.dropped:
                    notes[key] = (meta.get("uid"), meta.get("generation"), skew.dropped)
                    noted_objects[key] = obj
            resolved.append(out)
        config = _identity(igwc)[:2]
        before = self._bound_skew_noted.get(config, {})
        if notes:
            self._bound_skew_noted[config] = notes
        else:
            self._bound_skew_noted.pop(config, None)
        for (kind, name), mark in notes.items():
            if before.get((kind, name)) == mark:
                continue
            said = (
                f"{', '.join(mark[2])}: declared and defaulted by the served CRD {EXTENSION_CRDS[kind][0]}"
                f", which is newer than this operator (igw {__version__}); left out of what is merged into "
                "the InferenceGatewayConfig (the value is the newer version's default)"
            )
            log.info("%s/%s %s: %s", config[0], name, kind, said)
            await self._event(noted_objects[kind, name], reason=SKEW_REASON, message=said, warning=False)
        return (resolved[0], resolved[1]), checked

    async def _resolve_restored_skew(
        self, candidate: dict[str, Any], where: str
    ) -> tuple[dict[str, Any], tuple[Problem, ...] | None]:
        """``candidate`` (a last admitted spec about to be restored) by
        :func:`igw.operator.crd_skew.resolve_skew` with ``restoring``: a newer CRD's defaults left out
        as in a pass; fields neither this operator nor the served CRD knows (written by a newer
        operator, rolled back since) left out too, once per distinct set a WARNING line and a Warning
        Event. Before, such a spec was not restored at all after a rollback. The problems of what is
        left (``None``: none unknown, :func:`spec_refusal` validates)."""
        problems = validate_document(served_document(candidate))
        if not any(p.rule == UNKNOWN_FIELD_RULE for p in problems):
            return candidate, None
        skew: Skew = resolve_skew(candidate, problems, await self._served_schema(), restoring=True)
        if skew.withdrawn:
            meta = candidate["metadata"]
            key = (meta["namespace"], meta["name"])
            said = (
                f"{', '.join(skew.withdrawn)}: in the last admitted spec ({where}) but known neither to "
                f"this operator (igw {__version__}) nor to the served CRD {CRD_NAME} (written by a newer "
                "version, rolled back since); left out of the data plane restored for the refused spec"
            )
            if _newly_noted(self._withdrawn_noted, key, (meta.get("uid"), skew.withdrawn)):
                log.warning("%s/%s: %s", key[0], key[1], said)
                await self._event(candidate, reason=WITHDRAWN_REASON, message=said, warning=True)
        return dict(skew.igwc), skew.problems

    async def _post_notes(self, igwc: Mapping[str, Any]) -> None:
        """One Warning Event ``FieldsWithoutEffect`` per generation of ``igwc`` naming AWS's fields it
        sets that igw accepts without acting on (what ``igw validate`` prints as notes; a user who
        applies the YAML with kubectl never runs it and expected e.g. ``logLevel: 4`` to do something).

        Warning, not Normal: the object is valid and served, but a setting its author wrote is not in
        force, which is what ``kubectl get events --field-selector type=Warning`` is read for. Once per
        generation: the first pass of a generation posts it (a later one finds this process noted it,
        or, after a restart or a change of leader, the status already observing the generation, so an
        earlier pass posted it). Best effort, as :meth:`_post`."""
        meta = igwc["metadata"]
        key, mark = (meta["namespace"], meta["name"]), (meta.get("uid"), meta.get("generation"))
        if not _newly_noted(self._noted, key, mark):
            return
        if (igwc.get("status") or {}).get("observedGeneration") == meta.get("generation"):
            return
        grouped: dict[str, list[str]] = {}
        for note in unused_field_notes(igwc, skip_defaults=True):
            grouped.setdefault(note.message, []).append(note.path)
        if not grouped:
            return
        said = "; ".join(f"{', '.join(paths)}: {why}" for why, paths in grouped.items())
        count = sum(len(paths) for paths in grouped.values())
        await self._event(
            igwc,
            reason=NOTES_REASON,
            message=f"{count} field(s) accepted (AWS's) but without effect in igw: {said}",
            warning=True,
        )

    async def _retire_autoscaler(self, igwc: Mapping[str, Any]) -> None:
        """Delete the HorizontalPodAutoscaler this operator made for ``igwc`` once its spec no longer
        asks for one (autoscaling removed, or handed to another autoscaler with ``external: true``):
        left in place it would keep resizing the Deployment against the replicas the spec now sets,
        or against the other autoscaler. The one ``kubectl delete --cascade=orphan`` left behind
        (no controller, this data plane's labels) goes too: the Deployment is adopted back, and that
        autoscaler would resize it just the same."""
        if horizontal_autoscaler(igwc) is not None:
            return
        await self._delete_own(igwc, HPA_API_VERSION, HPA_KIND, why="")

    async def _retire_network_policy(self, igwc: Mapping[str, Any]) -> None:
        """Delete the NetworkPolicy this operator made for ``igwc`` when it runs without gateway
        NetworkPolicies (``--no-gateway-network-policy``): left in place it would keep filtering the
        pods by rules the operator no longer updates (a scheduler's new ``targetPort``, a new Redis
        port). Someone else's NetworkPolicy of that name is left alone."""
        if self._settings.network_policy:
            return
        await self._delete_own(
            igwc, NETWORK_POLICY_API_VERSION, NETWORK_POLICY_KIND, why=" (gateway NetworkPolicies are off)"
        )

    async def _delete_own(self, igwc: Mapping[str, Any], api_version: str, kind: str, *, why: str) -> None:
        """Delete ``igwc``'s object of ``kind`` (its data plane's name) when this operator made it: one
        ``igwc`` controls, or one ``kubectl delete --cascade=orphan`` left with its labels; anyone
        else's object of that name is left alone. ``why`` ends the log line."""
        meta = igwc["metadata"]
        if not meta.get("uid"):
            return
        name = base_name(meta["name"])
        labels = object_metadata(igwc, name)["labels"]
        if await self._kube.delete_controlled(
            api_version, kind, meta["namespace"], name, uid=meta["uid"], labels=labels
        ):
            log.info("%s/%s: deleted %s %s%s", meta["namespace"], meta["name"], kind, name, why)

    async def _observe(self, igwc: Mapping[str, Any], known: Observation) -> Observation:
        """``known`` (what the pass found: admission, apply, TLS) with what runs read from the API."""
        meta = igwc["metadata"]
        namespace, base = meta["namespace"], base_name(meta["name"])
        # Only what this object controls is its data plane: an object of the same name controlled by
        # another config (refused with NotOwnedError) must not lend it a model list or an address.
        uid = str(meta.get("uid") or "")
        config_map = _controlled(await self._kube.get("v1", "ConfigMap", namespace, f"{base}-config"), uid)
        served, served_problem = _served_document(config_map, f"ConfigMap {namespace}/{base}-config")
        deployment = _controlled(await self._kube.get("apps/v1", "Deployment", namespace, base), uid)
        service = _controlled(await self._kube.get("v1", "Service", namespace, base), uid)
        pods: dict[str, list[dict[str, Any]]] = {}
        if served is not None:
            for scheduler in build_gateway_config(served).schedulers:
                pods[scheduler.name] = await self._kube.list(
                    "v1", "Pod", namespace, label_selector=scheduler.model_selector.to_query() or None
                )
        return replace(
            known,
            programmed=served is not None and deployment is not None and known.apply_error is None,
            served_spec=(served or {}).get("spec"),
            deployment=deployment,
            service=service,
            pods=pods,
            served_problem=served_problem,
        )

    async def _auto_issue(self, igwc: Mapping[str, Any]) -> TlsOutcome:
        """The Certificate to apply and, once cert-manager has issued it, its ARN in ACM; or the step
        still missing.

        The Certificate is not written here: it goes into the pass's all-or-nothing write
        (:meth:`Kube.apply_all`) with the rest of the data plane. Written here first, a pass the API
        server then refused (``NothingApplied``) had already changed its ``dnsNames``: cert-manager
        reissued it and the next pass imported the new certificate under the ARN the live load balancer
        serves, while the status said nothing of the refused spec was applied."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        meta = igwc["metadata"]
        namespace, service_name = meta["namespace"], base_name(meta["name"])
        issuer = self._auto_tls.issuer
        hostnames = client_hostnames(igwc.get("spec") or {})
        wanted = certificate(
            service_name,
            namespace,
            issuer,
            object_metadata(igwc, service_name),
            hostnames,
            secret_labels=_ownership_labels(igwc),
        )
        try:
            live = await self._kube.get(CERT_MANAGER_API, CERTIFICATE_KIND, namespace, service_name)
        except ResourceNotFoundError:
            return TlsOutcome(
                problem=(
                    "CertManagerMissing",
                    f"spec.tls asks for an auto-issued certificate, but the cluster serves no "
                    f"{CERT_MANAGER_API} Certificate kind: install cert-manager, or set spec.tls.acmArn",
                )
            )
        except Exception as exc:  # any API refusal is reported on the object, not raised
            return TlsOutcome(problem=("CertificateFailed", _error_text(exc)))
        secret = secret_name(service_name)
        found = await self._kube.get("v1", "Secret", namespace, secret)
        if foreign_secret(found, service_name):
            return TlsOutcome(
                problem=(
                    "CertificateSecretConflict",
                    f"Secret {namespace}/{secret} exists and is not cert-manager's for Certificate "
                    f"{namespace}/{service_name} (annotation {CERTIFICATE_NAME_ANNOTATION}); it is "
                    "neither imported nor overwritten: rename this object or move that Secret",
                )
            )
        try:
            issued = IssuedCertificate.from_secret(found)
        except ValueError as exc:  # not PEM: cert-manager never writes that, someone else did
            problem = ("CertificateInvalid", f"Secret {namespace}/{secret}: {without_key_material(str(exc))}")
            return await self._keeping_previous(igwc, TlsOutcome(problem=problem, certificate=wanted))
        if issued is None and _names_import(igwc):
            return await self._reissuing(igwc, live, wanted)
        failure = issuance_failure(live) if issued is None else None
        if failure is not None:
            # Reported as pending, a failure (an issuer that refuses, an ACME order gone invalid) left
            # the object saying "waiting for cert-manager" for good, with the cause only on the
            # Certificate.
            return TlsOutcome(
                problem=(
                    "CertificateIssuanceFailed",
                    f"cert-manager failed to issue Certificate {namespace}/{service_name} "
                    f"(issuer {issuer.kind}/{issuer.name}): {failure}; it retries with back-off, and the "
                    "Service is created once the certificate is in ACM",
                ),
                certificate=wanted,
            )
        if issued is None:
            blocked = await self._issuer_problem(namespace, service_name)
            if blocked is not None:
                return TlsOutcome(problem=blocked, certificate=wanted)
            return TlsOutcome(
                problem=(
                    "CertificatePending",
                    f"waiting for cert-manager to issue Certificate {namespace}/{service_name} "
                    f"(issuer {issuer.kind}/{issuer.name}) into Secret {namespace}/{secret}; "
                    "the Service is created once the certificate is in ACM. If this lasts, check that "
                    f"{issuer.kind} {issuer.name}"
                    + (f" exists in namespace {namespace}" if issuer.kind == "Issuer" else " exists")
                    + " and is Ready (cert-manager waits for a missing issuer without failing: "
                    f"kubectl describe certificaterequest -n {namespace})",
                ),
                certificate=wanted,
            )
        previous = ((igwc.get("status") or {}).get("tls") or {}).get("acmArn")
        cluster = await self._cluster.uid()
        try:
            arn = await self._kube.outside(
                self._acm.ensure_imported,
                issued,
                arn=previous,
                uid=meta["uid"],
                name=meta["name"],
                namespace=namespace,
                cluster=cluster,
            )
        except Exception as exc:  # ACM refusals (permissions, quota) are reported on the object
            # An AWS validation error may quote the request (the key): never into status or Events.
            # Said what was refused: Ready (reason NotProgrammed) carries the message alone.
            refused = (
                "AcmImportFailed",
                f"ACM refused to import the certificate of Secret {namespace}/{secret}: "
                + without_key_material(_error_text(exc)),
            )
            failed = TlsOutcome(problem=refused, certificate=wanted)
            if not _names_import(igwc):  # a re-import refused is a failing renewal, logged as such
                self._note_import_refused(igwc, refused[1])
            return await self._keeping_previous(igwc, failed)
        self._import_noted.pop((namespace, meta["name"]), None)
        status = {
            "acmArn": arn,
            "issuedAt": issued.issued_at,
            # The names the imported certificate covers, not those the Certificate asks: after a
            # hostnames edit they differ until cert-manager has reissued it (or for good, when the
            # issuer refuses a new name), and the status said the new name was served meanwhile.
            "dnsNames": list(issued.dns_names),
            **({} if issued.not_after is None else {"notAfter": rfc3339(issued.not_after)}),
        }
        # The certificate in ACM is served either way; a renewal cert-manager fails (or never makes)
        # is reported, or the listener served the old one until it expired with the object Programmed.
        now = self._clock()
        where = f"Certificate {namespace}/{service_name} (issuer {issuer.kind}/{issuer.name})"
        renewal = renewal_problem(live, issued, now)
        if renewal is not None:
            renewal = f"{where}: {renewal}"
        blocked = await self._issuer_problem(namespace, service_name, served_until=issued.not_after)
        if expired(issued, now):
            # Still on the listener (nothing better to serve), but no client that verifies it connects:
            # GatewayProgrammed False (and Ready False), where it said Programmed with the expiry deep
            # in its message. The transition posts its Warning Event; the renewal Event would repeat it.
            cause = renewal or f"{where}: cert-manager has not renewed it"
            if blocked is not None:
                cause += f"; {blocked[1]}"
            problem = (
                EXPIRED_REASON,
                f"the certificate the load balancer serves ({arn}) expired at {status.get('notAfter')}: "
                f"clients' TLS handshakes fail until it is renewed; {cause}",
            )
            return TlsOutcome(acm_arn=arn, status=status, problem=problem, certificate=wanted)
        return TlsOutcome(acm_arn=arn, status=status, certificate=wanted, renewal=renewal, issuer=blocked)

    def _note_apply_failed(self, igwc: Mapping[str, Any], message: str) -> None:
        """Log that applying ``igwc``'s data plane failed with ``message``: a WARNING line once per
        (uid, generation, message), a DEBUG line on the passes and resyncs that fail the same way
        after it. The condition and its Event say it on the object; the log said it again every pass."""
        meta = igwc["metadata"]
        key = (meta["namespace"], meta["name"])
        mark = (meta.get("uid"), meta.get("generation"), message)
        level = logging.DEBUG if self._apply_failed_noted.get(key) == mark else logging.WARNING
        self._apply_failed_noted[key] = mark
        log.log(level, "%s/%s: applying the data plane failed: %s", key[0], key[1], message)

    def _note_applied(self, igwc: Mapping[str, Any]) -> None:
        """An apply of ``igwc``'s data plane succeeded: after a failure logged by
        :meth:`_note_apply_failed`, one INFO line says so, and a later failure is logged again."""
        meta = igwc["metadata"]
        failed = self._apply_failed_noted.pop((meta["namespace"], meta["name"]), None)
        if failed is not None:
            log.info(
                "%s/%s: the data plane applied (it failed before: %s)",
                meta["namespace"],
                meta["name"],
                failed[2],
            )

    def _note_import_refused(self, igwc: Mapping[str, Any], message: str) -> None:
        """One WARNING line (``AcmImportFailed``: ``message``, without key material) each time ACM's
        refusal of ``igwc``'s first import changes."""
        meta = igwc["metadata"]
        key, mark = (meta["namespace"], meta["name"]), (meta.get("uid"), message)
        if not _newly_noted(self._import_noted, key, mark):
            return
        log.warning("%s/%s: AcmImportFailed: %s", key[0], key[1], message)

    async def _keeping_previous(self, igwc: Mapping[str, Any], outcome: TlsOutcome) -> TlsOutcome:
        """``outcome`` (no new certificate to serve: the Secret's is not PEM, or ACM refused its
        import) when ``status.tls`` names no certificate imported before; else the previous one is
        still on the listener: the Service stays applied with it, and while it is valid (not past the
        ``notAfter`` the status names) the failure is a renewal failing, not a gateway down.

        Reported as ``GatewayProgrammed=False`` (and ``Ready`` False) with the refusal's reason, a
        renewed Secret ACM would not take (or not PEM) said the gateway was down while the load balancer
        served the previous, valid certificate. Now GatewayProgrammed stays True, its message says
        ``RENEWAL FAILING`` and which certificate is served until when, with one Warning Event
        (``CertificateRenewalFailed``) per change; once that certificate expires it is
        ``CertificateExpired`` naming the failure."""
        if not _names_import(igwc) or outcome.problem is None:
            return outcome
        namespace, service_name, previous, arn, not_after = _previous_import(igwc)
        issuer = self._auto_tls.issuer
        reason, message = outcome.problem
        where = f"Certificate {namespace}/{service_name} (issuer {issuer.kind}/{issuer.name})"
        failed = f"{where}: the new certificate was not imported ({reason}): {message}"
        if not_after is not None and self._clock() >= not_after:
            problem = (
                EXPIRED_REASON,
                f"the certificate the load balancer serves ({arn}) expired at {rfc3339(not_after)}: "
                f"clients' TLS handshakes fail until a new one is imported; {failed}",
            )
            return replace(outcome, acm_arn=arn, status=previous, problem=problem)
        until = "" if not_after is None else f" (notAfter {rfc3339(not_after)})"
        served = f"the load balancer keeps serving the previous certificate {arn} from ACM{until}"
        blocked = await self._issuer_problem(namespace, service_name, served_until=not_after)
        return replace(
            outcome,
            acm_arn=arn,
            status=previous,
            problem=None,
            renewal=f"{failed}; {served}",
            issuer=blocked,
        )

    async def _reissuing(
        self, igwc: Mapping[str, Any], live: Mapping[str, Any] | None, wanted: Mapping[str, Any]
    ) -> TlsOutcome:
        """The Secret holds no certificate (deleted or emptied: a common way to make cert-manager
        issue anew), but one issued before is in ACM and on the load balancer's listener (``status.tls``
        names it): that one keeps being served, and the Service stays applied with it.

        Reported as ``CertificatePending`` ("the Service is created once the certificate is in ACM"),
        this said the opposite of what ran: the Service existed and served the previous certificate,
        yet GatewayProgrammed and Ready went False. Now GatewayProgrammed stays True and its message
        says which certificate is served while cert-manager issues a new one; an issuance that fails,
        or an issuer gone or not Ready, is reported as for a renewal (one Warning Event per change);
        the previous certificate past its notAfter is ``CertificateExpired``."""
        namespace, service_name, previous, arn, not_after = _previous_import(igwc)
        issuer = self._auto_tls.issuer
        where = f"Certificate {namespace}/{service_name} (issuer {issuer.kind}/{issuer.name})"
        until = "" if not_after is None else f" (it expires at {rfc3339(not_after)})"
        serving = (
            f"Secret {namespace}/{secret_name(service_name)} holds no certificate (deleted or emptied): "
            f"cert-manager issues a new one for {where}; the load balancer keeps serving the previous "
            f"certificate {arn} from ACM{until} until the new one is imported"
        )
        failure = issuance_failure(live)
        renewal = None
        if failure is not None:
            renewal = f"{where}: cert-manager failed to issue a new certificate: {failure}"
        blocked = await self._issuer_problem(namespace, service_name, served_until=not_after)
        if not_after is not None and self._clock() >= not_after:
            cause = renewal or f"{where}: cert-manager has not issued a new one"
            problem = (
                EXPIRED_REASON,
                f"the certificate the load balancer serves ({arn}) expired at {rfc3339(not_after)}: "
                f"clients' TLS handshakes fail until a new one is issued; {cause}; {serving}",
            )
            return TlsOutcome(acm_arn=arn, status=previous, problem=problem, certificate=wanted)
        return TlsOutcome(
            acm_arn=arn,
            status=previous,
            certificate=wanted,
            renewal=renewal,
            issuer=blocked,
            reissue=serving,
        )

    async def _issuer_problem(
        self, namespace: str, certificate_name: str, *, served_until: datetime | None = None
    ) -> tuple[str, str] | None:
        """Why the configured issuer cannot sign the waiting Certificate (missing, not Ready), from
        one read of it (:func:`igw.operator.tls.issuer_problem`); ``None`` when it is Ready or when it
        cannot be read (RBAC narrowed by hand, the kind not served): then ``CertificatePending`` says
        to check it, as before the read existed.

        ``served_until``: a certificate is issued and served (until then): the issuer is read once
        for every object's passes within :data:`ISSUER_READ_TTL_S`. It was read only while the first
        certificate waited: an issuer deleted or gone NotReady later was never reported, and every
        renewal failed silently until the served certificate expired."""
        issuer = self._auto_tls.issuer
        scope = namespace if issuer.kind == "Issuer" else ""
        reader = self._kube if served_until is None else self._issuer_reads
        try:
            found = await reader.get(CERT_MANAGER_API, issuer.kind, scope, issuer.name)
        except OperatorStopping:
            raise
        except Exception as exc:  # a refusal or a kind not served: no verdict, the pass goes on
            log.debug("reading %s %s failed: %s", issuer.kind, issuer.name, refusal_text(exc))
            return None
        return issuer_problem(issuer, found, namespace, certificate_name, served_until=served_until)

    async def forget(self, igwc: Mapping[str, Any]) -> None:
        """``igwc`` was deleted: delete its ACM import, its Certificate and the Secret cert-manager
        wrote for it. The garbage collector removes the Certificate, but not the Secret (cert-manager
        sets no owner reference on it by default): left, it kept the private key for good."""
        namespace, _, uid = _identity(igwc)
        with self._doomed_lock:
            if namespace in self._doomed:
                self._doomed[namespace].discard(uid)
                if not self._doomed[namespace]:
                    del self._doomed[namespace]
        await self._forget_import(igwc)
        await self._retire_certificate(igwc)
        self._certificates_gone.pop(_identity(igwc)[:2], None)
        self._ports_noted.pop(_identity(igwc)[:2], None)
        self._renewal_noted.pop(_identity(igwc)[:2], None)
        self._import_noted.pop(_identity(igwc)[:2], None)
        self._issuer_noted.pop(_identity(igwc)[:2], None)
        self._restore_noted.pop(_identity(igwc)[:2], None)
        self._withdrawn_noted.pop(_identity(igwc)[:2], None)
        self._not_kept_noted.pop(_identity(igwc)[:2], None)
        self._apply_failed_noted.pop(_identity(igwc)[:2], None)
        self._skew_noted.pop(_identity(igwc)[:2], None)
        self._bound_skew_noted.pop(_identity(igwc)[:2], None)
        self._admitted.pop(_identity(igwc)[:2], None)
        self._claims.pop(_identity(igwc)[:2], None)

    async def _retire_certificate(self, igwc: Mapping[str, Any]) -> None:
        """Delete the Certificate this operator applied for ``igwc`` and the Secret cert-manager wrote
        for it (:func:`~igw.operator.tls.issued_secret`: never someone else's), the Certificate first
        so cert-manager does not write the Secret again. Once both are gone, later passes skip this
        (one read per object and operator process); a failure is logged and retried on the next pass."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        meta = igwc.get("metadata") or {}
        identity = _identity(igwc)
        if (
            not self._auto_tls.enabled
            or not identity[2]
            or self._certificates_gone.get(identity[:2]) == identity[2]
        ):
            return
        namespace, name = identity[0], base_name(identity[1])
        labels = _ownership_labels(igwc)
        try:
            if await self._kube.delete_controlled(
                CERT_MANAGER_API, CERTIFICATE_KIND, namespace, name, uid=identity[2], labels=labels
            ):
                log.info("%s/%s: deleted Certificate %s", namespace, meta.get("name"), name)
            secret = secret_name(name)
            if await self._kube.delete_if(
                "v1", "Secret", namespace, secret, lambda s: issued_secret(s, name, labels)
            ):
                log.info("%s/%s: deleted Secret %s of its Certificate", namespace, meta.get("name"), secret)
        except ResourceNotFoundError:  # no cert-manager in the cluster: no Certificate was ever made
            pass
        except Exception as exc:  # logged, not raised: retried on the next pass
            log.warning(
                "%s/%s: deleting the auto-issued certificate's Certificate/Secret failed: %s",
                namespace,
                meta.get("name"),
                _error_text(exc),
            )
            return
        self._certificates_gone[identity[:2]] = identity[2]

    async def _forget_import(self, igwc: Mapping[str, Any]) -> bool:
        """Delete the ACM certificate auto-issued for ``igwc`` (gone, or no longer asking for one);
        ``True`` when ``status.tls`` no longer names a certificate of ours."""
        meta = igwc.get("metadata") or {}
        previous = (igwc.get("status") or {}).get("tls") or {}
        arn = previous.get("acmArn")
        if not _names_import(igwc) or not meta.get("uid"):
            return False
        try:
            deleted = await self._kube.outside(self._acm.delete_owned, str(arn), uid=str(meta["uid"]))
        except Exception as exc:  # logged, not raised: retried on the next pass (or left, once deleted)
            log.warning(
                "%s/%s: deleting ACM certificate %s failed: %s",
                meta.get("namespace"),
                meta.get("name"),
                arn,
                _error_text(exc),
            )
            return False
        if deleted:
            log.info(
                "%s/%s: deleted imported ACM certificate %s", meta.get("namespace"), meta.get("name"), arn
            )
        return True


_AUTO_TLS_DISABLED = TlsOutcome(
    problem=(
        "AutoTlsDisabled",
        "spec.tls asks for an auto-issued certificate, but the operator runs with auto-issued TLS "
        "switched off (chart value operator.autoTls: false): set spec.tls.acmArn, or ask the cluster "
        "administrator to enable operator.autoTls",
    )
)


def _previous_import(igwc: Mapping[str, Any]) -> tuple[str, str, dict[str, Any], str, datetime | None]:
    """The certificate an earlier reconcile imported, as ``status.tls`` records it: the object's
    namespace, its Service's name, that status, the ACM ARN and its ``notAfter`` (``None`` if unknown)."""
    meta = igwc["metadata"]
    previous = dict((igwc.get("status") or {}).get("tls") or {})
    return (
        meta["namespace"],
        base_name(meta["name"]),
        previous,
        str(previous["acmArn"]),
        _parsed_time(previous.get("notAfter")),
    )


def _parsed_time(text: Any) -> datetime | None:
    """An RFC 3339 time as the status writes it (:func:`igw.operator.tls.rfc3339`), else ``None``."""
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


_Mark = TypeVar("_Mark")


def _name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


_SkewMark = tuple[object, object, tuple[str, ...]]
"""``(uid, generation, paths)`` of the newer CRD's defaults left out of an object, last noted."""


def _newly_noted(noted: dict[tuple[str, str], _Mark], key: tuple[str, str], mark: _Mark) -> bool:
    """Record ``mark`` (what is reported, and of which uid or generation) for the object ``key``;
    whether it differs from the mark recorded before, i.e. whether to report it now. The
    reconciler's once-per-generation (or once-per-change) WARNING lines and Events check and update
    their record here, in one step."""
    if noted.get(key) == mark:
        return False
    noted[key] = mark
    return True


def _identity(igwc: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = igwc.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""))


def _names_import(igwc: Mapping[str, Any]) -> bool:
    """Whether ``status.tls`` names a certificate this operator imported into ACM."""
    previous = (igwc.get("status") or {}).get("tls") or {}
    return bool(previous.get("acmArn") and previous.get("issuedAt"))


def _ownership_labels(igwc: Mapping[str, Any]) -> dict[str, str]:
    """The data plane's labels that mark an object as written by this operator for ``igwc``."""
    labels = object_metadata(igwc, base_name(igwc["metadata"]["name"]))["labels"]
    return {key: labels[key] for key in ADOPTION_LABELS}


def _controlled(obj: dict[str, Any] | None, uid: str) -> dict[str, Any] | None:
    """``obj`` when its controller owner reference is the object ``uid``, else ``None``."""
    if obj is None:
        return None
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return obj if any(ref.get("controller") and ref.get("uid") == uid for ref in refs) else None


def _served_document(
    config_map: Mapping[str, Any] | None, where: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The document the gateway pods serve, from their ConfigMap, or why there is none to report on.

    The operator wrote it, but anyone with edit rights on ConfigMaps may have rewritten it; an
    unreadable or invalid one ended every pass in a ``KeyError`` traceback, leaving the status as it
    was. Now it is reported (``GatewayProgrammed=False``, ``ServedConfigInvalid``) and put back at the
    next pass that admits the object's spec."""
    if config_map is None:
        return None, None
    text = str((config_map.get("data") or {}).get(CONFIG_KEY) or "")
    try:
        documents = parse_text(text, source=f"{where} ({CONFIG_KEY})")
    except DocumentReadError as exc:
        return None, str(exc)
    if len(documents) != 1:
        return None, f"{where} ({CONFIG_KEY}): holds {len(documents)} documents, not one"
    problems = validate_document(documents[0].content)
    if problems:
        listed = "; ".join(str(problem) for problem in problems[:3])
        return None, f"{where} ({CONFIG_KEY}) is not a valid InferenceGatewayConfig: {listed}"
    served: dict[str, Any] = documents[0].content
    return served, None


def _config_map_models(config_map: Mapping[str, Any]) -> frozenset[str]:
    """The model names of the document a served ConfigMap holds (none when it holds no one document):
    read leniently, an invalid document's names still count as served (the gateway's reload refuses
    it and keeps serving what it served, which is unknown here)."""
    text = str((config_map.get("data") or {}).get(CONFIG_KEY) or "")
    try:
        documents = parse_text(text, source=CONFIG_KEY)
    except DocumentReadError:
        return frozenset()
    if len(documents) != 1 or not isinstance(documents[0].content, Mapping):
        return frozenset()
    return model_names(documents[0].content)


def _annotated_spec(igwc: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """``igwc`` with the spec its :data:`LAST_ADMITTED_ANNOTATION` keeps, when it holds an object, else
    ``None`` and why not (``None`` too when absent or empty) (anyone who may edit the object may edit
    it, as the served ConfigMap: the caller checks it as a new spec,
    :func:`igw.operator.admission.spec_refusal`)."""
    text = ((igwc.get("metadata") or {}).get("annotations") or {}).get(LAST_ADMITTED_ANNOTATION)
    if text is None:
        return None, None
    spec, problem = read_last_admitted(text) if isinstance(text, str) else (None, "not a string")
    return (None, problem) if spec is None else ({**igwc, "spec": spec}, None)


def last_admitted_text(spec: Mapping[str, Any]) -> str:
    """The value of :data:`LAST_ADMITTED_ANNOTATION` for ``spec``: its compact JSON, or, over
    :data:`LAST_ADMITTED_PLAIN_MAX_CHARS`, that JSON gzip-compressed and base64-encoded behind
    :data:`LAST_ADMITTED_GZIP` (``mtime=0``: the same spec gives the same value, so no pass rewrites it)."""
    text = json.dumps(spec, separators=(",", ":"))
    if len(text) <= LAST_ADMITTED_PLAIN_MAX_CHARS:
        return text
    packed = gzip.compress(text.encode(), compresslevel=9, mtime=0)
    return LAST_ADMITTED_GZIP + base64.b64encode(packed).decode("ascii")


def last_admitted_spec(text: str) -> dict[str, Any] | None:
    """The spec a :data:`LAST_ADMITTED_ANNOTATION` value holds (either form, :func:`last_admitted_text`),
    or ``None`` (:func:`read_last_admitted` says why)."""
    return read_last_admitted(text)[0]


def read_last_admitted(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The spec a :data:`LAST_ADMITTED_ANNOTATION` value holds, or ``None`` and why not (``None`` for an
    empty value, written on purpose): not JSON, not an object, not valid base64 or gzip, or inflating
    past :data:`LAST_ADMITTED_MAX_SPEC_BYTES` (a value anyone who may edit the object may write). The
    reason never quotes the value."""
    if text.startswith(LAST_ADMITTED_GZIP):
        try:
            packed = base64.b64decode(text[len(LAST_ADMITTED_GZIP) :], validate=True)
        except binascii.Error:
            return None, f"the text after {LAST_ADMITTED_GZIP!r} is not valid base64"
        try:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            raw = inflater.decompress(packed, LAST_ADMITTED_MAX_SPEC_BYTES)
        except zlib.error:
            return None, "its base64 does not hold valid gzip data"
        if inflater.unconsumed_tail:
            return None, f"it inflates past {LAST_ADMITTED_MAX_SPEC_BYTES} bytes, the most read"
        if not inflater.eof:
            return None, "its gzip data is cut short"
        text = raw.decode(errors="replace")
        if not text:
            return None, "its gzip data holds nothing"
    elif not text:
        return None, None
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(spec, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(spec), "a number"
        )
        return None, f"its JSON is {kind}, not an object"
    return spec, None


def last_admitted_room(annotations: Mapping[str, Any]) -> int:
    """How long a :data:`LAST_ADMITTED_ANNOTATION` value may be on an object with ``annotations``:
    :data:`LAST_ADMITTED_MAX_CHARS`, or less when the others leave less of the API server's
    :data:`ANNOTATIONS_MAX_BYTES` (less :data:`ANNOTATIONS_RESERVE_BYTES` for kopf's own)."""
    others = sum(
        len(str(key).encode()) + len(str(value).encode())
        for key, value in annotations.items()
        if key != LAST_ADMITTED_ANNOTATION
    )
    left = ANNOTATIONS_MAX_BYTES - ANNOTATIONS_RESERVE_BYTES - others - len(LAST_ADMITTED_ANNOTATION)
    return max(0, min(LAST_ADMITTED_MAX_CHARS, left))


def _differs(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` (a merge patch) would change ``old``."""
    return any(old.get(key) != value for key, value in new.items())
