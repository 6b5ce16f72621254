"""Status computation: conditions, per-scheduler endpoints and signals, transitions (injected clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from jsonschema import Draft202012Validator

from igw.config.crd import build_crd
from igw.operator import admission
from igw.operator.admission import Refusal, admit
from igw.operator.status import Observation, compute_status
from tests.fakes.kube_api import make_pod
from tests.operator.harness import igwc, jwt_provider

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SPEC: dict[str, Any] = {
    "bbr": {"enabled": True},
    "schedulers": [
        {"name": "llama", "modelName": "llama", "modelSelector": {"matchLabels": {"app": "llama"}}},
        {
            "name": "qwen",
            "modelName": "qwen",
            "engineType": "sglang",
            "modelSelector": {"matchLabels": {"app": "qwen"}},
        },
    ],
}
READY_DEPLOYMENT = {
    "metadata": {"generation": 1},
    "spec": {"replicas": 2},
    "status": {"observedGeneration": 1, "readyReplicas": 2, "updatedReplicas": 2},
}


def _igwc(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "chat", "namespace": "ns", "generation": 4},
        "spec": SPEC,
        "status": status or {},
    }


def _seen(pods: dict[str, list[dict[str, Any]]], **overrides: Any) -> Observation:
    values: dict[str, Any] = {
        "refusal": None,
        "programmed": True,
        "apply_error": None,
        "served_spec": SPEC,
        "deployment": READY_DEPLOYMENT,
        "service": {"metadata": {"name": "chat-gateway", "namespace": "ns"}},
        "pods": pods,
    }
    values.update(overrides)
    return Observation(**values)


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_missing_signals_are_named_and_degrade_the_scheduler() -> None:
    pods = {
        "llama": [make_pod(name="old", labels={"app": "llama"}, image="vllm/vllm-openai:v0.8.5")],
        "qwen": [
            make_pod(
                name="q",
                labels={"app": "qwen"},
                image="lmsysorg/sglang:v0.4.6.post1",
                args=["python3", "-m", "sglang.launch_server"],
            )
        ],
    }
    status, _ = compute_status(_igwc(), _seen(pods), now=NOW)
    llama, qwen = status["schedulers"]
    assert llama["endpoints"] == {"found": 1, "ready": 1, "stale": 1}
    assert llama["rolloutState"] == "Degraded"
    assert any("0.8.5" in m for m in llama["missingSignals"])
    assert qwen["rolloutState"] == "Degraded"
    assert any("--enable-metrics" in m for m in qwen["missingSignals"])
    assert _conditions(status)["Ready"] == ("True", "Ready")


def test_ready_needs_a_ready_endpoint_per_scheduler() -> None:
    pods = {
        "llama": [make_pod(name="a", labels={"app": "llama"})],
        "qwen": [make_pod(name="b", labels={"app": "qwen"}, ready=False)],
    }
    status, _ = compute_status(_igwc(), _seen(pods), now=NOW)
    assert _conditions(status)["Ready"] == ("False", "NoReadyEndpoints")
    assert [s["rolloutState"] for s in status["schedulers"]] == ["Available", "Degraded"]
    assert status["readyEndpoints"] == 1
    assert status["observedGeneration"] == 4


def test_no_model_server_at_all_is_the_cause_named_before_the_unready_gateway() -> None:
    """A gateway pod is ready only once some scheduler has a Ready model-server pod, so with none
    the unready Deployment is the effect: ``NoReadyEndpoints`` (docs/runbook.md step 4). With a
    ready model server and still no ready replica, ``GatewayNotReady``."""
    unready = {"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": {}}
    status, _ = compute_status(_igwc(), _seen({"llama": [], "qwen": []}, deployment=unready), now=NOW)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoReadyEndpoints")
    assert "llama, qwen" in ready["message"]
    one_pod = {"llama": [make_pod(name="a", labels={"app": "llama"})], "qwen": []}
    status, _ = compute_status(_igwc(), _seen(one_pod, deployment=unready), now=NOW)
    assert _conditions(status)["Ready"] == ("False", "GatewayNotReady")


def test_bbr_ready_names_the_missing_model_servers_as_ready_does() -> None:
    """Body-based routing runs in the gateway pods, so before any model server is ready BBRReady
    is False for the same cause as Ready; it said ``GatewayNotReady`` ("no gateway replica is ready
    yet") while Ready said ``NoReadyEndpoints``, two answers to one question. Once a model server is
    ready and the gateway still is not, both say ``GatewayNotReady``."""
    unready = {"metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": {}}
    status, _ = compute_status(_igwc(), _seen({"llama": [], "qwen": []}, deployment=unready), now=NOW)
    conditions = _conditions(status)
    assert conditions["BBRReady"] == conditions["Ready"] == ("False", "NoReadyEndpoints")
    one_pod = {"llama": [make_pod(name="a", labels={"app": "llama"})], "qwen": []}
    status, _ = compute_status(_igwc(), _seen(one_pod, deployment=unready), now=NOW)
    conditions = _conditions(status)
    assert conditions["BBRReady"] == conditions["Ready"] == ("False", "GatewayNotReady")


def test_refused_spec_blocks_admission_but_keeps_the_served_one() -> None:
    refusal = Refusal(
        "InvalidSpec", ("spec.schedulers[0].targetPort: must be at most 65535 [schema.maximum]",)
    )
    status, _ = compute_status(_igwc(), _seen({}, refusal=refusal), now=NOW)
    conditions = _conditions(status)
    assert conditions["Accepted"] == ("False", "InvalidSpec")
    assert conditions["AdmissionBlocked"] == ("True", "InvalidSpec")
    assert conditions["GatewayProgrammed"] == ("True", "Programmed")
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert "spec.schedulers[0].targetPort" in accepted["message"]


def test_never_admitted_object_is_pending() -> None:
    refusal = Refusal("ModelNameConflict", ("clash",))
    seen = _seen({}, refusal=refusal, programmed=False, served_spec=None, deployment=None, service=None)
    status, _ = compute_status(_igwc(), seen, now=NOW)
    assert _conditions(status)["Ready"] == ("False", "NotProgrammed")
    assert status["schedulers"] == []
    assert status["address"] == ""
    # Not "no spec of this object has been admitted yet": one may have been, its ConfigMap gone since.
    programmed = next(c for c in status["conditions"] if c["type"] == "GatewayProgrammed")
    assert programmed["message"].startswith("the latest spec is refused (ModelNameConflict) and no admitted")


def test_transitions_only_on_change_and_times_are_kept() -> None:
    pods = {"llama": [make_pod(name="a", labels={"app": "llama"})], "qwen": []}
    first, transitions = compute_status(_igwc(), _seen(pods), now=NOW)
    assert {t.type for t in transitions} == {
        "Accepted",
        "AdmissionBlocked",
        "GatewayProgrammed",
        "BBRReady",
        "Ready",
    }
    later = NOW + timedelta(minutes=5)
    second, again = compute_status(_igwc(first), _seen(pods), now=later)
    assert again == []
    assert second["conditions"] == first["conditions"]
    pods["qwen"] = [make_pod(name="b", labels={"app": "qwen"})]
    third, changed = compute_status(_igwc(second), _seen(pods), now=later)
    assert [(t.type, t.status, t.warning) for t in changed] == [("Ready", "True", False)]
    ready = next(c for c in third["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-12-01T12:05:00Z"


def _scheduler_conditions(entry: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in entry["conditions"]}


def test_each_scheduler_reports_ready_and_available_conditions_that_keep_their_time() -> None:
    """AWS's ``status.schedulers[].conditions`` was declared in the CRD and never written, so
    ``kubectl wait --for=jsonpath=...`` on a scheduler had nothing to wait on."""
    pods: dict[str, list[dict[str, Any]]] = {
        "llama": [make_pod(name="old", labels={"app": "llama"}, image="vllm/vllm-openai:v0.8.5")],
        "qwen": [],
    }
    first, _ = compute_status(_igwc(), _seen(pods), now=NOW)
    llama, qwen = first["schedulers"]
    assert _scheduler_conditions(llama) == {
        "Ready": ("True", "Ready"),
        "Available": ("False", "MissingSignals"),
    }
    available = next(c for c in llama["conditions"] if c["type"] == "Available")
    assert "0.8.5" in available["message"]
    assert _scheduler_conditions(qwen) == {
        "Ready": ("False", "NoEndpoints"),
        "Available": ("False", "Pending"),
    }
    assert all(c["observedGeneration"] == 4 for c in llama["conditions"] + qwen["conditions"])
    crd = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert list(Draft202012Validator(crd["properties"]["status"]).iter_errors(first)) == []

    later = NOW + timedelta(minutes=5)
    pods["llama"] = [make_pod(name="new", labels={"app": "llama"})]
    pods["qwen"] = [make_pod(name="q", labels={"app": "qwen"}, ready=False)]
    second, _ = compute_status(_igwc(first), _seen(pods), now=later)
    llama, qwen = second["schedulers"]
    assert _scheduler_conditions(llama) == {"Ready": ("True", "Ready"), "Available": ("True", "Available")}
    times = {c["type"]: c["lastTransitionTime"] for c in llama["conditions"]}
    assert times == {"Ready": "2026-12-01T12:00:00Z", "Available": "2026-12-01T12:05:00Z"}
    assert _scheduler_conditions(qwen) == {
        "Ready": ("False", "NoReadyEndpoints"),
        "Available": ("False", "NoReadyEndpoints"),
    }
    times = {c["type"]: c["lastTransitionTime"] for c in qwen["conditions"]}
    assert times == {"Ready": "2026-12-01T12:00:00Z", "Available": "2026-12-01T12:00:00Z"}


def test_load_balancer_hostname_is_the_address() -> None:
    service = {
        "metadata": {"name": "chat-gateway", "namespace": "ns"},
        "status": {
            "loadBalancer": {"ingress": [{"hostname": "k8s-ns-chat-123.elb.us-west-2.amazonaws.com"}]}
        },
    }
    status, _ = compute_status(_igwc(), _seen({}, service=service), now=NOW)
    assert status["address"] == "k8s-ns-chat-123.elb.us-west-2.amazonaws.com"


def test_bbr_disabled_is_reported_as_such() -> None:
    spec = {**SPEC, "bbr": {"enabled": False}}
    status, _ = compute_status(_igwc(), _seen({}, served_spec=spec), now=NOW)
    assert _conditions(status)["BBRReady"] == ("False", "Disabled")


def test_auto_issue_tls_pending_then_reported_in_status() -> None:
    spec = {**SPEC, "tls": {}}
    pending = ("CertificatePending", "waiting for cert-manager")
    status, _ = compute_status(_igwc(), _seen({}, served_spec=spec, tls_problem=pending), now=NOW)
    programmed = next(c for c in status["conditions"] if c["type"] == "GatewayProgrammed")
    assert (programmed["status"], programmed["reason"]) == ("False", "CertificatePending")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert "tls" not in status
    issued = {
        "acmArn": "arn:aws:acm:us-west-2:123456789012:certificate/xyz",
        "issuedAt": "x",
        "dnsNames": ["a"],
    }
    status, _ = compute_status(_igwc(), _seen({}, served_spec=spec, tls_status=issued), now=NOW)
    programmed = next(c for c in status["conditions"] if c["type"] == "GatewayProgrammed")
    assert programmed["status"] == "True"
    assert issued["acmArn"] in programmed["message"]
    assert status["tls"] == issued
    arn = "arn:aws:acm:us-west-2:123456789012:certificate/abc"
    with_arn = {**SPEC, "tls": {"acmArn": arn}}
    status, _ = compute_status(_igwc(), _seen({}, served_spec=with_arn), now=NOW)
    assert status["tls"] == {"acmArn": arn}


def test_the_status_of_a_spec_with_every_scheduler_invalid_fits_the_crd_s_status_schema() -> None:
    """100 invalid schedulers give about 50,000 characters of problems; the Accepted condition carried
    them all, past metav1.Condition's 32,768, so a real API server refused the whole status write and
    the pass ended in a traceback (test_lifecycle runs the same through the fake API server, which
    now refuses such a status write too)."""
    bad = {
        "bbr": {"enabled": True},
        "schedulers": [
            {
                "name": f"s{i}",
                "modelName": "same",
                "modelSelector": {"matchLabels": {"app": "bad value!"}},
                "targetPort": 0,
                f"bogus{i}": 1,
            }
            for i in range(100)
        ],
    }
    igwc = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "chat", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": bad,
    }
    refusal = admit(igwc, [])
    assert refusal is not None
    assert len(refusal.message) > 40_000
    status, transitions = compute_status(
        igwc, _seen({}, refusal=refusal, programmed=False, served_spec=None, deployment=None), now=NOW
    )
    crd = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    errors = [e.message[:120] for e in Draft202012Validator(crd["properties"]["status"]).iter_errors(status)]
    assert errors == []
    accepted = next(c for c in status["conditions"] if c["type"] == "Accepted")
    assert accepted["message"].startswith(refusal.messages[0])
    assert accepted["message"].endswith("characters in all; igw validate lists every problem)")
    assert all(len(t.message) <= 32768 for t in transitions)


def test_refusal_messages_never_carry_a_token_put_in_a_wrong_field() -> None:
    # Found with kubectl: the Accepted condition (and its Events) quoted a JWT's first 60 characters.
    jwt = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZG1pbiIsImF1ZCI6ImlndyJ9.c2lnbmF0dXJl"
    doc = igwc("leaky")
    doc["spec"]["auth"] = jwt_provider(f"ftp://issuer.example.com/{jwt}")
    (line,) = admission.spec_problems(doc)
    assert line.startswith("spec.auth.jwt.provider.remoteJWKS.uri: ")
    assert "[REDACTED]" in line
    assert jwt[:20] not in line
