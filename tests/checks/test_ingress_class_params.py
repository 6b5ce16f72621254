"""The Load Balancer Controller's IngressClassParams override an Ingress's annotations, and the audit
reads them (IGW-AU102 TLS policy, IGW-AU301 scheme, IGW-AU302 inbound CIDRs, IGW-AU304 attributes).

An IngressClass names its IngressClassParams in ``spec.parameters`` (``elbv2.k8s.aws``); the
controller then applies the params' ``scheme``, ``sslPolicy``, ``inboundCIDRs``, ``certificateArn``
and ``loadBalancerAttributes`` to every Ingress of the class, ignoring the matching annotations
(AWS Load Balancer Controller guide, "IngressClass", IngressClassParams specification). Before
session s39 only the annotations were read: the secure corpus's Ingress, made internet-facing, open
to the world and TLS 1.0 by its class's params, passed all four checks. Those findings then spoke
the annotations' words, and a user searched the Ingress for an annotation that is not there: they now
name the params and the field. The params' ``namespaceSelector`` was not read either: an Ingress in a
namespace it does not select gets no load balancer from the class (the controller refuses to
reconcile it), yet was judged internet-facing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from igw.checks.model import Command, Result, Severity, SkipKind, Status
from tests.checks.helpers import cli, crds_first, find, of, run, secure_docs
from tests.fakes.kube_api import running_fake_kube

INGRESS = "Ingress ml/gateway"
PARAMS_SCHEME_CIDRS = "IngressClassParams public-params (spec.scheme, spec.inboundCIDRs): "


def _class(params: str | None = "public-params") -> dict[str, Any]:
    body: dict[str, Any] = {"controller": "ingress.k8s.aws/alb"}
    if params:
        body["parameters"] = {"apiGroup": "elbv2.k8s.aws", "kind": "IngressClassParams", "name": params}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {"name": "alb"},
        "spec": body,
    }


def _params(**fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "elbv2.k8s.aws/v1beta1",
        "kind": "IngressClassParams",
        "metadata": {"name": "public-params"},
        "spec": fields,
    }


WEAKENING = _params(
    scheme="internet-facing",
    sslPolicy="ELBSecurityPolicy-TLS-1-0-2015-04",
    inboundCIDRs=["0.0.0.0/0"],
    loadBalancerAttributes=[{"key": "routing.http.drop_invalid_header_fields.enabled", "value": "false"}],
)


def _on_ingress(results: list[Result], check_id: str) -> Result:
    [result] = [r for r in of(results, check_id) if r.resource.startswith(INGRESS)]
    return result


def test_params_override_the_ingress_annotations() -> None:
    results = run([*secure_docs(), _class(), WEAKENING], Command.AUDIT)
    policy = _on_ingress(results, "IGW-AU102")
    assert (policy.status, policy.message) == (
        Status.FAIL,
        "IngressClassParams public-params (spec.sslPolicy): effective policy "
        "ELBSecurityPolicy-TLS-1-0-2015-04 allows TLS 1.0/1.1 or weak ciphers",
    )
    scheme = _on_ingress(results, "IGW-AU301")
    assert (scheme.status, scheme.message) == (
        Status.WARN,
        "IngressClassParams public-params (spec.scheme): internet-facing and not approved",
    )
    cidrs = _on_ingress(results, "IGW-AU302")
    assert (cidrs.status, cidrs.severity, cidrs.message) == (
        Status.FAIL,
        Severity.HIGH,
        f"{PARAMS_SCHEME_CIDRS}internet-facing and open to 0.0.0.0/0",
    )
    headers = _on_ingress(results, "IGW-AU304")
    assert (headers.status, headers.message) == (
        Status.FAIL,
        "IngressClassParams public-params (spec.loadBalancerAttributes): "
        "routing.http.drop_invalid_header_fields.enabled is false",
    )


def test_findings_from_the_annotations_do_not_name_the_params() -> None:
    """Only what the params set is attributed to them: a class whose params set nothing the checks
    read, or only some fields, leaves the others in the annotations' words."""
    docs = secure_docs()
    find(docs, "Ingress", "gateway")["metadata"]["annotations"]["alb.ingress.kubernetes.io/scheme"] = (
        "internet-facing"
    )
    results = run([*docs, _class(), _params(sslPolicy="ELBSecurityPolicy-TLS-1-0-2015-04")], Command.AUDIT)
    assert _on_ingress(results, "IGW-AU301").message == "internet-facing and not approved"
    assert _on_ingress(results, "IGW-AU304").message == "drops invalid header fields"
    tls = _on_ingress(results, "IGW-AU102").message
    assert tls.startswith("IngressClassParams public-params (spec.sslPolicy): "), tls
    bare = run([*secure_docs(), _class(), _params(group={"name": "shared"})], Command.AUDIT)
    assert not any("IngressClassParams" in r.message for r in bare), [r.message for r in bare]


def test_params_can_also_harden_and_unset_fields_leave_the_annotations() -> None:
    """The class's restrictive settings count; what they leave unset is the annotations' again."""
    docs = secure_docs()
    find(docs, "Ingress", "gateway")["metadata"]["annotations"]["alb.ingress.kubernetes.io/inbound-cidrs"] = (
        "0.0.0.0/0"
    )
    results = run([*docs, _class(), _params(inboundCIDRs=["10.20.0.0/16"])], Command.AUDIT)
    assert _on_ingress(results, "IGW-AU302").message == (
        "IngressClassParams public-params (spec.inboundCIDRs): inbound 10.20.0.0/16"
    )
    assert _on_ingress(results, "IGW-AU301").message == "scheme internal"
    assert _on_ingress(results, "IGW-AU102").status is Status.PASS


