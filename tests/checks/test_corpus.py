"""The deployment corpus: a secure deployment, and one insecure variant per way of getting it wrong.

Each variant must produce exactly the expected findings - no more (false positives) and no fewer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from igw.checks.framework import CheckOptions
from igw.checks.model import Command
from tests.checks.helpers import GLOBAL_ROUTER_EXAMPLE, find, findings, mutated, of, run, secure_docs

Docs = list[dict[str, Any]]


def test_secure_deployment_has_no_findings() -> None:
    docs = secure_docs()
    assert findings(run(docs, Command.AUDIT)) == set()
    assert findings(run(docs, Command.PREFLIGHT)) == set()


def _igwc(docs: Docs) -> dict[str, Any]:
    return find(docs, "InferenceGatewayConfig", "gateway")


def _ingress_ann(docs: Docs) -> dict[str, str]:
    ann: dict[str, str] = find(docs, "Ingress", "gateway")["metadata"]["annotations"]
    return ann


def _llama(docs: Docs) -> dict[str, Any]:
    return find(docs, "Deployment", "llama-8b")


def _llama_container(docs: Docs) -> dict[str, Any]:
    container: dict[str, Any] = _llama(docs)["spec"]["template"]["spec"]["containers"][0]
    return container


def _drop_tls(docs: Docs) -> None:
    del _igwc(docs)["spec"]["tls"]
    ann = _ingress_ann(docs)
    del ann["alb.ingress.kubernetes.io/certificate-arn"]
    ann["alb.ingress.kubernetes.io/listen-ports"] = '[{"HTTP": 80}]'
    del ann["alb.ingress.kubernetes.io/ssl-redirect"]


def _drop_tls_keep_another_https_ingress(docs: Docs) -> None:
    """TLS off on the gateway's own Ingress, while an unrelated app in the cluster serves HTTPS."""
    other = copy.deepcopy(find(docs, "Ingress", "gateway"))
    other["metadata"]["name"] = "dashboard"
    other["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = "grafana"
    _drop_tls(docs)
    docs.append(other)


def _set(path: Callable[[Docs], dict[str, Any]], key: str, value: Any) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        path(docs)[key] = value

    return mutate


def _delete(path: Callable[[Docs], dict[str, Any]], key: str) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        del path(docs)[key]

    return mutate


def _tgi(image: str) -> Callable[[Docs], None]:
    """The llama scheduler's pods run TGI ``image``, and the config lists it under extensions.engines."""

    def mutate(docs: Docs) -> None:
        _igwc(docs)["spec"].setdefault("extensions", {}).update(engines={"tgi": ["llama"]})
        _llama_container(docs).update(image=image, args=["--model-id", "meta-llama/Llama-3.1-8B-Instruct",
                                                        "--port", "8000"])  # fmt: skip

    return mutate


def test_a_tgi_scheduler_running_a_current_tgi_passes_preflight() -> None:
    docs = secure_docs()
    _tgi("ghcr.io/huggingface/text-generation-inference:3.0.1")(docs)
    assert findings(run(docs, Command.PREFLIGHT)) == set()
    generic = secure_docs()
    _igwc(generic)["spec"].setdefault("extensions", {}).update(
        engines={"generic": [{"scheduler": "llama", "queue": "vllm:num_requests_waiting", "running": "r"}]}
    )
    assert findings(run(generic, Command.PREFLIGHT)) == set()


def _jwt(docs: Docs) -> dict[str, Any]:
    provider: dict[str, Any] = _igwc(docs)["spec"]["auth"]["jwt"]["provider"]
    return provider


def _security(docs: Docs) -> dict[str, Any]:
    sc: dict[str, Any] = _llama_container(docs)["securityContext"]
    return sc


def _pod_security(docs: Docs) -> dict[str, Any]:
    sc: dict[str, Any] = _llama(docs)["spec"]["template"]["spec"]["securityContext"]
    return sc


def _no_auth(docs: Docs) -> None:
    del _igwc(docs)["spec"]["auth"]


def _reserved_bands_without_auth(docs: Docs) -> None:
    flow = {
        "objectives": [{"name": "chat", "priority": 5}],
        "objectiveAccess": [{"objective": "chat", "tenants": ["a"]}],
    }
    _igwc(docs)["spec"]["extensions"]["flowControl"] = flow
    _no_auth(docs)


def _internet_facing_no_auth(docs: Docs) -> None:
    _no_auth(docs)
    _ingress_ann(docs)["alb.ingress.kubernetes.io/scheme"] = "internet-facing"
    _ingress_ann(docs)["alb.ingress.kubernetes.io/inbound-cidrs"] = "0.0.0.0/0"


def _no_network_policy(docs: Docs) -> None:
    docs.remove(find(docs, "NetworkPolicy", "default-deny"))


def _auto_issue_without_cert_manager(docs: Docs) -> None:
    _igwc(docs)["spec"].update(tls={})
    docs.remove(find(docs, "Deployment", "cert-manager"))


def _autoscaled(docs: Docs, floor: int) -> None:
    """The model Deployment's count left to a HorizontalPodAutoscaler (its manifest then sets none)."""
    llama = _llama(docs)
    llama["spec"].pop("replicas", None)
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": llama["metadata"]["name"]}
    docs.append(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "llama-8b", "namespace": llama["metadata"]["namespace"]},
            "spec": {"scaleTargetRef": target, "minReplicas": floor, "maxReplicas": 8},
        }
    )


