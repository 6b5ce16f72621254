"""IGW-PF006: the ``InferenceGatewayConfig`` CRD is installed, serves a version we understand, and
belongs to this add-on (a CRD another installation owns - AWS's own add-on, a copy applied by hand -
would be fought over by two installers; install the chart with ``crds.enabled: false`` then)."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import labels_of, name_of, spec
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.config.model import API_GROUP, API_VERSION

CRD_NAME = f"inferencegatewayconfigs.{API_GROUP}"
KNOWN_VERSIONS = (API_VERSION,)
OWNER_LABEL = "app.kubernetes.io/part-of"
OWNER_VALUE = "inference-gateway"
"""The label our chart puts on the CRD it installs (``igw.labels``)."""

META = CheckMeta(
    id="IGW-PF006",
    title="InferenceGatewayConfig CRD present at a known version",
    command=Command.PREFLIGHT,
    category="cluster",
    severity=Severity.CRITICAL,
    description=f"CRD {CRD_NAME} must exist and serve {', '.join(KNOWN_VERSIONS)}; if it is missing the "
    "add-on is older than the gateway release.",
    remediation="Install or upgrade the inference add-on to v2.0.0-eksbuild.2 or newer (it installs the "
    "CRD).",
)


def _foreign_owner(crd: Manifest) -> str | None:
    """Who else manages the CRD, when its labels or Helm annotations say so (``None``: ours or unknown)."""
    labels = labels_of(crd)
    if labels.get(OWNER_LABEL) == OWNER_VALUE:
        return None
    annotations = (crd.get("metadata") or {}).get("annotations") or {}
    if labels.get("app.kubernetes.io/managed-by"):
        return f"managed by {labels['app.kubernetes.io/managed-by']}"
    if annotations.get("meta.helm.sh/release-name"):
        return f"Helm release {annotations['meta.helm.sh/release-name']}"
    return None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    crds = need(ctx.inventory.kube.of("CustomResourceDefinition"))
    crd = next((c for c in crds if name_of(c) == CRD_NAME), None)
    resource = f"CustomResourceDefinition {CRD_NAME}"
    if crd is None and ctx.inventory.kube.static:
        yield r.warn(
            resource,
            "not declared here (these manifests do not include it; the add-on installs it)",
            severity=Severity.INFO,
        )
        return
    if crd is None:
        yield r.fail(resource, "not installed")
        return
    owner = _foreign_owner(crd)
    if owner is not None:
        yield r.warn(
            resource,
            f"owned by another installation ({owner}), not by this add-on's chart",
            severity=Severity.MEDIUM,
            remediation="Keep one owner: install the chart with crds.enabled=false while the other "
            "installation manages the CRD, or remove the other installation first.",
        )
    served = [
        str(v.get("name"))
        for v in spec(crd).get("versions") or []
        if isinstance(v, dict) and v.get("served", True)
    ]
    known = [v for v in served if v in KNOWN_VERSIONS]
    if known:
        yield r.passed(resource, f"serves {', '.join(served)}")
    else:
        yield r.warn(
            resource,
            f"serves {', '.join(served) or 'no version'}; this igw understands {', '.join(KNOWN_VERSIONS)}",
            severity=Severity.HIGH,
        )


CHECK = FunctionCheck(META, _run)
