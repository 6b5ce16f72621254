"""Updates the fake API server refuses as kube-apiserver's update validation does (immutable
fields, :mod:`tests.fakes.kube_immutable`), and node ports it allocates as the Service allocator
does (one per port number across protocols, a health-check node port), seen through ``kubectl``."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.fakes.kube_services import NODE_PORT_RANGE
from tests.operator.kubectl_cli import needs_kubectl, run_kubectl

pytestmark = needs_kubectl


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


def kubectl(kube: FakeKubeApiServer, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_kubectl(kube.write_kubeconfig(tmp_path / "kubeconfig"), *args)


def _create(kube: FakeKubeApiServer, tmp_path: Path, doc: dict[str, Any]) -> None:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    done = kubectl(kube, tmp_path, "create", "-f", str(manifest))
    assert done.returncode == 0, done.stderr


def _refused(kube: FakeKubeApiServer, tmp_path: Path, *args: str) -> str:
    done = kubectl(kube, tmp_path, *args)
    assert done.returncode != 0, done.stdout
    return done.stderr.strip()


def _ok(kube: FakeKubeApiServer, tmp_path: Path, *args: str) -> str:
    done = kubectl(kube, tmp_path, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _get(kube: FakeKubeApiServer, tmp_path: Path, *args: str) -> Any:
    return json.loads(_ok(kube, tmp_path, "get", *args, "-o", "json"))


def _service(name: str, ports: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"app": name}, "ports": ports, **spec},
    }


def _workload(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
            **spec,
        },
    }


def test_a_services_cluster_ip_may_not_change(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """Changing a Service's cluster IP is refused 422 on ``spec.clusterIPs[0]`` (an old client's edit
    of ``clusterIP`` alone included: ``clusterIPs`` follows it); other edits go through. The fake
    stored the new IP."""
    _create(kube, tmp_path, _service("web", [{"port": 80}]))
    allocated = _get(kube, tmp_path, "svc", "web")["spec"]["clusterIP"]
    new_ip = "10.96.0.50" if allocated != "10.96.0.50" else "10.96.0.51"
    expected = (
        f'The Service "web" is invalid: spec.clusterIPs[0]: Invalid value: ["{new_ip}"]: '
        "may not change once set"
    )
    for patch in ({"clusterIP": new_ip}, {"clusterIP": new_ip, "clusterIPs": [new_ip]}):
        assert _refused(kube, tmp_path, "patch", "svc", "web", "-p", json.dumps({"spec": patch})) == expected
    _ok(kube, tmp_path, "label", "svc", "web", "tier=front")
    stored = _get(kube, tmp_path, "svc", "web")["spec"]
    assert (stored["clusterIP"], stored["clusterIPs"]) == (allocated, [allocated])

    request = urllib.request.Request(
        f"{kube.url}/api/v1/namespaces/default/services/web",
        data=json.dumps({"spec": {"clusterIP": new_ip}}).encode(),
        method="PATCH",
        headers={"Content-Type": "application/merge-patch+json"},
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    status = json.loads(raised.value.read())
    assert (raised.value.code, status["reason"], status["details"]["causes"]) == (
        422,
        "Invalid",
        [
            {
                "reason": "FieldValueInvalid",
                "message": f'Invalid value: ["{new_ip}"]: may not change once set',
                "field": "spec.clusterIPs[0]",
            }
        ],
    )


def test_workload_selectors_and_statefulset_specs_may_not_change(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A Deployment's or DaemonSet's ``spec.selector`` is immutable (``field is immutable``, the new
    selector as JSON); a StatefulSet's spec may change only in replicas, template, update strategy
    and a few more. Scaling still works. The fake accepted every change."""
    _create(kube, tmp_path, _workload("Deployment", "d"))
    _create(kube, tmp_path, _workload("DaemonSet", "ds"))
    _create(kube, tmp_path, _workload("StatefulSet", "sts", serviceName="sts"))
    moved = {
        "spec": {
            "selector": {"matchLabels": {"app": "e"}},
            "template": {"metadata": {"labels": {"app": "e"}}},
        }
    }
    for kind, name in (("Deployment", "d"), ("DaemonSet", "ds")):
        assert _refused(kube, tmp_path, "patch", kind.lower(), name, "-p", json.dumps(moved)) == (
            f'The {kind} "{name}" is invalid: spec.selector: Invalid value: {{"matchLabels":{{"app":"e"}}}}: '
            "field is immutable"
        )
    assert _refused(kube, tmp_path, "patch", "sts", "sts", "-p", '{"spec":{"serviceName":"other"}}') == (
        'The StatefulSet "sts" is invalid: spec: Forbidden: updates to statefulset spec for fields other '
        "than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', "
        "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
    )
    _ok(kube, tmp_path, "scale", "deployment", "d", "--replicas=3")
    _ok(kube, tmp_path, "scale", "sts", "sts", "--replicas=2")
    assert _get(kube, tmp_path, "deployment", "d")["spec"]["selector"] == {"matchLabels": {"app": "d"}}
    assert _get(kube, tmp_path, "sts", "sts")["spec"]["serviceName"] == "sts"


