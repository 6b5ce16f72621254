"""The orphan sweep of auto-issued TLS: ACM imports and cert-manager Secrets whose config is gone.

The operator deletes an object's ACM import and the Secret holding its private key when the watch
reports the object deleted (:meth:`igw.operator.reconcile.Reconciler.forget`). An object deleted while
no operator runs, or while the watch was away (a 410 Gone relist reports no DELETED), never got that:
the import stayed in ACM and the Secret (cert-manager sets no owner reference on it by default) kept
the private key in the namespace for good. The Certificate itself is garbage-collected by its owner
reference. So the leader sweeps when it starts and every :data:`SWEEP_INTERVAL_S` after:

* ACM: every imported certificate tagged with this cluster's :data:`~igw.operator.tls.CLUSTER_TAG`
  (ACM is shared by every cluster of the account and region) and an object uid, in a watched
  namespace, whose uid names no InferenceGatewayConfig now. A config of the same name made anew has
  another uid: another owner. ACM refuses to delete a certificate a listener still uses; that one is
  tried again at the next sweep. Each import's tags are read once and remembered (they cannot change:
  :class:`~igw.operator.tls.AcmImporter`), and read afresh before a deletion, so a sweep makes one
  ACM listing plus one tag read per import new since the last.
* Imports made before the cluster tag existed (uid and name tags, no cluster tag): one whose uid
  names a config here gets the cluster tag at that config's next pass. One whose uid names none may
  be another cluster's (nothing in ACM says which), so it is never deleted: the sweep reports it
  once per operator process (a WARNING with its ARN and the namespace/name its tags name, to be
  deleted by hand with ``aws acm delete-certificate`` once no cluster has that config).
* Secrets: every Secret carrying the data plane's ownership labels and cert-manager's
  ``cert-manager.io/certificate-name`` annotation whose config (by name, in its namespace) is gone,
  after the Certificate of that name and labels if the garbage collector has not removed it yet (or
  cert-manager writes the Secret again). A config of that name existing again takes the Secret over
  (its Certificate names it) or deletes it in its own pass, so the Secret is left to it.

ACM and the Secrets are listed before the configs: an import or Secret seen first belongs to a config
that existed then, so a config missing from the later listing was deleted, never one not made yet.
Nothing without the operator's tags or labels is touched. With auto-issue switched off
(``operator.autoTls: false``) the operator may read no Secret, and no sweep runs.

Where the InferenceGatewayConfig CRD is not installed (yet: ``crds.enabled: false`` and the CRD applied
later), no sweep can tell which configs exist, so it deletes nothing; that is logged once as a WARNING
naming the CRD and how to install it, then at most every :data:`CRD_MISSING_REPEAT_S` (before session
s41 every sweep logged ``ResourceNotFoundError: No matches found for {...}``), and once at INFO when the
CRD is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from igw.config.crd import CRD_NAME
from igw.config.model import KIND
from igw.operator.dataplane import CONFIG_LABEL, MANAGED_BY, base_name, label_value
from igw.operator.kube import ADOPTION_LABELS, IGWC_API_VERSION, Kube, refusal_text
from igw.operator.tls import (
    CERT_MANAGER_API,
    CERTIFICATE_KIND,
    CERTIFICATE_NAME_ANNOTATION,
    CLUSTER_TAG,
    AcmImporter,
    OwnedImport,
    secret_name,
)

log = logging.getLogger("igw.operator")

SWEEP_INTERVAL_S: Final = 600.0
"""Default seconds between two sweeps (``igw operator --tls-sweep-seconds``, chart value
``operator.tlsSweepSeconds``): one ACM listing, a tag read per import not seen before, and one list
of the operator's Secrets each."""
CRD_MISSING_REPEAT_S: Final = 1800.0
"""Seconds between two WARNINGs that the InferenceGatewayConfig CRD is not installed (the first comes
at the first sweep that finds it missing)."""
CLUSTER_NAMESPACE: Final = "kube-system"
"""The Namespace whose uid names the cluster (:data:`~igw.operator.tls.CLUSTER_TAG`)."""


