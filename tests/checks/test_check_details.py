"""Messages and edge cases of individual checks: diagnosis text, clocks, defaults, derived load balancers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from igw.checks.audit import jwks_host
from igw.checks.framework import CheckContext, CheckOptions, run_check
from igw.checks.inventory import Inventory, Missing, MissingFact
from igw.checks.loadbalancers import from_ingress, from_service
from igw.checks.model import Command, Severity, SkipKind, Status
from igw.checks.registry import select
from igw.checks.selectors import diagnose, selector_from_mapping
from igw.checks.sources.manifests import inventory_from_documents
from igw.checks.tls_policies import PolicyGrade, grade
from tests.checks.helpers import NOW, find, mutated, of, run, secure_docs

Docs = list[dict[str, Any]]


def _llama_labels(docs: Docs, labels: dict[str, str], namespace: str | None = None) -> None:
    deployment = find(docs, "Deployment", "llama-8b")
    deployment["spec"]["template"]["metadata"]["labels"] = labels
    if namespace:
        deployment["metadata"]["namespace"] = namespace


@pytest.mark.parametrize(
    ("labels", "namespace", "hint"),
    [
        ({"ap": "llama-8b"}, None, "label key 'ap' looks like a typo of the selector's 'app'"),
        ({"App": "llama-8b"}, None, "label key 'App' looks like a typo"),
        ({"app": "Llama-8B"}, None, "differs only in case"),
        ({"app": "llama-8b-instruct"}, None, "differs by a suffix"),
        ({"app": "llama-8b"}, "ml-staging", "1 matching pod(s) in namespace 'ml-staging'"),
    ],
)
def test_selector_near_miss_diagnosis(labels: dict[str, str], namespace: str | None, hint: str) -> None:
    results = run(mutated(lambda d: _llama_labels(d, labels, namespace)), Command.PREFLIGHT)
    failed = [r for r in of(results, "IGW-PF010") if r.status is Status.FAIL]
    assert len(failed) == 1
    assert "scheduler llama" in failed[0].resource
    assert "no pod in namespace 'ml' matches app=llama-8b" in failed[0].message
    assert hint in failed[0].message


def test_unrelated_pods_give_no_false_hint() -> None:
    selector = selector_from_mapping({"matchLabels": {"app": "llama-8b"}})
    pods = [{"kind": "Pod", "metadata": {"name": "x", "namespace": "ml", "labels": {"team": "search"}}}]
    assert diagnose(selector, namespace="ml", pods=pods) == []


def test_selector_expressions_and_errors() -> None:
    selector = selector_from_mapping(
        {
            "matchExpressions": [
                {"key": "app", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ]
        }
    )
    assert selector.matches({"app": "b"})
    assert not selector.matches({"app": "b", "canary": "1"})
    with pytest.raises(ValueError, match=r"matchExpressions\[0\]"):
        selector_from_mapping({"matchExpressions": [{"key": "app", "operator": "Near"}]})


def test_live_pods_must_be_ready() -> None:
    docs = secure_docs()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llama-0", "namespace": "ml", "labels": {"app": "llama-8b"}},
        "spec": find(docs, "Deployment", "llama-8b")["spec"]["template"]["spec"],
        "status": {"conditions": [{"type": "Ready", "status": "False"}], "podIP": "10.0.0.1"},
    }
    inventory = inventory_from_documents([*docs, pod], source="t")
    inventory.kube.static = False
    inventory.kube.objects["Pod"] = [pod]
    results = [r for r in run(inventory, Command.PREFLIGHT) if r.check_id == "IGW-PF010"]
    llama = next(r for r in results if "scheduler llama" in r.resource)
    assert llama.status is Status.FAIL
    assert "match app=llama-8b but none is Ready" in llama.message


def test_default_policy_message_names_the_effective_policy() -> None:
    docs = mutated(
        lambda d: find(d, "Ingress", "gateway")["metadata"]["annotations"].pop(
            "alb.ingress.kubernetes.io/ssl-policy"
        )
    )
    [result] = [r for r in of(run(docs, Command.AUDIT), "IGW-AU102") if r.status is Status.FAIL]
    assert "effective policy ELBSecurityPolicy-2016-08 (the default when no policy is set)" in result.message
    assert result.resource == "Ingress ml/gateway listener HTTPS:443"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("ELBSecurityPolicy-TLS13-1-2-Res-PQ-2025-09", PolicyGrade.ALLOWED),
        ("ELBSecurityPolicy-TLS13-1-3-2021-06", PolicyGrade.ALLOWED),
        ("ELBSecurityPolicy-TLS13-1-2-FIPS-2023-04", PolicyGrade.ALLOWED),
        ("ELBSecurityPolicy-2016-08", PolicyGrade.DENIED),
        ("ELBSecurityPolicy-TLS-1-1-2017-01", PolicyGrade.DENIED),
        ("ELBSecurityPolicy-FS-1-1-2019-08", PolicyGrade.DENIED),
        ("ELBSecurityPolicy-TLS13-1-2-Ext2-2021-06", PolicyGrade.DENIED),
        ("ELBSecurityPolicy-TLS-1-2-2017-01", PolicyGrade.LEGACY),
        ("ELBSecurityPolicy-TLS13-1-2-Res-PQ-2026-03", PolicyGrade.UNKNOWN),
    ],
)
def test_policy_grades(policy: str, expected: PolicyGrade) -> None:
    assert grade(policy) is expected


def _service(annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "gw", "namespace": "ml", "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 443, "name": "https"}], **spec},
    }


def test_service_load_balancer_defaults() -> None:
    legacy = from_service(_service({}))
    assert legacy is not None
    assert (legacy.scheme, legacy.scheme_explicit) == ("internet-facing", False)
    lbc = from_service(
        _service(
            {
                "service.beta.kubernetes.io/aws-load-balancer-type": "external",
                "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": "arn:cert",
            }
        )
    )
    assert lbc is not None
    assert lbc.scheme == "internal"
    assert [(li.protocol, li.ssl_policy) for li in lbc.listeners] == [("TLS", "ELBSecurityPolicy-2016-08")]
    assert from_service({"kind": "Service", "metadata": {"name": "x"}, "spec": {"type": "ClusterIP"}}) is None


def test_legacy_service_is_internet_facing_by_default_and_tcp() -> None:
    docs = [*secure_docs(), _service({})]
    results = run(docs, Command.AUDIT)
    assert {
        (r.check_id, r.status, r.severity) for r in results if r.resource == "Service ml/gw" and r.is_finding
    } == {
        ("IGW-AU301", Status.FAIL, Severity.HIGH),
        ("IGW-AU302", Status.FAIL, Severity.HIGH),
        ("IGW-AU305", Status.WARN, Severity.LOW),
    }


def test_ingress_of_other_class_is_ignored() -> None:
    ingress = {"kind": "Ingress", "metadata": {"name": "n"}, "spec": {"ingressClassName": "nginx"}}
    assert from_ingress(ingress) is None


def _certificate(status: dict[str, Any] | None) -> dict[str, Any]:
    cert: dict[str, Any] = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "gw", "namespace": "ml"},
        "spec": {"secretName": "gw-tls"},
    }
    if status is not None:
        cert["status"] = status
    return cert


def _ts(delta: timedelta) -> str:
    return (NOW + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


READY = [{"type": "Ready", "status": "True"}]


@pytest.mark.parametrize(
    ("status", "expected", "text"),
    [
        (
            {
                "conditions": READY,
                "notAfter": _ts(timedelta(days=60)),
                "renewalTime": _ts(timedelta(days=30)),
            },
            (Status.PASS, None),
            "Ready, valid until",
        ),
        (
            {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "message": "Issuing certificate as Secret does not exist",
                    }
                ]
            },
            (Status.FAIL, Severity.HIGH),
            "not Ready: Issuing certificate",
        ),
        (
            {"conditions": READY, "notAfter": _ts(timedelta(days=-1))},
            (Status.FAIL, Severity.CRITICAL),
            "expired",
        ),
        (
            {
                "conditions": READY,
                "notAfter": _ts(timedelta(days=20)),
                "renewalTime": _ts(timedelta(days=-2)),
            },
            (Status.FAIL, Severity.HIGH),
            "renewal overdue",
        ),
        (
            {"conditions": READY, "notAfter": _ts(timedelta(days=5))},
            (Status.WARN, Severity.MEDIUM),
            "expires in 5.0 days",
        ),
    ],
)
def test_certificate_states(
    status: dict[str, Any], expected: tuple[Status, Severity | None], text: str
) -> None:
    inventory = inventory_from_documents([_certificate(status)], source="t")
    [check] = select(Command.AUDIT, only=["IGW-AU103"])
    [result] = run_check(check, CheckContext(inventory=inventory, clock=lambda: NOW))
    assert result.status is expected[0]
    if expected[1] is not None:
        assert result.severity is expected[1]
    assert text in result.message


def test_certificate_without_status_is_skipped_not_passed() -> None:
    inventory = inventory_from_documents([_certificate(None)], source="t")
    [check] = select(Command.AUDIT, only=["IGW-AU103"])
    [result] = run_check(check, CheckContext(inventory=inventory, clock=lambda: NOW))
    assert (result.status, result.skip_kind) == (Status.SKIP, SkipKind.NOT_APPLICABLE)


def test_missing_facts_and_crashes_become_skips() -> None:
    class Boom:
        meta = select(Command.AUDIT, only=["IGW-AU101"])[0].meta

        def run(self, ctx: CheckContext) -> list[Any]:
            raise KeyError("spec")

    class Absent:
        meta = Boom.meta

        def run(self, ctx: CheckContext) -> list[Any]:
            raise MissingFact(Missing("API forbidden: pods", SkipKind.NOT_EVALUATED))

    ctx = CheckContext(inventory=inventory_from_documents([], source="t"))
    [crash] = run_check(Boom(), ctx)
    assert crash.status is Status.SKIP
    assert crash.not_evaluated
    assert "KeyError" in crash.message
    [absent] = run_check(Absent(), ctx)
    assert absent.not_evaluated
    assert absent.message == "API forbidden: pods"


def test_workloads_in_system_namespaces_only_on_request(secure_inventory: Inventory) -> None:
    default = {r.resource for r in run(secure_inventory, Command.AUDIT) if r.check_id == "IGW-AU409"}
    assert "Deployment kube-system/aws-load-balancer-controller" not in default
    everything = run(secure_inventory, Command.AUDIT, CheckOptions(include_system_namespaces=True))
    probes = [r for r in everything if r.check_id == "IGW-AU409" and "aws-load-balancer" in r.resource]
    assert probes
    assert probes[0].status is Status.FAIL


def test_unknown_check_id_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown check ID 'IGW-XX1'"):
        select(Command.AUDIT, only=["IGW-XX1"])


def test_every_check_has_complete_metadata() -> None:
    for command in Command:
        for check in select(command):
            meta = check.meta
            assert meta.id.startswith("IGW-PF" if command is Command.PREFLIGHT else "IGW-AU")
            assert meta.title
            assert meta.description
            assert meta.remediation
            assert meta.command is command


def _tls_ingress(hosts: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "gw", "namespace": "ml"},
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": hosts, "secretName": "gw-tls"}]},
    }


@pytest.mark.parametrize(
    ("hosts", "names", "status"),
    [
        (["igw.example.com"], ["igw.example.com"], Status.PASS),
        (["a.igw.example.com"], ["*.igw.example.com"], Status.PASS),
        (["a.b.igw.example.com"], ["*.igw.example.com"], Status.FAIL),
        (["igw.example.com", "api.example.com"], ["igw.example.com"], Status.FAIL),
        (["IGW.example.com"], ["igw.example.com."], Status.PASS),
    ],
)
def test_certificate_names_cover_ingress_hosts(hosts: list[str], names: list[str], status: Status) -> None:
    cert = _certificate(None)
    cert["spec"]["dnsNames"] = names
    inventory = inventory_from_documents([cert, _tls_ingress(hosts)], source="t")
    [check] = select(Command.AUDIT, only=["IGW-AU104"])
    [result] = run_check(check, CheckContext(inventory=inventory, clock=lambda: NOW))
    assert result.status is status
    assert result.resource == "Ingress ml/gw secret gw-tls"
    if status is Status.FAIL:
        assert "not in Certificate ml/gw names" in result.message


def test_certificate_names_and_hosts_that_are_not_lists_are_not_read_letter_by_letter() -> None:
    """A string where Kubernetes wants a list (a YAML slip) lists no name: read letter by letter, each
    letter of ``hosts`` was a host the certificate did not cover (session s50)."""
    cert = _certificate(None)
    cert["spec"]["dnsNames"] = "igw.example.com"
    ingress = _tls_ingress(["igw.example.com"])
    ingress["spec"]["tls"][0]["hosts"] = "igw.example.com"
    inventory = inventory_from_documents([cert, ingress], source="t")
    [check] = select(Command.AUDIT, only=["IGW-AU104"])
    [result] = run_check(check, CheckContext(inventory=inventory, clock=lambda: NOW))
    assert (result.status, result.message) == (Status.PASS, "0 host(s) covered by Certificate ml/gw")


def test_partially_unreadable_load_balancers_are_not_evaluated(secure_inventory: Inventory) -> None:
    secure_inventory.kube.objects["Service"] = Missing("API forbidden: services", SkipKind.NOT_EVALUATED)
    for check_id in ("IGW-AU102", "IGW-AU301", "IGW-AU302"):
        [result] = of(run(secure_inventory, Command.AUDIT), check_id)
        assert (result.status, result.skip_kind) == (Status.SKIP, SkipKind.NOT_EVALUATED)
        assert result.message == "API forbidden: services"


@pytest.mark.parametrize(
    ("host", "risky"),
    [
        ("2852039166", True),  # 169.254.169.254 as one decimal number
        ("0x7f.1", True),  # 127.0.0.1
        ("012.0.0.1", True),  # octal 012 is 10: 10.0.0.1 (ipaddress refuses the leading zero)
        ("010.0.0.1", False),  # octal 010 is 8: 8.0.0.1, public
        ("8.8.8.8", False),
        ("1e100.net", False),  # a DNS name that starts with digits
        ("256.1.1.1", False),  # out of range: no address, a (bad) name
    ],
)
def test_jwks_host_reads_ipv4_literals_as_the_resolver_does(host: str, risky: bool) -> None:
    assert (jwks_host.classify(host) is not None) is risky


@pytest.mark.parametrize(
    ("written", "status", "says"),
    [
        (
            " ELBSecurityPolicy-TLS-1-0-2015-04 ",
            Status.FAIL,
            "effective policy ELBSecurityPolicy-TLS-1-0-2015-04",
        ),
        ("ELBSecurityPolicy-2016-08\t", Status.FAIL, "allows TLS 1.0/1.1 or weak ciphers"),
        ("ELBSecurityPolicy-TLS13-1-2-2021-06 ", Status.WARN, "ELB knows no policy of that name as written"),
    ],
)
def test_a_policy_name_with_stray_whitespace_is_graded_by_the_policy_it_names(
    written: str, status: Status, says: str
) -> None:
    """A trailing space (a YAML slip) made a TLS 1.0 policy an unknown one: a MEDIUM warning where the
    name it spells fails HIGH. The name is graded without the whitespace, and quoted as written."""
    docs = mutated(
        lambda d: find(d, "Ingress", "gateway")["metadata"]["annotations"].update(
            {"alb.ingress.kubernetes.io/ssl-policy": written}
        )
    )
    [result] = [
        r for r in of(run(docs, Command.AUDIT), "IGW-AU102") if r.resource.startswith("Ingress ml/gateway")
    ]
    assert result.status is status
    assert says in result.message
    assert f"written {written!r}" in result.message


def _alb_class(
    name: str, *, default: bool = False, controller: str = "ingress.k8s.aws/alb"
) -> dict[str, Any]:
    annotations = {"ingressclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"controller": controller},
    }


@pytest.mark.parametrize(
    ("ingress_class", "classes"),
    [
        ("internal-alb", [_alb_class("internal-alb")]),  # the controller's class under another name
        (None, [_alb_class("public", default=True)]),  # no class named: the cluster's default ALB class
    ],
)
def test_an_ingress_of_any_alb_ingress_class_is_audited(
    ingress_class: str | None, classes: list[dict[str, Any]]
) -> None:
    """Only the class name ``alb`` was read: an Ingress of an IngressClass named otherwise whose
    controller is ``ingress.k8s.aws/alb`` (or of no class, with such a class the default) was no load
    balancer to the audit, and its TLS 1.0 policy passed unseen."""

    def weaken(docs: list[dict[str, Any]]) -> None:
        ingress = find(docs, "Ingress", "gateway")
        ingress["metadata"]["annotations"]["alb.ingress.kubernetes.io/ssl-policy"] = (
            "ELBSecurityPolicy-2016-08"
        )
        ingress["metadata"]["annotations"].pop("kubernetes.io/ingress.class", None)
        ingress["spec"].pop("ingressClassName", None)
        if ingress_class is not None:
            ingress["spec"]["ingressClassName"] = ingress_class

    docs = [*mutated(weaken), *classes]
    [result] = [
        r for r in of(run(docs, Command.AUDIT), "IGW-AU102") if r.resource.startswith("Ingress ml/gateway")
    ]
    assert result.status is Status.FAIL
    # a class of another controller is still not an ALB, default or not
    other = [
        *mutated(weaken),
        _alb_class(ingress_class or "nginx", default=True, controller="k8s.io/ingress-nginx"),
    ]
    assert not [
        r for r in of(run(other, Command.AUDIT), "IGW-AU102") if r.resource.startswith("Ingress ml/gateway")
    ]


@pytest.mark.parametrize(
    ("issuer", "jwks", "status"),
    [
        ("HTTPS://idp.example.com/", "HTTPS://idp.example.com/.well-known/jwks.json", Status.PASS),
        ("https://idp.example.com/", "Https://idp.example.com/.well-known/jwks.json", Status.PASS),
        ("https://idp.example.com/", "HTTP://idp.example.com/.well-known/jwks.json", Status.FAIL),
        ("https:idp.example.com", "https://idp.example.com/.well-known/jwks.json", Status.FAIL),
    ],
)
def test_jwt_urls_are_https_whatever_the_case_of_their_scheme(issuer: str, jwks: str, status: Status) -> None:
    """URL schemes are case-insensitive (RFC 3986 3.1) and the gateway fetches ``HTTPS://`` over https;
    IGW-AU202 failed it HIGH as "is not https"."""

    def spell(docs: list[dict[str, Any]]) -> None:
        provider = find(docs, "InferenceGatewayConfig", "gateway")["spec"]["auth"]["jwt"]["provider"]
        provider["issuer"], provider["remoteJWKS"]["uri"] = issuer, jwks

    [result] = of(run(mutated(spell), Command.AUDIT), "IGW-AU202")
    assert result.status is status, result.message
