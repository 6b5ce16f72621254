"""Bare Pods, Jobs and CronJobs are audited like Deployments, from every source.

Before session s39 the workload checks (IGW-AU401...409, the management port) read only Deployments,
StatefulSets and DaemonSets, and no source collected Jobs or CronJobs: a privileged model server or
gateway run as a bare Pod or a Job passed every workload check ("nothing in scope for this check").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from igw.checks.model import Command, Result, Status
from igw.checks.sources.cdk_out import load_cdk_out
from igw.checks.sources.manifests import inventory_from_documents
from tests.checks.helpers import cli, of, run, secure_docs, write_docs
from tests.fakes.kube_api import make_pod, running_fake_kube

PRIVILEGED = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}


def _pod_spec(name: str) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [{"name": name, "image": "vllm/vllm-openai:v0.10.1", "securityContext": PRIVILEGED}],
    }


def _pod(name: str = "rogue", namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {**_pod_spec("server"), "hostNetwork": True},
    }


def _job(name: str = "batch-model", namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": _pod_spec("server")}},
    }


def _cron_job(name: str = "nightly", namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": "0 0 * * *",
            "jobTemplate": {
                "spec": {"template": {"metadata": {"labels": {"app": name}}, "spec": _pod_spec("server")}}
            },
        },
    }


EXTRA = ("Pod ml/rogue", "Job ml/batch-model", "CronJob ml/nightly")


def _verdicts(results: list[Result], check_id: str) -> dict[str, Result]:
    return {r.resource: r for r in of(results, check_id) if r.resource in EXTRA}


def test_bare_pods_jobs_and_cronjobs_fail_the_hardening_checks() -> None:
    results = run([*secure_docs(), _pod(), _job(), _cron_job()], Command.AUDIT)
    for check_id in ("IGW-AU401", "IGW-AU402", "IGW-AU403", "IGW-AU404", "IGW-AU405"):
        verdicts = _verdicts(results, check_id)
        assert set(verdicts) == set(EXTRA), (check_id, verdicts)
        assert all(v.status is Status.FAIL for v in verdicts.values()), (check_id, verdicts)
    # the corpus's namespace has a default-deny NetworkPolicy: their pods' labels are matched against it
    policies = _verdicts(results, "IGW-AU406")
    assert {r: v.message for r, v in policies.items()} == dict.fromkeys(EXTRA, "selected by default-deny")
    privilege = _verdicts(results, "IGW-AU405")
    assert privilege["Pod ml/rogue"].message.startswith("pod uses hostNetwork; server: privileged")
    assert "adds SYS_ADMIN" in _verdicts(results, "IGW-AU403")["CronJob ml/nightly"].message


def test_pods_judged_through_their_workload_are_not_audited_twice() -> None:
    """A Pod a ReplicaSet (a Deployment) or a Job created, and a Job a CronJob created, are judged
    through the owner's template; a static source's synthetic pods are that template again."""
    owned_pod = _pod("llama-abc")
    owned_pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "llama", "controller": True}]
    owned_job = _job("nightly-2901")
    owned_job["metadata"]["ownerReferences"] = [{"kind": "CronJob", "name": "nightly", "controller": True}]
    results = run([*secure_docs(), owned_pod, owned_job], Command.AUDIT)
    audited = {r.resource for r in of(results, "IGW-AU401")}
    assert "Pod ml/llama-abc" not in audited
    assert "Job ml/nightly-2901" not in audited
    assert not any(r.startswith("Pod ") for r in audited), audited  # no synthetic template pods


def test_probes_are_asked_of_a_job_only_when_a_service_sends_it_traffic() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "batch-model", "namespace": "ml"},
        "spec": {"selector": {"app": "batch-model"}, "ports": [{"port": 80, "targetPort": 8000}]},
    }
    alone = _verdicts(run([*secure_docs(), _job()], Command.AUDIT), "IGW-AU409")
    assert "Job ml/batch-model" not in alone
    served = _verdicts(run([*secure_docs(), _job(), service], Command.AUDIT), "IGW-AU409")
    assert served["Job ml/batch-model"].status is Status.FAIL
    assert _verdicts(run([*secure_docs(), _pod()], Command.AUDIT), "IGW-AU409")["Pod ml/rogue"].status is (
        Status.FAIL
    )


def test_a_gateway_run_as_a_bare_pod_is_checked_for_its_management_port() -> None:
    gateway = _pod("gw")
    gateway["spec"]["containers"][0].update(image="igw:latest", command=["igw"], args=["serve"])
    results = run([*secure_docs(), gateway], Command.AUDIT)
    [result] = [r for r in of(results, "IGW-AU306") if r.resource.startswith("Pod ml/gw")]
    assert result.status is Status.FAIL
    assert "no management port" in result.message


def test_a_job_template_stands_in_for_pods_in_a_static_source() -> None:
    """Like a Deployment's, a Job's and a CronJob's templates are the pods a scheduler's selector is
    matched against (unless suspended)."""
    suspended = _cron_job("paused")
    suspended["spec"]["suspend"] = True
    pods = inventory_from_documents([_job(), _cron_job(), suspended], source="test").kube.of("Pod")
    assert isinstance(pods, list)
    assert sorted(p["metadata"]["name"] for p in pods) == ["batch-model-<template>", "nightly-<template>"]
    assert {p["metadata"]["labels"]["app"] for p in pods} == {"batch-model", "nightly"}


def test_manifests_folder_audits_them(tmp_path: Path) -> None:
    folder = write_docs(tmp_path / "deploy", [*secure_docs(), _pod(), _job(), _cron_job()])
    code, out = cli("audit", "--manifests", str(folder), "-o", "json", "--check", "IGW-AU405")
    report = json.loads(out)
    failed = {r["resource"] for r in report["results"] if r["status"] == "FAIL"}
    assert set(EXTRA) <= failed
    assert code == 1


def test_cdk_out_audits_them(tmp_path: Path) -> None:
    template = {
        "Resources": {
            "Workloads": {
                "Type": "Custom::AWSCDK-EKS-KubernetesResource",
                "Properties": {"Manifest": json.dumps([_pod(), _job(), _cron_job()])},
            }
        }
    }
    (tmp_path / "Models.template.json").write_text(json.dumps(template))
    results = run(load_cdk_out(tmp_path), Command.AUDIT)
    verdicts = _verdicts(results, "IGW-AU405")
    assert set(verdicts) == set(EXTRA)
    assert all(v.status is Status.FAIL for v in verdicts.values())


@pytest.mark.parametrize("forbid", [None, "jobs"])
def test_a_live_cluster_lists_them(tmp_path: Path, forbid: str | None) -> None:
    """The live source lists Jobs and CronJobs (RBAC: list on batch jobs and cronjobs); a forbidden
    list leaves the other kinds judged."""
    with running_fake_kube() as kube:
        kube.add_all([_pod(), _job(), _cron_job()])
        kube.add(make_pod(name="llama-0", namespace="ml", labels={"app": "llama-8b"}))
        owned = make_pod(name="llama-1", namespace="ml", labels={"app": "llama-8b"})
        owned["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llama", "uid": "u1", "controller": True}
        ]
        kube.add(owned)
        if forbid:
            kube.forbid(forbid)
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code, out = cli("audit", "--kubeconfig", str(config), "-o", "json", "--check", "IGW-AU405")
    report = json.loads(out)
    failed = {r["resource"] for r in report["results"] if r["status"] == "FAIL"}
    expected = {"Pod ml/rogue", "CronJob ml/nightly", "Pod ml/llama-0"}
    if not forbid:
        expected.add("Job ml/batch-model")
    assert failed == expected, report["results"]
    assert code == 1


def _owned(pod: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "owner", "uid": "u1", "controller": True}
    ]
    return pod


def test_pods_a_custom_resource_controls_are_audited_as_pods() -> None:
    """A Pod whose controller is a custom resource (KubeRay's RayCluster, a LeaderWorkerSet, a Volcano
    Job: its kind is Job, its group is not ``batch``) was neither bare nor owned by a workload the
    audit reads: it escaped every workload check. Its owner's template is unknown, so it is judged as
    the Pod it is; a Pod of a built-in workload still is not (no double count)."""
    custom = [
        _owned(_pod("ray-head"), "ray.io/v1", "RayCluster"),
        _owned(_pod("lws-0"), "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
        _owned(_pod("volcano-0"), "batch.volcano.sh/v1alpha1", "Job"),
    ]
    built_in = [
        _owned(_pod("llama-abc"), "apps/v1", "ReplicaSet"),
        _owned(_pod("llama-0"), "apps/v1", "StatefulSet"),
        _owned(_pod("agent-x"), "apps/v1", "DaemonSet"),
        _owned(_pod("batch-q"), "batch/v1", "Job"),
    ]
    results = run([*secure_docs(), *custom, *built_in], Command.AUDIT)
    for check_id in ("IGW-AU401", "IGW-AU405"):
        pods = {r.resource: r.status for r in of(results, check_id) if r.resource.startswith("Pod ")}
        assert pods == dict.fromkeys(("Pod ml/ray-head", "Pod ml/lws-0", "Pod ml/volcano-0"), Status.FAIL)


def test_a_live_cluster_audits_pods_a_custom_resource_controls(tmp_path: Path) -> None:
    with running_fake_kube() as kube:
        kube.add(_owned(_pod("ray-worker-1"), "ray.io/v1", "RayCluster"))
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code, out = cli("audit", "--kubeconfig", str(config), "-o", "json", "--check", "IGW-AU405")
    report = json.loads(out)
    assert [(r["resource"], r["status"]) for r in report["results"]] == [("Pod ml/ray-worker-1", "FAIL")]
    assert code == 1