class ClusterIdentity:
    """The uid of this cluster's ``kube-system`` Namespace, read once and kept; ``""`` while unknown
    (not readable: imports then carry no cluster tag and the sweep leaves ACM alone)."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._uid = ""
        self._warned = False

    async def uid(self) -> str:
        # No lock: passes reading it at once read the same uid.
        if not self._uid:
            try:
                found = await self._kube.get("v1", "Namespace", "", CLUSTER_NAMESPACE)
            except Exception as exc:  # RBAC or a transient refusal: tried again next time
                if not self._warned:  # once: every pass of a tls: {} object asks
                    self._warned = True
                    log.warning(
                        "reading Namespace %s (the cluster's identity) failed; ACM imports carry "
                        "no cluster tag and the orphan sweep leaves ACM alone until it can: %s",
                        CLUSTER_NAMESPACE,
                        refusal_text(exc),
                    )
                return ""
            self._uid = str(((found or {}).get("metadata") or {}).get("uid") or "")
        return self._uid


@dataclass(slots=True)
class SweepResult:
    """What one sweep deleted, and what it left to the next one."""

    acm_deleted: list[str] = field(default_factory=list)
    acm_in_use: list[str] = field(default_factory=list)
    """Imports of a gone config that ACM refused to delete (a listener still uses them): retried."""
    secrets_deleted: list[str] = field(default_factory=list)
    """``namespace/name`` of each Secret deleted."""
    legacy_reported: list[str] = field(default_factory=list)
    """Imports without the cluster tag whose config is not here, reported (once) and left alone."""
    tag_reads: int = 0
    """ACM tag reads the listing made (imports whose tags were not remembered)."""
    failed: int = 0


class OrphanSweep:
    """Deletes the ACM imports and cert-manager Secrets of InferenceGatewayConfigs that are gone."""

    def __init__(
        self,
        kube: Kube,
        acm: AcmImporter,
        cluster: ClusterIdentity,
        *,
        namespaces: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._clock = clock
        self._crd_missing_logged: float | None = None
        """When the missing CRD was last logged (``clock``); ``None`` while it is installed."""
        self._acm = acm
        self._cluster = cluster
        self._namespaces = tuple(namespaces)
        """Watched namespaces; empty: all of them."""
        self._reported: set[str] = set()
        """ARNs of imports without the cluster tag already reported (pruned to each listing's)."""

    async def run(self, stop: asyncio.Event, interval_s: float = SWEEP_INTERVAL_S) -> None:
        """Sweep now, then every ``interval_s`` until ``stop``; a failed sweep is logged and retried."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        while not stop.is_set():
            try:
                await self.sweep()
            except ResourceNotFoundError as exc:
                if KIND not in str(exc):
                    log.warning("sweeping orphaned auto-issued TLS failed: %s", refusal_text(exc))
                else:  # the CRD is not installed: no config can be told gone
                    self._crd_missing(interval_s)
            except Exception as exc:  # logged, not raised: the next sweep tries again
                log.warning("sweeping orphaned auto-issued TLS failed: %s", refusal_text(exc))
            else:
                if self._crd_missing_logged is not None:
                    self._crd_missing_logged = None
                    log.info("the %s CRD is installed: the orphan sweep of auto-issued TLS runs", CRD_NAME)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    def _crd_missing(self, interval_s: float) -> None:
        """Say that the CRD is missing, and what to do: the first time, then at most every
        :data:`CRD_MISSING_REPEAT_S` (the sweep keeps trying every ``interval_s``)."""
        now = self._clock()
        last = self._crd_missing_logged
        if last is not None and now - last < CRD_MISSING_REPEAT_S:
            return
        self._crd_missing_logged = now
        log.warning(
            "the %s CRD is not installed, so the orphan sweep of auto-issued TLS cannot tell which "
            "configs are gone and deletes nothing; install it (the chart's crds.enabled: true, or "
            "kubectl apply -f crds/%s.yaml); the sweep tries again every %gs, and this is logged again "
            "at most every %g minutes",
            CRD_NAME,
            CRD_NAME,
            interval_s,
            CRD_MISSING_REPEAT_S / 60,
        )

    async def sweep(self) -> SweepResult:
        """One sweep; raises (deleting nothing) when the configs cannot be listed."""
        result = SweepResult()
        cluster = await self._cluster.uid()
        tagged = await self._kube.outside(self._acm.tagged_imports, cluster) if cluster else None
        result.tag_reads = tagged.tag_reads if tagged else 0
        imports = [i for i in (tagged.owned if tagged else []) if self._watched(i.namespace)]
        secrets = await self._list(
            "v1", "Secret", label_selector=f"app.kubernetes.io/managed-by={MANAGED_BY}"
        )
        configs = await self._list(IGWC_API_VERSION, KIND)
        uids = {str(c["metadata"].get("uid")) for c in configs}
        names: dict[str, set[str]] = {}
        for config in configs:
            meta = config["metadata"]
            names.setdefault(str(meta["namespace"]), set()).update(
                {label_value(meta["name"]), base_name(meta["name"])}
            )
        for owned in imports:
            if owned.uid not in uids:
                await self._delete_import(owned, result, cluster)
        if tagged is not None:
            self._report_legacy(tagged.legacy, uids, result)
        for secret in secrets:
            await self._delete_secret(secret, names, result)
        if result.acm_deleted or result.acm_in_use or result.secrets_deleted or result.failed:
            log.info(
                "swept orphaned auto-issued TLS: %d ACM certificate(s) deleted, %d in use (retried), "
                "%d Secret(s) deleted, %d failed",
                len(result.acm_deleted),
                len(result.acm_in_use),
                len(result.secrets_deleted),
                result.failed,
            )
        return result

    def _watched(self, namespace: str) -> bool:
        return not self._namespaces or namespace in self._namespaces

    def _report_legacy(self, legacy: Sequence[OwnedImport], uids: set[str], result: SweepResult) -> None:
        """Report, once each, the imports without the cluster tag whose uid names no config here."""
        self._reported &= {found.arn for found in legacy}
        for found in legacy:
            # Another namespace's (a tag the old operator wrote) is the other operator's to report.
            if (
                found.uid in uids
                or found.arn in self._reported
                or (found.namespace and not self._watched(found.namespace))
            ):
                continue
            self._reported.add(found.arn)
            result.legacy_reported.append(found.arn)
            log.warning(
                "ACM certificate %s was imported for InferenceGatewayConfig %s (uid %s) before imports "
                "carried the %s tag: no config with that uid is here, but it may be another cluster's, "
                "so it is not deleted; once no cluster has that config, delete it with "
                "`aws acm delete-certificate --certificate-arn %s`",
                found.arn,
                f"{found.namespace}/{found.name}" if found.namespace else found.name or "(unnamed)",
                found.uid,
                CLUSTER_TAG,
                found.arn,
            )

    async def _list(
        self, api_version: str, kind: str, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        scopes: Sequence[str | None] = self._namespaces or (None,)
        found: list[dict[str, Any]] = []
        for namespace in scopes:
            found += await self._kube.list(api_version, kind, namespace, label_selector=label_selector)
        return found

    async def _delete_import(self, owned: OwnedImport, result: SweepResult, cluster: str) -> None:
        where = f"{owned.namespace}/{owned.name}"
        try:
            deleted = await self._kube.outside(
                self._acm.delete_owned, owned.arn, uid=owned.uid, cluster=cluster
            )
        except Exception as exc:  # ACM's in-use refusal, or any other: the next sweep tries again
            if _acm_error_code(exc) == "ResourceInUseException":
                result.acm_in_use.append(owned.arn)
                log.info(
                    "%s (gone): ACM certificate %s still in use; retried at the next sweep", where, owned.arn
                )
            else:
                result.failed += 1
                log.warning(
                    "%s (gone): deleting ACM certificate %s failed: %s", where, owned.arn, refusal_text(exc)
                )
            return
        if deleted:
            result.acm_deleted.append(owned.arn)
            log.info("%s (gone): deleted its imported ACM certificate %s", where, owned.arn)

    async def _delete_secret(
        self, secret: Mapping[str, Any], names: Mapping[str, set[str]], result: SweepResult
    ) -> None:
        """Delete ``secret`` (and the Certificate it was issued for) when it is cert-manager's for the
        operator's Certificate of a config that no longer exists in its namespace."""
        # deferred: start-up cost: kubernetes.dynamic loads with the client, in the worker thread
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        meta = secret.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        certificate = str((meta.get("annotations") or {}).get(CERTIFICATE_NAME_ANNOTATION) or "")
        labels = {key: str((meta.get("labels") or {}).get(key) or "") for key in ADOPTION_LABELS}
        config = labels[CONFIG_LABEL]
        if (
            not certificate
            or not config
            or labels["app.kubernetes.io/managed-by"] != MANAGED_BY
            or name != secret_name(certificate)
            or names.get(namespace, set()) & {config, certificate}
        ):
            return

        def ours(obj: Mapping[str, Any]) -> bool:
            have = (obj.get("metadata") or {}).get("labels") or {}
            return all(have.get(key) == value for key, value in labels.items())

        def still_ours(obj: Mapping[str, Any]) -> bool:
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            return ours(obj) and annotations.get(CERTIFICATE_NAME_ANNOTATION) == certificate

        try:
            # First the Certificate, or cert-manager writes the Secret again; without cert-manager
            # (the kind is not served) nothing writes it again.
            with contextlib.suppress(ResourceNotFoundError):
                await self._kube.delete_if(CERT_MANAGER_API, CERTIFICATE_KIND, namespace, certificate, ours)
            deleted = await self._kube.delete_if("v1", "Secret", namespace, name, still_ours)
        except Exception as exc:  # logged, not raised: the next sweep tries again
            result.failed += 1
            log.warning(
                "%s/%s (gone): deleting Secret %s failed: %s", namespace, config, name, refusal_text(exc)
            )
            return
        if deleted:
            result.secrets_deleted.append(f"{namespace}/{name}")
            log.info(
                "%s/%s (gone): deleted Secret %s of its auto-issued certificate", namespace, config, name
            )


def _acm_error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for anything else)."""
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "") if isinstance(response, dict) else ""