def _llama_pod(docs: Docs) -> dict[str, Any]:
    pod: dict[str, Any] = _llama(docs)["spec"]["template"]["spec"]
    return pod


def _spread_elsewhere(docs: Docs) -> None:
    """A spread that counts another app's pods, or by a key that is not a node or a zone: no spread."""
    _llama_pod(docs)["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "qwen-7b"}},
        },
        {
            "maxSkew": 1,
            "topologyKey": "example.com/rack",
            "labelSelector": {"matchLabels": {"app": "llama-8b"}},
        },
    ]


def _anti_affinity_instead(docs: Docs) -> None:
    pod = _llama_pod(docs)
    del pod["topologySpreadConstraints"]
    term = {
        "topologyKey": "topology.kubernetes.io/zone",
        "labelSelector": {"matchLabels": {"app": "llama-8b"}},
    }
    pod["affinity"] = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": term}]
        }
    }


def _one_replica_unspread(docs: Docs) -> None:
    _llama(docs)["spec"]["replicas"] = 1
    del _llama_pod(docs)["topologySpreadConstraints"]


def _no_pdb(docs: Docs) -> None:
    docs.remove(find(docs, "PodDisruptionBudget", "models"))


LLAMA = "Deployment ml/llama-8b"
QWEN = "Deployment ml/qwen-7b"

