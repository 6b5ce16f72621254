"""CustomResourceDefinitions of the add-ons a test cluster may have: cert-manager and the AWS Load
Balancer Controller.

A real API server serves ``cert-manager.io`` (Certificate, Issuer, ClusterIssuer) and
``elbv2.k8s.aws`` (IngressClassParams) only once those projects' CRDs are installed, and answers 404
for them before; so does the fake (:mod:`tests.fakes.kube_api`). A test of a cluster that has the
add-on installs its CRDs with :meth:`tests.fakes.kube_api.FakeKubeApiServer.install_cert_manager` or
:meth:`~tests.fakes.kube_api.FakeKubeApiServer.install_load_balancer_controller`; a test of a cluster
without it installs nothing.

The names, group, versions, scope and subresources are the upstream CRDs' (cert-manager v1.18
``crds/``, aws-load-balancer-controller v2.13 ``config/crd``); the schemas are not: each keeps the
objects' fields as written (``x-kubernetes-preserve-unknown-fields``), since the fake would otherwise
prune and validate against schemas this project does not own and does not test.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cert_manager_crds", "ingress_class_params_crd"]


def _crd(
    group: str,
    version: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool,
    short_names: tuple[str, ...] = (),
    status_subresource: bool = False,
) -> dict[str, Any]:
    """One CRD serving ``kind`` at ``group/version``, its schema open (see the module docstring)."""
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema = {
        "type": "object",
        "properties": {"spec": dict(open_object), "status": dict(open_object)},
    }
    version_doc: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status_subresource:
        version_doc["subresources"] = {"status": {}}
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [version_doc],
        },
    }


def cert_manager_crds() -> list[dict[str, Any]]:
    """cert-manager's Certificate, Issuer and ClusterIssuer CRDs (``cert-manager.io/v1``, each with
    a ``/status`` subresource, as upstream declares them)."""
    return [
        _crd(
            "cert-manager.io",
            "v1",
            "Certificate",
            "certificates",
            namespaced=True,
            short_names=("cert", "certs"),
            status_subresource=True,
        ),
        _crd("cert-manager.io", "v1", "Issuer", "issuers", namespaced=True, status_subresource=True),
        _crd(
            "cert-manager.io",
            "v1",
            "ClusterIssuer",
            "clusterissuers",
            namespaced=False,
            status_subresource=True,
        ),
    ]


def ingress_class_params_crd() -> dict[str, Any]:
    """The AWS Load Balancer Controller's IngressClassParams CRD (``elbv2.k8s.aws/v1beta1``,
    cluster-scoped, no subresources)."""
    return _crd("elbv2.k8s.aws", "v1beta1", "IngressClassParams", "ingressclassparams", namespaced=False)
