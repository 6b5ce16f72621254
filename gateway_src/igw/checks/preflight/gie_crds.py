"""IGW-PF019: the Gateway API Inference Extension CRDs our chart ships (``InferenceObjective``,
``InferenceModelRewrite`` in ``inference.networking.x-k8s.io``) have one owner.

Why: the chart installs them by default (``crds.inferenceExtension.enabled: true``, operator mode). On a
cluster where the reference Inference Extension (or llm-d) already installed them, ``helm install`` and
``helm upgrade`` stop on Helm's ownership check ("... exists and cannot be imported into the current
release: invalid ownership metadata"), and the EKS add-on's ``resolveConflicts: OVERWRITE`` takes them
over instead, so that removing the add-on could delete them and every InferenceObjective and
InferenceModelRewrite with them. The check names the value that avoids both: the chart then leaves the
CRDs to their owner, and the operator reads the objects whoever serves the CRD.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from igw.addon import pins
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import annotations_of, labels_of, name_of, spec
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.preflight._gateway_install import ours_addon_unknown, ours_installed, ours_values
from igw.checks.preflight.igwc_crd import OWNER_LABEL, OWNER_VALUE
from igw.config.inference_extension import GROUP, KINDS, VERSION
from igw.config.inference_extension_crds import PLURALS

CRD_NAMES = tuple(f"{PLURALS[kind]}.{GROUP}" for kind in KINDS)
VALUE = "crds.inferenceExtension.enabled"

META = CheckMeta(
    id="IGW-PF019",
    title="Inference Extension CRDs (InferenceObjective, InferenceModelRewrite) have one owner",
    command=Command.PREFLIGHT,
    category="cluster",
    severity=Severity.HIGH,
    description=f"CRDs {', '.join(CRD_NAMES)} that another installation owns must not be installed by "
    f"this chart too ({VALUE} defaults to true in operator mode).",
    remediation=f"Set {VALUE}: false in the chart values (igw addon create/update --configuration-values, "
    "or inference.addon.configurationValues in the CDK deployment config) so the existing installation "
    "keeps owning these CRDs; the operator reads InferenceObjectives and InferenceModelRewrites whoever "
    "installed the CRD.",
)


def _owner(crd: Manifest) -> str:
    """Who installed a CRD this chart did not, in words (Helm release, manager label, or neither)."""
    annotations = annotations_of(crd)
    release = annotations.get("meta.helm.sh/release-name")
    if release:
        namespace = annotations.get("meta.helm.sh/release-namespace")
        return f"Helm release {release}" + (f" in {namespace}" if namespace else "")
    manager = labels_of(crd).get("app.kubernetes.io/managed-by")
    if manager:
        return f"an installation managed by {manager}"
    return "another installation (no Helm ownership metadata: kubectl apply or kustomize)"


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _values_leave_them(ctx: CheckContext) -> str | None:
    """Why our installed add-on's configuration values do not install these CRDs (``None``: they do,
    or the values are not known here)."""
    values = ours_values(ctx)
    if values is None:
        return None
    crds = _mapping(values.get("crds"))
    extension = _mapping(crds.get("inferenceExtension"))
    if values.get("mode") == "gateway":
        return f"EKS add-on {pins.IGW_ADDON_NAME} runs mode gateway (no CRDs)"
    if crds.get("enabled") is False:
        return f"EKS add-on {pins.IGW_ADDON_NAME} has crds.enabled: false"
    if extension.get("enabled") is False:
        return f"EKS add-on {pins.IGW_ADDON_NAME} has {VALUE}: false"
    return None


def _serves(crd: Manifest) -> list[str]:
    return [
        str(v.get("name"))
        for v in spec(crd).get("versions") or []
        if isinstance(v, dict) and v.get("served", True)
    ]


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    crds = {name_of(c): c for c in need(ctx.inventory.kube.of("CustomResourceDefinition"))}
    left = _values_leave_them(ctx)
    installed = ours_installed(ctx)
    for name in CRD_NAMES:
        crd = crds.get(name)
        if crd is None:
            continue
        resource = f"CustomResourceDefinition {name}"
        if labels_of(crd).get(OWNER_LABEL) == OWNER_VALUE:
            yield r.passed(resource, "installed by this chart")
            continue
        owner = _owner(crd)
        served = _serves(crd)
        version_note = (
            ""
            if VERSION in served
            else f"; it serves {', '.join(served) or 'no version'}, and the operator reads {VERSION}, so "
            "objects of this kind are not read until it does"
        )
        if left is not None:
            yield r.passed(resource, f"owned by {owner}; {left}, so the chart leaves it alone{version_note}")
        elif installed is not None and ours_addon_unknown(ctx):
            yield r.passed(
                resource,
                f"owned by {owner}; the installed {installed} left it to that owner{version_note}",
            )
        else:
            yield r.fail(
                resource,
                f"already installed by {owner}, not by this chart: with {VALUE}: true (the default in "
                "operator mode) helm install/upgrade stops on Helm's ownership check ('exists and cannot "
                "be imported into the current release'), and the EKS add-on's resolveConflicts OVERWRITE "
                "takes the CRD over, so that deleting the add-on could delete it with every "
                f"{name.split('.')[0]} object{version_note}",
            )


CHECK = FunctionCheck(META, _run)