def test_a_certificate_in_the_params_gives_the_default_listener_https() -> None:
    """``certificateArn`` in the params (annotation and ``spec.tls`` absent) makes the controller's
    default listener HTTPS:443, whose policy is then graded."""
    docs = secure_docs()
    annotations = find(docs, "Ingress", "gateway")["metadata"]["annotations"]
    for key in ("certificate-arn", "listen-ports", "ssl-redirect", "ssl-policy"):
        annotations.pop(f"alb.ingress.kubernetes.io/{key}")
    certificate = "arn:aws:acm:us-west-2:111122223333:certificate/0f7a2c1e-1111-2222-3333-444455556666"
    results = run([*docs, _class(), _params(certificateArn=[certificate])], Command.AUDIT)
    [listener] = [r for r in of(results, "IGW-AU102") if r.resource.startswith(INGRESS)]
    assert listener.resource == f"{INGRESS} listener HTTPS:443"
    assert "ELBSecurityPolicy-2016-08 (the default when no policy is set)" in listener.message


def _live_scan(tmp_path: Path, *, forbid: str | None = None) -> dict[str, Any]:
    with running_fake_kube() as kube:
        kube.add_all(d for d in crds_first(secure_docs()) if d["kind"] != "Namespace")
        kube.install_load_balancer_controller()
        kube.add_all([_class(), WEAKENING])
        if forbid:
            kube.forbid(forbid)
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code, out = cli("audit", "--kubeconfig", str(config), "-o", "json", "--check", "IGW-AU302")
    report: dict[str, Any] = json.loads(out)
    report["exit"] = code
    return report


def test_a_live_cluster_reads_them(tmp_path: Path) -> None:
    report = _live_scan(tmp_path)
    [result] = [r for r in report["results"] if r["resource"] == INGRESS]
    assert (result["status"], result["message"]) == (
        "FAIL",
        f"{PARAMS_SCHEME_CIDRS}internet-facing and open to 0.0.0.0/0",
    )
    assert report["exit"] == 1


def test_params_a_class_names_but_rbac_hides_are_not_evaluated(tmp_path: Path) -> None:
    """Judging the annotations alone would pass what the params may override."""
    report = _live_scan(tmp_path, forbid="ingressclassparams")
    [result] = report["results"]
    assert (result["status"], result["skipKind"]) == ("SKIP", SkipKind.NOT_EVALUATED.value)
    assert "ingressclassparams" in result["message"]
    assert report["exit"] == 3


def _namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _selecting(selector: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = json.loads(json.dumps(WEAKENING))
    params["spec"]["namespaceSelector"] = selector
    return params


def test_an_ingress_outside_the_params_namespace_selector_gets_no_load_balancer() -> None:
    """The controller refuses to reconcile an Ingress of the class outside the selected namespaces
    (AWS Load Balancer Controller guide, spec.namespaceSelector): it is judged by no load-balancer
    check, where it was reported internet-facing and open to the world."""
    params = _selecting({"matchLabels": {"team": "public-api"}})
    outside = run([*secure_docs(), _namespace("ml", team="research"), _class(), params], Command.AUDIT)
    for check_id in ("IGW-AU102", "IGW-AU301", "IGW-AU302", "IGW-AU304"):
        assert not [r for r in of(outside, check_id) if r.resource.startswith(INGRESS)], check_id
    inside = run([*secure_docs(), _namespace("ml", team="public-api"), _class(), params], Command.AUDIT)
    assert _on_ingress(inside, "IGW-AU302").status is Status.FAIL


def test_the_namespace_name_label_is_selectable_and_an_unknown_namespace_counts_as_selected() -> None:
    """``kubernetes.io/metadata.name`` is on every namespace (the API server sets it, manifests leave
    it out); a namespace the source does not describe may be selected, so it is still judged."""
    by_name = _selecting(
        {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["web"]}]}
    )
    results = run([*secure_docs(), _namespace("ml"), _class(), by_name], Command.AUDIT)
    assert not [r for r in of(results, "IGW-AU301") if r.resource.startswith(INGRESS)]
    unknown = run([*secure_docs(), _class(), _selecting({"matchLabels": {"team": "x"}})], Command.AUDIT)
    assert _on_ingress(unknown, "IGW-AU301").status is Status.WARN


def test_a_live_cluster_reads_the_namespace_labels(tmp_path: Path) -> None:
    with running_fake_kube() as kube:
        kube.add_all(d for d in crds_first(secure_docs()) if d["kind"] != "Namespace")
        kube.install_load_balancer_controller()
        params = _selecting({"matchLabels": {"team": "web"}})
        kube.add_all([_namespace("ml", team="research"), _class(), params])
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        _, out = cli("audit", "--kubeconfig", str(config), "-o", "json", "--check", "IGW-AU302")
    report = json.loads(out)
    assert not [r for r in report["results"] if r["resource"] == INGRESS], report["results"]