def test_immutable_config_maps_and_secrets_may_not_change(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """Once ``immutable: true`` is stored, a ConfigMap's ``data`` and ``immutable`` are refused
    (``Forbidden: field is immutable when `immutable` is set``) while its labels may change; a
    Secret's ``type`` never changes. The fake stored each edit."""
    _create(
        kube,
        tmp_path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}},
    )
    _create(
        kube,
        tmp_path,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"a": "MQ=="}},
    )
    _ok(kube, tmp_path, "patch", "cm", "c", "-p", '{"data":{"a":"2"},"immutable":true}')  # mutable until now
    forbidden = "Forbidden: field is immutable when `immutable` is set"
    assert _refused(kube, tmp_path, "patch", "cm", "c", "-p", '{"data":{"a":"3"}}') == (
        f'The ConfigMap "c" is invalid: data: {forbidden}'
    )
    assert _refused(
        kube, tmp_path, "patch", "cm", "c", "-p", '{"immutable":false,"binaryData":{"b":"MQ=="}}'
    ) == (f'The ConfigMap "c" is invalid: \n* immutable: {forbidden}\n* binaryData: {forbidden}')
    _ok(kube, tmp_path, "label", "cm", "c", "x=y")
    assert _get(kube, tmp_path, "cm", "c")["data"] == {"a": "2"}
    assert _refused(kube, tmp_path, "patch", "secret", "s", "-p", '{"type":"example.com/custom"}') == (
        'The Secret "s" is invalid: type: Invalid value: "example.com/custom": field is immutable'
    )


