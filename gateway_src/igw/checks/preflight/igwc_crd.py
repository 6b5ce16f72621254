"""IGW-PF006: the ``InferenceGatewayConfig`` CRD is installed, serves a version we understand, and
belongs to this add-on. A CRD another installation owns (AWS's own add-on, another Helm release)
while our chart would install it too (``crds.enabled: true``, the default, in both modes) fails HIGH,
as IGW-PF019 does for the Inference Extension CRDs: ``helm install``/``upgrade`` stops on Helm's
ownership check and the EKS add-on's ``resolveConflicts: OVERWRITE`` takes it over. Until session
s42 this was a MEDIUM warning, so a preflight that "passed" was followed by a failed install."""

from __future__ import annotations

from collections.abc import Iterator

from igw.addon import pins
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import labels_of, name_of, spec
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.preflight._gateway_install import ours_addon_unknown, ours_installed, ours_values
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
    release = annotations.get("meta.helm.sh/release-name")
    if release:  # before the label, which for a Helm release says only "managed by Helm"
        namespace = annotations.get("meta.helm.sh/release-namespace")
        return f"Helm release {release}" + (f" in {namespace}" if namespace else "")
    if labels.get("app.kubernetes.io/managed-by"):
        return f"managed by {labels['app.kubernetes.io/managed-by']}"
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
        yield _foreign(ctx, r, resource, owner)
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


def _foreign(ctx: CheckContext, r: Reporter, resource: str, owner: str) -> Result:
    """The verdict on a CRD another installation owns: fine while our chart leaves it alone (its
    values say ``crds.enabled: false``, or our install exists, which Helm would have stopped), else a
    HIGH failure naming the value to set."""
    values = ours_values(ctx)
    crds = values.get("crds") if values is not None else None
    if isinstance(crds, dict) and crds.get("enabled") is False:
        return r.passed(
            resource,
            f"owned by another installation ({owner}); EKS add-on {pins.IGW_ADDON_NAME} has "
            "crds.enabled: false, so the chart leaves it alone",
        )
    installed = ours_installed(ctx)
    if installed is not None and ours_addon_unknown(ctx):
        return r.passed(
            resource,
            f"owned by another installation ({owner}); the installed {installed} left it to that owner",
        )
    return r.fail(
        resource,
        f"already installed by another installation ({owner}), not by this add-on's chart: with "
        "crds.enabled: true (the default) helm install/upgrade stops on Helm's ownership check ('exists "
        "and cannot be imported into the current release'), and the EKS add-on's resolveConflicts "
        "OVERWRITE takes the CRD over, so that deleting the add-on could delete it with every "
        "InferenceGatewayConfig",
        severity=Severity.HIGH,
        remediation="Keep one owner: set crds.enabled: false in the chart values (igw addon create/update "
        "--configuration-values, or inference.addon.configurationValues in the CDK deployment config) "
        "while the other installation manages the CRD, or remove the other installation first.",
    )


CHECK = FunctionCheck(META, _run)
