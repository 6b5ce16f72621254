"""The Load Balancer Controller's IngressClassParams override an Ingress's annotations, and the audit
reads them (IGW-AU102 TLS policy, IGW-AU301 scheme, IGW-AU302 inbound CIDRs, IGW-AU304 attributes).

An IngressClass names its IngressClassParams in ``spec.parameters`` (``elbv2.k8s.aws``); the
controller then applies the params' ``scheme``, ``sslPolicy``, ``inboundCIDRs``, ``certificateArn``
and ``loadBalancerAttributes`` to every Ingress of the class, ignoring the matching annotations
(AWS Load Balancer Controller guide, "IngressClass", IngressClassParams specification). Before
session s39 only the annotations were read: the secure corpus's Ingress, made internet-facing, open
to the world and TLS 1.0 by its class's params, passed all four checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from igw.checks.model import Command, Result, Severity, SkipKind, Status
from tests.checks.helpers import cli, find, of, run, secure_docs
from tests.fakes.kube_api import running_fake_kube

INGRESS = "Ingress ml/gateway"


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
        "effective policy ELBSecurityPolicy-TLS-1-0-2015-04 allows TLS 1.0/1.1 or weak ciphers",
    )
    scheme = _on_ingress(results, "IGW-AU301")
    assert scheme.status is Status.WARN
    assert "internet-facing" in scheme.message
    cidrs = _on_ingress(results, "IGW-AU302")
    assert (cidrs.status, cidrs.severity, cidrs.message) == (
        Status.FAIL,
        Severity.HIGH,
        "internet-facing and open to 0.0.0.0/0",
    )
    headers = _on_ingress(results, "IGW-AU304")
    assert headers.status is Status.FAIL


def test_params_can_also_harden_and_unset_fields_leave_the_annotations() -> None:
    """The class's restrictive settings count; what they leave unset is the annotations' again."""
    docs = secure_docs()
    find(docs, "Ingress", "gateway")["metadata"]["annotations"]["alb.ingress.kubernetes.io/inbound-cidrs"] = (
        "0.0.0.0/0"
    )
    results = run([*docs, _class(), _params(inboundCIDRs=["10.20.0.0/16"])], Command.AUDIT)
    assert _on_ingress(results, "IGW-AU302").message == "inbound 10.20.0.0/16"
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
        kube.add_all(d for d in secure_docs() if d["kind"] != "Namespace")
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
    assert (result["status"], result["message"]) == ("FAIL", "internet-facing and open to 0.0.0.0/0")
    assert report["exit"] == 1


def test_params_a_class_names_but_rbac_hides_are_not_evaluated(tmp_path: Path) -> None:
    """Judging the annotations alone would pass what the params may override."""
    report = _live_scan(tmp_path, forbid="ingressclassparams")
    [result] = report["results"]
    assert (result["status"], result["skipKind"]) == ("SKIP", SkipKind.NOT_EVALUATED.value)
    assert "ingressclassparams" in result["message"]
    assert report["exit"] == 3
