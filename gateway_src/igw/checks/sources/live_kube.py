"""Source, Kubernetes side of a live scan: list every kind the checks read, as plain JSON.

Responses are read raw (``_preload_content=False``) rather than through the client's typed models:
checks work on manifests, and raw JSON keeps fields the models would drop. Each kind is listed
once across all namespaces, paginated. A 401/403 on one kind makes only that kind ``Missing``
(not-evaluated, with the API's message); a connection failure marks every kind unreachable
without further attempts, so an unreachable API costs one timeout, not one per kind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from igw.checks.inventory import KubeView, Manifest, Missing
from igw.checks.model import SkipKind
from igw.config.model import API_GROUP, API_VERSION
from igw.errors import IgwToolingError

PAGE_SIZE = 500
REQUEST_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class _Lister:
    kind: str
    api: str
    method: str
    args: tuple[str, ...] = ()
    absent_ok: bool = False
    """A 404 means the resource type is not installed (a CRD), i.e. no objects."""


LISTERS: tuple[_Lister, ...] = (
    _Lister("Pod", "CoreV1Api", "list_pod_for_all_namespaces"),
    _Lister("Service", "CoreV1Api", "list_service_for_all_namespaces"),
    _Lister("Namespace", "CoreV1Api", "list_namespace"),
    _Lister("ServiceAccount", "CoreV1Api", "list_service_account_for_all_namespaces"),
    _Lister("Deployment", "AppsV1Api", "list_deployment_for_all_namespaces"),
    _Lister("StatefulSet", "AppsV1Api", "list_stateful_set_for_all_namespaces"),
    _Lister("DaemonSet", "AppsV1Api", "list_daemon_set_for_all_namespaces"),
    _Lister("Job", "BatchV1Api", "list_job_for_all_namespaces"),
    _Lister("CronJob", "BatchV1Api", "list_cron_job_for_all_namespaces"),
    _Lister("Ingress", "NetworkingV1Api", "list_ingress_for_all_namespaces"),
    _Lister("IngressClass", "NetworkingV1Api", "list_ingress_class"),
    _Lister(
        "IngressClassParams",
        "CustomObjectsApi",
        "list_cluster_custom_object",
        ("elbv2.k8s.aws", "v1beta1", "ingressclassparams"),
        absent_ok=True,
    ),
    _Lister("NetworkPolicy", "NetworkingV1Api", "list_network_policy_for_all_namespaces"),
    _Lister("PodDisruptionBudget", "PolicyV1Api", "list_pod_disruption_budget_for_all_namespaces"),
    _Lister(
        "HorizontalPodAutoscaler", "AutoscalingV2Api", "list_horizontal_pod_autoscaler_for_all_namespaces"
    ),
    _Lister("CustomResourceDefinition", "ApiextensionsV1Api", "list_custom_resource_definition"),
    _Lister(
        "InferenceGatewayConfig",
        "CustomObjectsApi",
        "list_cluster_custom_object",
        (API_GROUP, API_VERSION, "inferencegatewayconfigs"),
        absent_ok=True,
    ),
    _Lister(
        "Certificate",
        "CustomObjectsApi",
        "list_cluster_custom_object",
        ("cert-manager.io", "v1", "certificates"),
        absent_ok=True,
    ),
)


class ClusterUnreachable(IgwToolingError):
    pass


def _api_message(exc: Any) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except (TypeError, ValueError):
        return str(getattr(exc, "reason", exc))


class NotKubernetesAnswer(IgwToolingError):
    """The server answered a list with something that is not a JSON object (a proxy's or a login
    page's HTML, a plain-text banner): it ended the whole scan as ``cannot read the source:
    JSONDecodeError: Expecting value: line 1 column 1 (char 0)``, naming neither the API nor the
    answer (until session s50). The body is not quoted: it may hold anything."""

    def __init__(self, kind: str, response: Any) -> None:
        status = getattr(response, "status", "?")
        headers = getattr(response, "headers", None) or {}
        content_type = headers.get("Content-Type") or "none"
        super().__init__(
            f"listing {kind}, the server answered HTTP {status} with Content-Type {content_type!r}, "
            "not a Kubernetes list (is the kubeconfig's server a proxy or a login page?)"
        )


def _list_all(call: Callable[..., Any], args: tuple[str, ...], kind: str) -> list[Manifest]:
    items: list[Manifest] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {
            "limit": PAGE_SIZE,
            "_preload_content": False,
            "_request_timeout": REQUEST_TIMEOUT_S,
        }
        if token:
            kwargs["_continue"] = token
        response = call(*args, **kwargs)
        try:
            page = json.loads(response.data)
        except ValueError:
            page = None
        if not isinstance(page, dict):
            raise NotKubernetesAnswer(kind, response)
        for item in page.get("items") or []:
            item.setdefault("kind", kind)
            items.append(item)
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def live_kube_view(api_client: Any, *, source: str) -> KubeView:
    """List every kind through ``api_client`` (a ``kubernetes.client.ApiClient``)."""
    # deferred: optional dependency: the kubernetes client (ops extra), only for a live cluster
    import kubernetes
    import urllib3

    objects: dict[str, list[Manifest] | Missing] = {}
    apis: dict[str, Any] = {}
    for lister in LISTERS:
        api = apis.setdefault(lister.api, getattr(kubernetes.client, lister.api)(api_client))
        try:
            objects[lister.kind] = _list_all(getattr(api, lister.method), lister.args, lister.kind)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404 and lister.absent_ok:
                objects[lister.kind] = []
            elif exc.status in (401, 403):
                reason = "forbidden" if exc.status == 403 else "unauthorized"
                objects[lister.kind] = Missing(f"API {reason}: {_api_message(exc)}", SkipKind.NOT_EVALUATED)
            else:
                objects[lister.kind] = Missing(
                    f"API error {exc.status} listing {lister.kind}: {_api_message(exc)}",
                    SkipKind.NOT_EVALUATED,
                )
        except (urllib3.exceptions.HTTPError, OSError, NotKubernetesAnswer) as exc:
            reason = (
                f"not a Kubernetes API: {exc}"
                if isinstance(exc, NotKubernetesAnswer)
                else f"Kubernetes API unreachable: {type(exc).__name__}: {exc}"
            )
            missing = Missing(reason, SkipKind.NOT_EVALUATED)
            return KubeView(objects={lst.kind: missing for lst in LISTERS}, static=False, source=source)
    return KubeView(objects=objects, static=False, source=source)


def service_account_roles(objects: Mapping[str, list[Manifest] | Missing]) -> list[str]:
    """IRSA role ARNs annotated on service accounts (roles the audit should inspect)."""
    accounts = objects.get("ServiceAccount")
    if not isinstance(accounts, list):
        return []
    arns = []
    for account in accounts:
        annotations = (account.get("metadata") or {}).get("annotations") or {}
        arn = annotations.get("eks.amazonaws.com/role-arn")
        if arn:
            arns.append(str(arn))
    return arns
