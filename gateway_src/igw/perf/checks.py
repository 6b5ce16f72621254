"""``igw perf checks``: pre-flight + audit of a simulated cluster (1,000 pods, 50 configs by default).

Prints the time of each command and two ratios measured in the same run: against a baseline
cluster one tenth the size (≈10x means the checks scale linearly), and against the cost of just
building the inventory (how much the checks add over reading the objects). Target: the full-size
preflight + audit under 10 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

HELP = "Check throughput: preflight + audit of a simulated cluster (default 1,000 pods, 50 configs)."


def _hardened_pod_spec(image: str, port: int) -> dict[str, Any]:
    return {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "server",
                "image": image,
                "args": ["--port", str(port)],
                "ports": [{"containerPort": port}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": port}},
                "livenessProbe": {"httpGet": {"path": "/health", "port": port}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }


def _ready_status(schedulers: list[dict[str, Any]]) -> dict[str, Any]:
    """The status ``igw operator`` writes on a config it serves with every scheduler available (a live
    cluster's configs carry one; without it IGW-PF016 reports that no operator runs)."""
    conditions = [
        {"type": kind, "status": "True", "reason": reason, "observedGeneration": 1}
        for kind, reason in (("Accepted", "Valid"), ("GatewayProgrammed", "Programmed"), ("Ready", "Ready"))
    ]
    return {
        "observedGeneration": 1,
        "conditions": conditions,
        "schedulers": [
            {"name": s["name"], "rolloutState": "Available", "endpoints": {"found": 2, "ready": 2}}
            for s in schedulers
        ],
        "readyEndpoints": 2 * len(schedulers),
        "models": ",".join(s["modelName"] for s in schedulers),
        "address": "gateway-gateway.svc",
    }


def simulated_cluster(*, pods: int, configs: int, schedulers: int) -> list[dict[str, Any]]:
    """A live-shaped cluster: configs, one Deployment per scheduler, Ready pods, policies, an Ingress."""
    docs: list[dict[str, Any]] = []
    models = configs * schedulers
    for c in range(configs):
        ns = f"team-{c}"
        sched = []
        for s in range(schedulers):
            app = f"model-{c}-{s}"
            engine = "sglang" if s % 2 else "vllm"
            port = 30000 if engine == "sglang" else 8000
            sched.append(
                {
                    "name": f"s{s}",
                    "modelName": app,
                    "modelSelector": {"matchLabels": {"app": app}},
                    "engineType": engine,
                    "targetPort": port,
                }
            )
            image = "lmsysorg/sglang:v0.4.6.post1" if engine == "sglang" else "vllm/vllm-openai:v0.10.1"
            spec = _hardened_pod_spec(image, port)
            own_pods = {"matchLabels": {"app": app}}
            spec["topologySpreadConstraints"] = [  # its two replicas on two nodes (IGW-AU410)
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "labelSelector": own_pods}
            ]
            if engine == "sglang":
                spec["containers"][0]["args"].append("--enable-metrics")
            docs.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": app, "namespace": ns},
                    "spec": {
                        "replicas": 2,
                        "selector": {"matchLabels": {"app": app}},
                        "template": {"metadata": {"labels": {"app": app}}, "spec": spec},
                    },
                    "status": {"availableReplicas": 2},
                }
            )
        docs.append(
            {
                "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
                "kind": "InferenceGatewayConfig",
                "metadata": {"name": "gateway", "namespace": ns, "generation": 1},
                "status": _ready_status(sched),
                "spec": {
                    "bbr": {"enabled": True},
                    "tls": {"acmArn": "arn:aws:acm:us-west-2:111122223333:certificate/x"},
                    "auth": {
                        "jwt": {
                            "provider": {
                                "name": "idp",
                                "issuer": "https://idp.example.com/",
                                "remoteJWKS": {"uri": "https://idp.example.com/jwks"},
                                "audiences": ["igw"],
                            }
                        }
                    },
                    "schedulers": sched,
                    "extensions": {
                        "rateLimits": {"default": {"requestsPerSecond": 10, "burst": 20}},
                        "authorization": {
                            "requireTenant": True,
                            "prefixCacheIsolation": "tenant",
                            "maxTokenLifetime": "1h",
                        },
                    },
                },
            }
        )
        docs.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "deny", "namespace": ns},
                "spec": {"podSelector": {}},
            }
        )
        docs.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "pdb", "namespace": ns},
                "spec": {"selector": {}},
            }
        )
    docs.append(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"},
            "spec": {
                "group": "inference.sagemaker.aws.amazon.com",
                "versions": [{"name": "v1alpha1", "served": True}],
            },
        }
    )
    for name in ("aws-load-balancer-controller", "cert-manager"):
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": "kube-system"},
                "spec": {"replicas": 2, "template": {"spec": {"containers": []}}},
                "status": {"availableReplicas": 2},
            }
        )
    for p in range(pods):
        c, s = divmod(p % models, schedulers)
        app = f"model-{c}-{s}"
        deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == app)
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{app}-{p}",
                    "namespace": f"team-{c}",
                    "labels": {"app": app},
                    # as in a cluster: the pod belongs to its Deployment's ReplicaSet (the audit judges
                    # the Deployment's template, not each of its pods)
                    "ownerReferences": [{"kind": "ReplicaSet", "name": f"{app}-rs", "controller": True}],
                },
                "spec": deployment["spec"]["template"]["spec"],
                "status": {
                    "phase": "Running",
                    "podIP": f"10.1.{p // 250}.{p % 250}",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    return docs


def _inventory(docs: list[dict[str, Any]]) -> Any:
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.checks.inventory import AwsView, Inventory, KubeView

    objects: dict[str, Any] = {}
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.checks.inventory import KINDS

    for kind in KINDS:
        objects[kind] = [d for d in docs if d["kind"] == kind]
    kube = KubeView(objects=objects, static=False, source="simulated")
    return Inventory(kube=kube, aws=AwsView.absent("simulated cluster"), source="simulated")


def _measure(docs: list[dict[str, Any]], repeat: int) -> tuple[float, float, float, int]:
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.checks.framework import CheckContext, run_checks
    from igw.checks.model import Command
    from igw.checks.registry import checks_for

    best_inv = best_pre = best_audit = float("inf")
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        inventory = _inventory(docs)
        built = time.perf_counter()
        ctx = CheckContext(inventory=inventory)
        pre = run_checks(checks_for(Command.PREFLIGHT), ctx)
        mid = time.perf_counter()
        audit = run_checks(checks_for(Command.AUDIT), ctx)
        end = time.perf_counter()
        best_inv, best_pre, best_audit = (
            min(best_inv, built - start),
            min(best_pre, mid - built),
            min(best_audit, end - mid),
        )
        count = len(pre) + len(audit)
        bad = [r for r in pre + audit if r.is_finding or r.not_evaluated]
        if bad:
            raise RuntimeError(f"simulated cluster should be clean, got {bad[0]}")
    return best_inv, best_pre, best_audit, count


def run(args: argparse.Namespace) -> int:
    small = simulated_cluster(
        pods=max(1, args.pods // 10), configs=max(1, args.configs // 10), schedulers=args.schedulers
    )
    full = simulated_cluster(pods=args.pods, configs=args.configs, schedulers=args.schedulers)
    _measure(small, 1)  # warm imports and caches
    s_inv, s_pre, s_audit, s_count = _measure(small, args.repeat)
    f_inv, f_pre, f_audit, f_count = _measure(full, args.repeat)
    total = f_pre + f_audit
    print(
        f"cluster: {args.pods} pods, {args.configs} configs x {args.schedulers} schedulers "
        f"(baseline: {args.pods // 10} pods, {args.configs // 10} configs); best of {args.repeat}"
    )
    print(f"{'':24}{'baseline':>12}{'full':>12}{'ratio':>9}")
    print(f"{'inventory build':24}{s_inv * 1e3:>10.1f}ms{f_inv * 1e3:>10.1f}ms{f_inv / s_inv:>8.1f}x")
    print(f"{'preflight':24}{s_pre * 1e3:>10.1f}ms{f_pre * 1e3:>10.1f}ms{f_pre / s_pre:>8.1f}x")
    print(f"{'audit':24}{s_audit * 1e3:>10.1f}ms{f_audit * 1e3:>10.1f}ms{f_audit / s_audit:>8.1f}x")
    print(f"{'results':24}{s_count:>12}{f_count:>12}")
    print(
        f"preflight+audit at full size: {total:.3f} s (target < 10 s: {'met' if total < 10 else 'MISSED'}); "
        f"checks cost {total / f_inv:.0f}x the inventory build"
    )
    return 0 if total < 10 else 1