def test_one_node_port_per_port_number_and_a_health_check_node_port(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A NodePort Service serving port 53 over TCP and UDP gets one node port for both (a cluster's
    ``initNodePorts``), another port its own; the same node port twice for one protocol is refused
    as a duplicate. A LoadBalancer Service with ``externalTrafficPolicy: Local`` gets a
    ``healthCheckNodePort``, kept on a replace that leaves it out and released when the policy goes
    back to Cluster. The fake gave TCP and UDP two node ports and no health-check port."""
    dns = [
        {"name": "dns", "port": 53, "protocol": "TCP"},
        {"name": "dns-udp", "port": 53, "protocol": "UDP"},
        {"name": "http", "port": 80},
    ]
    _create(kube, tmp_path, _service("np", dns, type="NodePort"))
    node_ports = [p["nodePort"] for p in _get(kube, tmp_path, "svc", "np")["spec"]["ports"]]
    assert node_ports[0] == node_ports[1] != node_ports[2], node_ports
    twice = [{"name": "a", "port": 1, "nodePort": 30500}, {"name": "b", "port": 2, "nodePort": 30500}]
    manifest = tmp_path / "twice.yaml"
    manifest.write_text(yaml.safe_dump(_service("twice", twice, type="NodePort")))
    assert _refused(kube, tmp_path, "create", "-f", str(manifest)).endswith(
        'The Service "twice" is invalid: spec.ports[1].nodePort: Duplicate value: 30500'
    )

    _create(
        kube, tmp_path, _service("lb", [{"port": 80}], type="LoadBalancer", externalTrafficPolicy="Local")
    )
    spec = _get(kube, tmp_path, "svc", "lb")["spec"]
    health = spec.get("healthCheckNodePort")
    assert health in NODE_PORT_RANGE, spec
    assert health not in (*node_ports, spec["ports"][0]["nodePort"]), spec
    _ok(kube, tmp_path, "label", "svc", "lb", "x=y")
    assert _get(kube, tmp_path, "svc", "lb")["spec"]["healthCheckNodePort"] == health
    _ok(kube, tmp_path, "patch", "svc", "lb", "-p", '{"spec":{"externalTrafficPolicy":"Cluster"}}')
    assert "healthCheckNodePort" not in _get(kube, tmp_path, "svc", "lb")["spec"]


def _job(name: str, *, suspend: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "suspend": suspend,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


def test_a_job_s_pod_template_is_immutable(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """``ValidateJobSpecUpdate`` refuses any change of a Job's ``spec.template`` (422, printed with
    the internal Go struct: :data:`tests.fakes.kube_immutable.JOB_TEMPLATE_VALUE`), but lets a Job
    suspended before it started change its pods' scheduling directives and labels; other spec fields
    (``parallelism``) change. The fake stored every template change."""
    _create(kube, tmp_path, _job("j"))
    refused = _refused(kube, tmp_path, "-n", "default", "set", "image", "job/j", "c=y")
    assert refused == (
        'error: failed to patch image update to pod template: Job.batch "j" is invalid: '
        "spec.template: Invalid value: core.PodTemplateSpec{...}: "
        "field is immutable"
    )
    _ok(
        kube,
        tmp_path,
        "-n",
        "default",
        "patch",
        "job",
        "j",
        "--type=merge",
        "-p",
        '{"spec":{"parallelism":2}}',
    )
    _create(kube, tmp_path, _job("s", suspend=True))
    scheduling = {
        "spec": {"template": {"metadata": {"labels": {"tier": "a"}}, "spec": {"nodeSelector": {"n": "1"}}}}
    }
    _ok(kube, tmp_path, "-n", "default", "patch", "job", "s", "--type=merge", "-p", json.dumps(scheduling))
    assert _refused(kube, tmp_path, "-n", "default", "set", "image", "job/s", "c=y").endswith(
        "spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"
    )
    stored = json.loads(_ok(kube, tmp_path, "-n", "default", "get", "job", "s", "-o", "json"))
    assert stored["spec"]["template"]["spec"]["nodeSelector"] == {"n": "1"}
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "x"


def _patch_job(kube: FakeKubeApiServer, tmp_path: Path, name: str, spec: dict[str, Any]) -> str:
    patch = json.dumps({"spec": spec})
    return _refused(kube, tmp_path, "-n", "default", "patch", "job", name, "--type=merge", "-p", patch)


def test_a_job_gets_its_generated_selector_and_defaults_and_its_manifest_cannot_replace_it(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """The Job strategy generates a selector on the uid and the ``controller-uid``/``job-name`` labels
    (legacy and ``batch.kubernetes.io/``) on the template and, the template's label map being the
    Job's own, on the Job; ``SetDefaults_Job`` fills its counts and modes. So ``kubectl replace -f``
    of the manifest it was created from is refused (no selector, template changed), as on a cluster;
    ``completions`` and ``completionMode``, ``managedBy`` may not change, but an Indexed Job may
    change ``completions`` in tandem with ``parallelism``. The fake stored the Job as sent and let
    every one of these through."""
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(_job("j")))
    _ok(kube, tmp_path, "create", "-f", str(manifest))
    job = _get(kube, tmp_path, "-n", "default", "job", "j")
    uid = job["metadata"]["uid"]
    generated = {
        "app": "j",
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "j",
        "controller-uid": uid,
        "job-name": "j",
    }
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"] == generated
    assert job["metadata"]["labels"] == generated
    assert {k: v for k, v in job["spec"].items() if k not in ("selector", "template")} == {
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "completions": 1,
        "manualSelector": False,
        "parallelism": 1,
        "podReplacementPolicy": "TerminatingOrFailed",
        "suspend": False,
    }
    assert job["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirst"

    refused = _refused(kube, tmp_path, "replace", "-f", str(manifest))
    assert refused.splitlines() == [
        'The Job "j" is invalid: ',
        "* spec.selector: Required value",
        '* spec.template.metadata.labels: Invalid value: {"app":"j"}: '
        "`selector` does not match template `labels`",
        '* spec.selector: Invalid value: "null": field is immutable',
        "* spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable",
    ]
    assert _patch_job(kube, tmp_path, "j", {"completions": 3}) == (
        'The Job "j" is invalid: spec.completions: Invalid value: 3: field is immutable'
    )
    assert _patch_job(kube, tmp_path, "j", {"completionMode": "Indexed"}) == (
        'The Job "j" is invalid: spec.completionMode: Invalid value: "Indexed": field is immutable'
    )
    assert _patch_job(kube, tmp_path, "j", {"managedBy": "example.com/m"}) == (
        'The Job "j" is invalid: spec.managedBy: Invalid value: "example.com/m": field is immutable'
    )

    indexed = _job("i")
    indexed["spec"].update(completionMode="Indexed", completions=2, parallelism=2)
    _create(kube, tmp_path, indexed)
    assert _patch_job(kube, tmp_path, "i", {"completions": 4}) == (
        'The Job "i" is invalid: spec.completions: Invalid value: 4: '
        "can only be modified in tandem with spec.parallelism"
    )
    patch = json.dumps({"spec": {"completions": 4, "parallelism": 4}})
    _ok(kube, tmp_path, "-n", "default", "patch", "job", "i", "--type=merge", "-p", patch)
    assert _get(kube, tmp_path, "-n", "default", "job", "i")["spec"]["completions"] == 4


def test_a_deployment_s_generation_follows_its_annotations(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """``deploymentStrategy.PrepareForUpdate`` bumps the generation on an annotation change too (they
    are copied to the ReplicaSets); a label change leaves it. The fake bumped it on spec changes
    only, so a controller waiting for ``observedGeneration`` after annotating saw no new generation."""
    _create(kube, tmp_path, _workload("Deployment", "d"))
    _ok(kube, tmp_path, "-n", "default", "label", "deploy", "d", "tier=a")
    assert _get(kube, tmp_path, "-n", "default", "deploy", "d")["metadata"]["generation"] == 1
    _ok(kube, tmp_path, "-n", "default", "annotate", "deploy", "d", "note=a")
    assert _get(kube, tmp_path, "-n", "default", "deploy", "d")["metadata"]["generation"] == 2
    _ok(kube, tmp_path, "-n", "default", "annotate", "deploy", "d", "note-")
    assert _get(kube, tmp_path, "-n", "default", "deploy", "d")["metadata"]["generation"] == 3


def test_a_metadata_refusal_names_the_kind_group_qualified_with_its_causes(kube: FakeKubeApiServer) -> None:
    """Metadata validation's 422 is ``NewInvalid``'s: ``Job.batch "bad" is invalid: [a, b]`` and one
    cause per field in ``details``. The fake said ``Job "bad" is invalid: a, b`` with no details."""
    job = _job("bad")
    job["metadata"]["labels"] = {"a": "b/c", "x": "-y"}
    request = urllib.request.Request(
        f"{kube.url}/apis/batch/v1/namespaces/default/jobs",
        data=json.dumps(job).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    status = json.loads(raised.value.read())
    rule = (
        "a valid label must consist of alphanumeric characters, '-', '_' or '.', "
        "and must start and end with an alphanumeric character"
    )
    assert status["message"] == (
        f'Job.batch "bad" is invalid: [metadata.labels[a]: Invalid value: "b/c": {rule}, '
        f'metadata.labels[x]: Invalid value: "-y": {rule}]'
    )
    assert status["details"] == {
        "name": "bad",
        "group": "batch",
        "kind": "Job",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": f'Invalid value: "b/c": {rule}',
                "field": "metadata.labels[a]",
            },
            {
                "reason": "FieldValueInvalid",
                "message": f'Invalid value: "-y": {rule}',
                "field": "metadata.labels[x]",
            },
        ],
    }