# (name, mutation, command, expected {(check, status, severity)})
CORPUS: list[tuple[str, Callable[[Docs], None], Command, set[tuple[str, str, str]]]] = [
    # ---- TLS
    ("no-tls", _drop_tls, Command.AUDIT, {("IGW-AU101", "FAIL", "HIGH"), ("IGW-AU303", "FAIL", "MEDIUM")}),
    (
        "no-tls-but-another-app-has-https",
        _drop_tls_keep_another_https_ingress,
        Command.AUDIT,
        {("IGW-AU101", "FAIL", "HIGH"), ("IGW-AU303", "FAIL", "MEDIUM")},
    ),
    (
        "default-ssl-policy (E1)",
        _delete(_ingress_ann, "alb.ingress.kubernetes.io/ssl-policy"),
        Command.AUDIT,
        {("IGW-AU102", "FAIL", "HIGH")},
    ),
    (
        "ext1-policy (E3)",
        _set(
            _ingress_ann, "alb.ingress.kubernetes.io/ssl-policy", "ELBSecurityPolicy-TLS13-1-2-Ext1-2021-06"
        ),
        Command.AUDIT,
        {("IGW-AU102", "FAIL", "HIGH")},
    ),
    (
        "future-policy (E2)",
        _set(
            _ingress_ann, "alb.ingress.kubernetes.io/ssl-policy", "ELBSecurityPolicy-TLS13-1-2-Res-PQ-2026-03"
        ),
        Command.AUDIT,
        {("IGW-AU102", "WARN", "MEDIUM")},
    ),
    # ---- JWT (E8)
    ("no-auth", _no_auth, Command.AUDIT, {("IGW-AU201", "FAIL", "HIGH"), ("IGW-AU602", "FAIL", "HIGH")}),
    (
        "no-auth-internet-facing",
        _internet_facing_no_auth,
        Command.AUDIT,
        {
            ("IGW-AU201", "FAIL", "CRITICAL"),
            ("IGW-AU602", "FAIL", "HIGH"),
            ("IGW-AU301", "WARN", "MEDIUM"),
            ("IGW-AU302", "FAIL", "HIGH"),
        },
    ),
    (
        "http-jwks",
        _set(_jwt, "remoteJWKS", {"uri": "http://idp.example.com/jwks.json"}),
        Command.AUDIT,
        {("IGW-AU202", "FAIL", "HIGH")},
    ),
    (
        "metadata-jwks",
        _set(_jwt, "remoteJWKS", {"uri": "https://169.254.169.254/latest/jwks"}),
        Command.AUDIT,
        {("IGW-AU204", "FAIL", "HIGH")},
    ),
    # The resolver reads these as 169.254.169.254 / 127.0.0.1 (inet_aton); ipaddress does not (s38).
    *(
        (
            f"metadata-jwks-as-{spelling}",
            _set(_jwt, "remoteJWKS", {"uri": f"https://{host}/latest/jwks"}),
            Command.AUDIT,
            {("IGW-AU204", "FAIL", "HIGH")},
        )
        for spelling, host in (
            ("decimal", "2852039166"),
            ("hex", "0xa9fea9fe"),
            ("octal", "0251.0376.0251.0376"),
            ("two-part", "169.254.43518"),
            ("short-loopback", "127.1"),
        )
    ),
    (
        "cluster-local-jwks",
        _set(_jwt, "remoteJWKS", {"uri": "https://keycloak.auth.svc.cluster.local/certs"}),
        Command.AUDIT,
        {("IGW-AU204", "WARN", "MEDIUM")},
    ),
    ("no-audience", _delete(_jwt, "audiences"), Command.AUDIT, {("IGW-AU203", "FAIL", "HIGH")}),
    (
        "hs256-and-skew",
        lambda d: _igwc(d)["spec"]["extensions"]["authorization"].update(
            algorithms=["RS256", "HS256"], clockSkew="10m"
        ),
        Command.AUDIT,
        {("IGW-AU205", "FAIL", "HIGH")},
    ),
    # unsigned tokens, and a skew written as a number of seconds, passed as "defaults or stricter"
    # until session s50 (the schema refuses both; the audit reads manifests nothing validated)
    (
        "alg-none",
        lambda d: _igwc(d)["spec"]["extensions"]["authorization"].update(algorithms=["RS256", "None"]),
        Command.AUDIT,
        {("IGW-AU205", "FAIL", "HIGH")},
    ),
    (
        "clock-skew-a-day-in-seconds",
        lambda d: _igwc(d)["spec"]["extensions"]["authorization"].update(clockSkew=86400),
        Command.AUDIT,
        {("IGW-AU205", "FAIL", "MEDIUM")},
    ),
    # a token is accepted for as long as its own exp says (Envoy's default too; session s40)
    (
        "token-lifetime-unbounded",
        lambda d: _igwc(d)["spec"]["extensions"]["authorization"].pop("maxTokenLifetime"),
        Command.AUDIT,
        {("IGW-AU206", "WARN", "MEDIUM")},
    ),
    (
        "token-lifetime-of-a-month",
        lambda d: _igwc(d)["spec"]["extensions"]["authorization"].update(maxTokenLifetime="720h"),
        Command.AUDIT,
        {("IGW-AU206", "WARN", "LOW")},
    ),
    # ---- exposure (E4, E5)
    (
        "internet-facing-open",
        lambda d: _ingress_ann(d).update(
            {
                "alb.ingress.kubernetes.io/scheme": "internet-facing",
                "alb.ingress.kubernetes.io/inbound-cidrs": "0.0.0.0/0",
            }
        ),
        Command.AUDIT,
        {("IGW-AU301", "WARN", "MEDIUM"), ("IGW-AU302", "FAIL", "HIGH")},
    ),
    (
        "http-without-redirect",
        _delete(_ingress_ann, "alb.ingress.kubernetes.io/ssl-redirect"),
        Command.AUDIT,
        {("IGW-AU303", "FAIL", "MEDIUM")},
    ),
    (
        "invalid-headers-kept",
        _delete(_ingress_ann, "alb.ingress.kubernetes.io/load-balancer-attributes"),
        Command.AUDIT,
        {("IGW-AU304", "FAIL", "MEDIUM")},
    ),
    # ---- workload hardening (E7)
    ("root", _delete(_pod_security, "runAsNonRoot"), Command.AUDIT, set()),  # runAsUser 10001 still non-root
    (
        "root-user",
        lambda d: _pod_security(d).update(runAsNonRoot=False, runAsUser=0),
        Command.AUDIT,
        {("IGW-AU401", "FAIL", "MEDIUM")},
    ),
    (
        "writable-root",
        _set(_security, "readOnlyRootFilesystem", False),
        Command.AUDIT,
        {("IGW-AU402", "FAIL", "MEDIUM")},
    ),
    ("caps-kept", _set(_security, "capabilities", {}), Command.AUDIT, {("IGW-AU403", "FAIL", "MEDIUM")}),
    (
        "sys-admin",
        _set(_security, "capabilities", {"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
        Command.AUDIT,
        {("IGW-AU403", "FAIL", "HIGH")},
    ),
    ("no-seccomp", _delete(_pod_security, "seccompProfile"), Command.AUDIT, {("IGW-AU404", "FAIL", "LOW")}),
    ("privileged", _set(_security, "privileged", True), Command.AUDIT, {("IGW-AU405", "FAIL", "HIGH")}),
    (
        "escalation",
        _delete(_security, "allowPrivilegeEscalation"),
        Command.AUDIT,
        {("IGW-AU405", "FAIL", "MEDIUM")},
    ),
    ("no-netpol", _no_network_policy, Command.AUDIT, {("IGW-AU406", "FAIL", "MEDIUM")}),
    ("no-pdb", _no_pdb, Command.AUDIT, {("IGW-AU407", "FAIL", "LOW")}),
    (
        "one-replica",
        lambda d: _llama(d)["spec"].update(replicas=1),
        Command.AUDIT,
        {("IGW-AU408", "FAIL", "LOW")},
    ),
    ("autoscaled-from-one", lambda d: _autoscaled(d, 1), Command.AUDIT, {("IGW-AU408", "FAIL", "LOW")}),
    ("autoscaled-from-two", lambda d: _autoscaled(d, 2), Command.AUDIT, set()),
    (
        "replicas-not-spread",
        _delete(_llama_pod, "topologySpreadConstraints"),
        Command.AUDIT,
        {("IGW-AU410", "FAIL", "LOW")},
    ),
    ("replicas-spread-on-the-wrong-pods", _spread_elsewhere, Command.AUDIT, {("IGW-AU410", "FAIL", "LOW")}),
    ("replicas-kept-apart-by-anti-affinity", _anti_affinity_instead, Command.AUDIT, set()),
    (
        "one-replica-not-judged-for-spread",
        _one_replica_unspread,
        Command.AUDIT,
        {("IGW-AU408", "FAIL", "LOW")},
    ),
    (
        "no-readiness",
        _delete(_llama_container, "readinessProbe"),
        Command.AUDIT,
        {("IGW-AU409", "FAIL", "MEDIUM")},
    ),
    # ---- tenancy
    (
        "no-rate-limits",
        lambda d: _igwc(d)["spec"]["extensions"].pop("rateLimits"),
        Command.AUDIT,
        {("IGW-AU601", "WARN", "MEDIUM")},
    ),
    # A bucket size without a rate limits nothing (the gateway serves such a tenant unlimited): s38.
    (
        "rate-limits-burst-only",
        _set(lambda d: _igwc(d)["spec"]["extensions"]["rateLimits"], "default", {"burst": 40}),
        Command.AUDIT,
        {("IGW-AU601", "WARN", "MEDIUM")},
    ),
    (
        "rate-limits-tenant-token-burst-only",
        lambda d: _igwc(d)["spec"]["extensions"]["rateLimits"].update(
            default={"tokenBurst": 1000}, tenants=[{"tenant": "team-a", "burst": 5}]
        ),
        Command.AUDIT,
        {("IGW-AU601", "WARN", "MEDIUM")},
    ),
    (
        "no-tenant-isolation",
        lambda d: _igwc(d)["spec"]["extensions"].pop("authorization"),
        Command.AUDIT,
        {("IGW-AU602", "WARN", "MEDIUM"), ("IGW-AU604", "WARN", "LOW"), ("IGW-AU206", "WARN", "MEDIUM")},
    ),
    (
        "prefix-caches-shared-by-tenants",
        lambda d: _igwc(d)["spec"]["extensions"]["authorization"].pop("prefixCacheIsolation"),
        Command.AUDIT,
        {("IGW-AU604", "WARN", "LOW")},
    ),
    (
        "bands-open-to-any-client",
        lambda d: _igwc(d)["spec"]["extensions"].update(
            flowControl={"objectives": [{"name": "chat", "priority": 5}]}
        ),
        Command.AUDIT,
        {("IGW-AU603", "WARN", "MEDIUM")},
    ),
    (
        "bands-reserved-without-auth",
        _reserved_bands_without_auth,
        Command.AUDIT,
        {("IGW-AU201", "FAIL", "HIGH"), ("IGW-AU602", "FAIL", "HIGH"), ("IGW-AU603", "WARN", "LOW")},
    ),
    (
        "bands-limited",
        lambda d: _igwc(d)["spec"]["extensions"].update(flowControl={"headerPriorityLimit": 0}),
        Command.AUDIT,
        set(),
    ),
    # ---- pre-flight
    (
        "old-vllm",
        _set(_llama_container, "image", "vllm/vllm-openai:v0.8.5"),
        Command.PREFLIGHT,
        {("IGW-PF011", "FAIL", "HIGH")},
    ),
    (
        "latest-vllm",
        _set(_llama_container, "image", "vllm/vllm-openai:latest"),
        Command.PREFLIGHT,
        {("IGW-PF011", "WARN", "MEDIUM")},
    ),
    (
        "sglang-without-metrics",
        lambda d: find(d, "Deployment", "qwen-7b")["spec"]["template"]["spec"]["containers"][0].update(
            args=["--model-path", "Qwen/Qwen2.5-7B-Instruct"]
        ),
        Command.PREFLIGHT,
        {("IGW-PF011", "FAIL", "HIGH")},
    ),
    (
        "engine-mismatch",
        lambda d: _igwc(d)["spec"]["schedulers"][0].update(engineType="sglang"),
        Command.PREFLIGHT,
        {("IGW-PF011", "FAIL", "HIGH"), ("IGW-PF012", "FAIL", "HIGH")},
    ),
    (
        "tgi-listed-but-vllm-runs",
        lambda d: _igwc(d)["spec"].setdefault("extensions", {}).update(engines={"tgi": ["llama"]}),
        Command.PREFLIGHT,
        {("IGW-PF011", "FAIL", "HIGH"), ("IGW-PF012", "FAIL", "HIGH")},
    ),
    (
        "old-tgi",
        _tgi("ghcr.io/huggingface/text-generation-inference:1.4.5"),
        Command.PREFLIGHT,
        {("IGW-PF011", "FAIL", "HIGH")},
    ),
    (
        "port-mismatch",
        lambda d: _igwc(d)["spec"]["schedulers"][0].update(targetPort=8080),
        Command.PREFLIGHT,
        {("IGW-PF013", "FAIL", "HIGH")},
    ),
    (
        "label-typo",
        lambda d: _llama(d)["spec"]["template"]["metadata"].update(labels={"ap": "llama-8b"}),
        Command.PREFLIGHT,
        {("IGW-PF010", "FAIL", "CRITICAL")},
    ),
    (
        "invalid-config",
        lambda d: _igwc(d)["spec"].update(bogus=True),
        Command.PREFLIGHT,
        {("IGW-PF009", "FAIL", "HIGH")},
    ),
    (
        "crd-missing",
        lambda d: d.remove(
            find(d, "CustomResourceDefinition", "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com")
        ),
        Command.PREFLIGHT,
        {("IGW-PF006", "WARN", "INFO")},
    ),
    (
        "crd-owned-by-another-installation",
        lambda d: find(
            d, "CustomResourceDefinition", "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"
        )["metadata"].update(labels={"app.kubernetes.io/managed-by": "EKS"}),
        Command.PREFLIGHT,
        {("IGW-PF006", "FAIL", "HIGH")},
    ),
    (
        "lbc-missing",
        lambda d: d.remove(find(d, "Deployment", "aws-load-balancer-controller")),
        Command.PREFLIGHT,
        {("IGW-PF007", "WARN", "INFO")},
    ),
    (
        "auto-issue-without-cert-manager",
        _auto_issue_without_cert_manager,
        Command.PREFLIGHT,
        {("IGW-PF008", "WARN", "MEDIUM")},
    ),
]


@pytest.mark.parametrize(
    ("mutation", "command", "expected"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS]
)
def test_insecure_variant_has_exactly_the_expected_findings(
    mutation: Callable[[Docs], None], command: Command, expected: set[tuple[str, str, str]]
) -> None:
    assert findings(run(mutated(mutation), command)) == expected


def test_approval_turns_internet_facing_into_a_pass() -> None:
    docs = mutated(lambda d: _ingress_ann(d).update({"alb.ingress.kubernetes.io/scheme": "internet-facing"}))
    assert ("IGW-AU301", "WARN", "MEDIUM") in findings(run(docs, Command.AUDIT))
    assert not findings(run(docs, Command.AUDIT, CheckOptions(allow_internet_facing=True)))


def _qwen_container(docs: Docs) -> dict[str, Any]:
    container: dict[str, Any] = find(docs, "Deployment", "qwen-7b")["spec"]["template"]["spec"]["containers"][
        0
    ]
    return container


def _engine_priority(*entries: dict[str, Any]) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        _igwc(docs)["spec"].setdefault("extensions", {})["flowControl"] = {"enginePriority": list(entries)}

    return mutate


def _with_args(container: Callable[[Docs], dict[str, Any]], *args: str) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        c = container(docs)
        c["args"] = [*(c.get("args") or ()), *args]

    return mutate


def _both(*mutations: Callable[[Docs], None]) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        for m in mutations:
            m(docs)

    return mutate


@pytest.mark.parametrize(
    ("name", "mutation", "expected"),
    [
        ("vllm-priority-without-an-entry", _with_args(_llama_container, "--scheduling-policy", "priority"),
         {("IGW-PF018", "FAIL", "MEDIUM")}),
        ("vllm-priority-as-one-token", _with_args(_llama_container, "--scheduling-policy=priority"),
         {("IGW-PF018", "FAIL", "MEDIUM")}),
        ("vllm-fcfs", _with_args(_llama_container, "--scheduling-policy", "fcfs"), set()),
        ("sglang-preempting-without-an-entry", _with_args(_qwen_container, "--enable-priority-scheduling"),
         {("IGW-PF018", "FAIL", "HIGH")}),
        (
            "sglang-ordering-only-without-an-entry",
            _with_args(_qwen_container, "--enable-priority-scheduling", "--disable-priority-preemption"),
            {("IGW-PF018", "FAIL", "MEDIUM")},
        ),
        (
            "sglang-with-its-entry",
            _both(
                _engine_priority({"scheduler": "qwen"}),
                _with_args(_qwen_container, "--enable-priority-scheduling"),
            ),
            set(),
        ),
        (
            "another-schedulers-entry-does-not-count",
            _both(
                _engine_priority({"scheduler": "llama"}),
                _with_args(_llama_container, "--scheduling-policy", "priority"),
                _with_args(_qwen_container, "--enable-priority-scheduling"),
            ),
            {("IGW-PF018", "FAIL", "HIGH")},
        ),
    ],
)  # fmt: skip
def test_a_priority_scheduling_server_takes_its_priority_from_the_gateway_not_the_client(
    name: str, mutation: Callable[[Docs], None], expected: set[tuple[str, str, str]]
) -> None:
    """A server scheduling by the body's priority behind a pool the gateway does not write it for lets
    any client preempt (SGLang) or jump the queue (vLLM)."""
    docs = secure_docs()
    mutation(docs)
    assert findings(run(docs, Command.PREFLIGHT)) == expected, name


@pytest.mark.parametrize(
    ("name", "mutation", "expected"),
    [
        ("vllm-without-the-flag", _engine_priority({"scheduler": "llama"}), {("IGW-PF017", "FAIL", "HIGH")}),
        (
            "vllm-with-the-flag",
            _both(
                _engine_priority({"scheduler": "llama"}),
                _with_args(_llama_container, "--scheduling-policy", "priority"),
            ),
            set(),
        ),
        (
            "vllm-with-the-flag-as-one-token",
            _both(
                _engine_priority({"scheduler": "llama"}),
                _with_args(_llama_container, "--scheduling-policy=priority"),
            ),
            set(),
        ),
        ("sglang-without-the-flag", _engine_priority({"scheduler": "qwen"}), {("IGW-PF017", "FAIL", "HIGH")}),
        (
            "sglang-with-the-flag",
            _both(
                _engine_priority({"scheduler": "qwen"}),
                _with_args(_qwen_container, "--enable-priority-scheduling"),
            ),
            set(),
        ),
        (
            "sglang-threshold-differs",
            _both(
                _engine_priority({"scheduler": "qwen"}),
                _with_args(
                    _qwen_container,
                    "--enable-priority-scheduling",
                    "--priority-scheduling-preemption-threshold",
                    "50",
                ),
            ),
            {("IGW-PF017", "FAIL", "MEDIUM")},
        ),
        (
            "sglang-preemption-disabled-on-the-server-only",
            _both(
                _engine_priority({"scheduler": "qwen"}),
                _with_args(_qwen_container, "--enable-priority-scheduling", "--disable-priority-preemption"),
            ),
            {("IGW-PF017", "FAIL", "MEDIUM")},
        ),
        (
            "sglang-all-flags-as-configured",
            _both(
                _engine_priority({"scheduler": "qwen", "preemptionThreshold": 3, "lowValuesFirst": True}),
                _with_args(
                    _qwen_container,
                    "--enable-priority-scheduling",
                    "--priority-scheduling-preemption-threshold=3",
                    "--schedule-low-priority-values-first",
                ),
            ),
            set(),
        ),
    ],
)
def test_engine_priority_needs_the_engines_flags(
    name: str, mutation: Callable[[Docs], None], expected: set[tuple[str, str, str]]
) -> None:
    docs = secure_docs()
    mutation(docs)
    assert findings(run(docs, Command.PREFLIGHT)) == expected, name


def _extension(name: str, value: dict[str, Any]) -> Callable[[Docs], None]:
    def mutate(docs: Docs) -> None:
        _igwc(docs)["spec"]["extensions"][name] = value

    return mutate


_PF032 = {("IGW-PF032", "WARN", "MEDIUM")}


@pytest.mark.parametrize(
    ("name", "mutation", "expected"),
    [
        ("retry-after-at-the-openai-cap", _extension("routing", {"retryAfter": {"maxSeconds": 120}}), set()),
        ("retry-after-over-the-openai-cap", _extension("routing", {"retryAfter": {"maxSeconds": 121}}),
         _PF032),
        ("retry-after-min-over-the-cap",
         _extension("routing", {"retryAfter": {"minSeconds": 300, "maxSeconds": 600}}), _PF032),
        # 1/0.01 = 100 s, spread to at most 110 s; 1/0.009 = 112 s, spread to 123 s.
        ("slow-request-refill-within-the-cap",
         _extension("rateLimits", {"default": {"requestsPerSecond": 0.01}}), set()),
        ("slow-request-refill-over-the-cap",
         _extension("rateLimits", {"tenants": [{"tenant": "t", "requestsPerSecond": 0.009}]}), _PF032),
        ("token-burst-of-a-minute", _extension("rateLimits", {"default": {"tokensPerMinute": 1000}}), set()),
        ("token-burst-of-three-minutes",
         _extension("rateLimits", {"default": {"tokensPerMinute": 1000, "tokenBurst": 3000}}), _PF032),
    ],
)  # fmt: skip
def test_a_retry_after_the_openai_sdk_would_not_honour_is_warned_about(
    name: str, mutation: Callable[[Docs], None], expected: set[tuple[str, str, str]]
) -> None:
    """The OpenAI Python SDK raises a 429 whose Retry-After is over 120 s at once, without retrying
    (measured in tests/gateway/test_sdk_refusals.py): a configured bound, or a rate-limit refill, that
    can send one is warned about with its config path."""
    docs = secure_docs()
    mutation(docs)
    results = run(docs, Command.PREFLIGHT)
    assert findings(results) == expected, name
    for result in results:
        if result.check_id == "IGW-PF032" and result.is_finding:
            assert "spec.extensions." in result.message
            assert "120 s" in result.message


def test_a_retry_after_over_the_cap_is_named_by_its_path() -> None:
    docs = secure_docs()
    _extension("rateLimits", {"tenants": [{"tenant": "a"}, {"tenant": "b", "requestsPerSecond": 0.001}]})(
        docs
    )
    [warned] = [r for r in run(docs, Command.PREFLIGHT) if r.check_id == "IGW-PF032" and r.is_finding]
    assert warned.message.startswith("spec.extensions.rateLimits.tenants[1].requestsPerSecond: ")
    assert "up to 1100 s" in warned.message
    assert "OpenAI Python SDK" in warned.message
    assert "Anthropic SDK" in warned.message


def _router_limits(**fields: Any) -> dict[str, Any]:
    """The example GlobalRouterConfig with ``fields`` (``rateLimits``, ``modelRateLimits``) in its spec."""
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(GLOBAL_ROUTER_EXAMPLE.read_text()))
    doc["spec"].update(fields)
    return doc


_LIMITS = {"backend": "redis", "redis": {"url": "rediss://cache.example.com:6379/0"}}


@pytest.mark.parametrize(
    ("name", "fields", "warned_path"),
    [
        ("the-example", {}, None),
        # 1/0.009 = 112 s, spread to 123 s; tokenBurst 3 minutes of tokensPerMinute, spread to 198 s.
        ("tenant-wide-request-refill-over-the-cap",
         {"rateLimits": {**_LIMITS, "default": {"requestsPerSecond": 0.009}}},
         "spec.rateLimits.default.requestsPerSecond"),
        ("a-tenants-token-burst-over-the-cap",
         {"rateLimits": {**_LIMITS,
                         "tenants": [{"tenant": "a", "tokensPerMinute": 1000, "tokenBurst": 3000}]}},
         "spec.rateLimits.tenants[0].tokenBurst"),
        ("a-model-limit-over-the-cap",
         {"modelRateLimits": [{"tenant": "*", "model": "m", "requestsPerSecond": 20},
                              {"tenant": "a", "model": "m", "requestsPerSecond": 0.001}]},
         "spec.modelRateLimits[1].requestsPerSecond"),
        ("a-model-limit-within-the-cap",
         {"modelRateLimits": [{"tenant": "a", "model": "m", "requestsPerSecond": 0.01}]}, None),
    ],
)  # fmt: skip
def test_a_global_routers_rate_limits_are_judged_like_the_gateways(
    name: str, fields: dict[str, Any], warned_path: str | None
) -> None:
    """The router refuses over its rateLimits and modelRateLimits with the same limiter and spread as
    tier 1 (:func:`igw.security.denials.rate_limited`): a wait past the OpenAI SDK's 120 s is warned
    about on the GlobalRouterConfig, by its path; its fixed no_healthy_cluster wait is named on a pass."""
    results = of(run([*secure_docs(), _router_limits(**fields)], Command.PREFLIGHT), "IGW-PF032")
    [router] = [r for r in results if r.resource == "GlobalRouterConfig global-llama"]
    if warned_path is None:
        assert not router.is_finding, (name, router.message)
        assert "no_healthy_cluster" in router.message
    else:
        assert router.is_finding, name
        assert (router.status.value, router.severity.label) == ("WARN", "MEDIUM")
        assert router.message.startswith(f"{warned_path}: a Retry-After of up to "), router.message
        assert "OpenAI Python SDK" in router.message
    assert not [r for r in results if r.is_finding and r is not router]  # the gateway's config passes


def test_a_global_router_alone_is_judged() -> None:
    """Manifests holding only a GlobalRouterConfig (the router's own deployment) are judged too."""
    doc = _router_limits(
        modelRateLimits=[{"tenant": "a", "model": "m", "tokensPerMinute": 10, "tokenBurst": 100}]
    )
    [result] = of(run([doc], Command.PREFLIGHT), "IGW-PF032")
    assert result.is_finding
    assert result.message.startswith("spec.modelRateLimits[0].tokenBurst: a Retry-After of up to 660 s")
