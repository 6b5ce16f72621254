"""A reconciliation pass writes its data plane all or nothing, as far as the Kubernetes API allows.

The pass wrote its objects one by one, the served ConfigMap first: when the API server then refused a
later one (here an admission webhook refusing the Service), the running gateway pods had already
hot-reloaded the new configuration while the status said ``ApplyFailed``. Now every object is dry-run
on the API server first (``?dryRun=All``) and only written when all pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import boto3
import pytest
from moto import mock_aws

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import Kube
from igw.operator.reconcile import LAST_ADMITTED_ANNOTATION, Reconciler, last_admitted_text
from igw.operator.tls import AutoTlsSettings, IssuerRef
from tests.fakes.kube_api import FakeKubeApiServer
from tests.fakes.kube_store import ResourceKind, StoreError
from tests.operator.harness import condition, find, igwc, tls_igwc, update_spec, write_tls_secret

ARN = "arn:aws:acm:us-west-2:123456789012:certificate/0a1b2c3d-4e5f-6789-abcd-ef0123456789"
SSL_CERT = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert"
KINDS = ("ConfigMap", "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service")


def _versions(cluster: FakeKubeApiServer) -> dict[str, str]:
    """The resourceVersion of each data-plane object of config ``chat``."""
    versions = {}
    for kind in KINDS:
        name = "chat-gateway-config" if kind == "ConfigMap" else "chat-gateway"
        found = find(cluster, kind, "inference", name)
        assert found is not None, kind
        versions[kind] = str(found["metadata"]["resourceVersion"])
    return versions


def _served(cluster: FakeKubeApiServer) -> dict[str, Any]:
    config_map = find(cluster, "ConfigMap", "inference", "chat-gateway-config")
    assert config_map is not None
    return dict(config_map["data"])


def _no_tls_listener(operation: str, obj: Mapping[str, Any], _old: Mapping[str, Any] | None) -> str | None:
    """A cluster policy (Gatekeeper, Kyverno): no Service may take a TLS certificate by annotation."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return "TLS listeners need the platform team's certificate" if SSL_CERT in annotations else None


def _programmed(cluster: FakeKubeApiServer) -> dict[str, Any]:
    return condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")


def test_a_later_object_the_api_server_refuses_leaves_the_served_config_as_it_was(
    cluster: FakeKubeApiServer,
) -> None:
    """The spec gains ``tls.acmArn``: a new ConfigMap and a new Service. A webhook refuses the Service;
    the ConfigMap (and every other object) keeps its resourceVersion, and the status names the
    refusal and says that nothing was applied. Once the policy allows it, the next pass applies all."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _programmed(cluster)["status"] == "True"
    before, served = _versions(cluster), _served(cluster)
    reviewed = cluster.add_validating_webhook("policy.example.com", ["services"], _no_tls_listener)

    update_spec(cluster, "inference", "chat", lambda spec: spec.update(tls={"acmArn": ARN}))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True

    assert _served(cluster) == served
    assert _versions(cluster) == before
    refused = _programmed(cluster)
    assert (refused["status"], refused["reason"]) == ("False", "ApplyFailed")
    assert "nothing of this pass was applied" in refused["message"]
    assert "refused in a server-side dry run: Service inference/chat-gateway" in refused["message"]
    assert (
        'admission webhook "policy.example.com" denied the request: '
        "TLS listeners need the platform team's certificate"
    ) in refused["message"]
    assert ("UPDATE", "chat-gateway", True) in reviewed
    assert ("UPDATE", "chat-gateway", False) not in reviewed

    cluster.store.validators.clear()
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _programmed(cluster)["status"] == "True"
    assert _served(cluster) != served
    service = find(cluster, "Service", "inference", "chat-gateway")
    assert service is not None
    assert service["metadata"]["annotations"][SSL_CERT] == ARN


def _kept(cluster: FakeKubeApiServer) -> str | None:
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
    return ((chat.get("metadata") or {}).get("annotations") or {}).get(LAST_ADMITTED_ANNOTATION)


def test_a_spec_the_api_server_refuses_whole_is_not_restored_by_a_refusal_after_a_restart(
    cluster: FakeKubeApiServer,
) -> None:
    """The last-admitted annotation is written before the apply; when the API server then refused all
    of it (a webhook refusing the Service), the annotation stayed ahead of the served ConfigMap. After
    a restart a refused spec's pass found the two differing, trusted the annotation and restored the
    unappliable spec: ``ApplyFailed`` again while the pods kept the older spec. Now the annotation is
    put back when nothing was applied, and the restore puts back the spec that is served."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    served_spec = (find(cluster, "InferenceGatewayConfig", "inference", "chat") or {})["spec"]
    kept = _kept(cluster)
    assert kept == last_admitted_text(served_spec)
    served = _served(cluster)
    cluster.add_validating_webhook("policy.example.com", ["services"], _no_tls_listener)
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(tls={"acmArn": ARN}))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _programmed(cluster)["reason"] == "ApplyFailed"
    assert _kept(cluster) == kept

    restarted = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    limits = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}  # refused by the operator's checks
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(podDefaults={"resources": limits}))
    assert asyncio.run(restarted.reconcile("inference", "chat")) is True
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert condition(chat, "Accepted")["status"] == "False"
    assert (_programmed(cluster)["status"], _programmed(cluster)["reason"]) == ("True", "Programmed")
    assert _served(cluster) == served


def test_an_annotation_added_by_a_pass_that_applied_nothing_is_removed(cluster: FakeKubeApiServer) -> None:
    """A config's first pass refused whole by the API server leaves no last-admitted annotation behind."""
    cluster.add_validating_webhook("policy.example.com", ["services"], _no_tls_listener)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    doc = igwc("chat")
    doc["spec"]["tls"] = {"acmArn": ARN}
    cluster.add(doc)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _programmed(cluster)["reason"] == "ApplyFailed"
    assert _kept(cluster) is None


def _annotation_writes(cluster: FakeKubeApiServer, since: int) -> list[str]:
    """The PATCHes of config ``chat`` itself (its annotations; not its ``/status``) since ``since``."""
    return [
        path
        for method, path, query in cluster.requests[since:]
        if method == "PATCH" and path.endswith("/inferencegatewayconfigs/chat") and "dryRun" not in query
    ]


def test_a_spec_the_api_server_keeps_refusing_writes_no_annotation_on_any_pass(
    cluster: FakeKubeApiServer,
) -> None:
    """While the API server refuses the whole apply, every pass (each resync too) wrote the last-admitted
    annotation forward and then back: two writes of the object per pass. Now the pass dry-runs the
    data plane before it writes the annotation, so a refused spec writes nothing; once the policy
    allows it, the annotation is written (before the apply) and the spec applied."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    kept = _kept(cluster)
    cluster.add_validating_webhook("policy.example.com", ["services"], _no_tls_listener)
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(tls={"acmArn": ARN}))
    since = len(cluster.requests)
    for _ in range(4):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _programmed(cluster)["reason"] == "ApplyFailed"
    assert _annotation_writes(cluster, since) == []
    assert _kept(cluster) == kept

    cluster.store.validators.clear()
    since = len(cluster.requests)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _programmed(cluster)["status"] == "True"
    assert len(_annotation_writes(cluster, since)) == 1
    chat = find(cluster, "InferenceGatewayConfig", "inference", "chat") or {}
    assert _kept(cluster) == last_admitted_text(chat["spec"])


def _apply_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """The level and text of each line about applying config ``chat``'s data plane, then forgotten."""
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith("inference/chat: ") and "the data plane" in r.getMessage()
    ]
    caplog.clear()
    return lines


def test_a_spec_the_api_server_keeps_refusing_is_logged_once_per_generation_and_message(
    cluster: FakeKubeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """While the API server refused a spec whole (``NothingApplied``), every pass and resync logged the
    WARNING "applying the data plane failed" again. Now it is one WARNING per (uid, generation,
    message), DEBUG on the passes after it, an INFO line once an apply succeeds, and a WARNING again
    for a new generation or a later failure."""
    caplog.set_level(logging.DEBUG, logger="igw.operator")
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    cluster.add_validating_webhook("policy.example.com", ["services"], _no_tls_listener)
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(tls={"acmArn": ARN}))
    caplog.clear()
    for _ in range(4):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    lines = _apply_lines(caplog)
    assert [level for level, _ in lines] == ["WARNING", "DEBUG", "DEBUG", "DEBUG"]
    assert "applying the data plane failed: " in lines[0][1]
    assert "NothingApplied" in lines[0][1] or "nothing of this pass was applied" in lines[0][1]
    assert len({text for _, text in lines}) == 1

    update_spec(cluster, "inference", "chat", lambda spec: spec["bbr"].update(enabled=False))  # a generation
    for _ in range(2):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert [level for level, _ in _apply_lines(caplog)] == ["WARNING", "DEBUG"]

    cluster.store.validators.clear()
    for _ in range(2):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    recovered = _apply_lines(caplog)
    assert [level for level, _ in recovered] == ["INFO"]
    assert "the data plane applied (it failed before: " in recovered[0][1]

    cluster.add_validating_webhook("policy.example.com", ["services"], _no_tls_listener)
    update_spec(cluster, "inference", "chat", lambda spec: spec["tls"].update(acmArn=ARN[:-1] + "0"))
    for _ in range(2):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert [level for level, _ in _apply_lines(caplog)] == ["WARNING", "DEBUG"]


def test_a_write_refused_after_its_dry_run_passed_is_reported_object_by_object(
    cluster: FakeKubeApiServer,
) -> None:
    """What changed between the dry run and the write (a quota another object used up, a webhook that
    answers otherwise) can still refuse a write: the status lists what was written, what was refused
    and what was not written, instead of a bare refusal that hides the half-applied change."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True

    def quota_used_up(
        operation: str, kind: ResourceKind, obj: Mapping[str, Any], old: Mapping[str, Any] | None, dry: bool
    ) -> None:
        if kind.plural == "services" and not dry:
            raise StoreError(403, "Forbidden", 'services "chat-gateway" is forbidden: exceeded quota: q')

    cluster.store.validators.append(quota_used_up)
    update_spec(cluster, "inference", "chat", lambda spec: spec.update(tls={"acmArn": ARN}))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True

    message = _programmed(cluster)["message"]
    assert message.startswith(
        "PartlyApplied: partly applied: written ConfigMap inference/chat-gateway-config"
    )
    assert "; refused Service inference/chat-gateway (" in message
    assert "exceeded quota: q" in message
    assert "; not written " in message


def test_every_write_is_dry_run_first_but_a_binding_to_a_role_not_yet_created(
    cluster: FakeKubeApiServer,
) -> None:
    """On a cluster a dry-run RoleBinding to a Role that does not exist yet is refused 403 (whoever
    binds must hold the Role's permissions, read from the Role; the operator may not ``bind``), so
    the first pass, which creates both, dry-runs every other object but not that RoleBinding, and
    sends no real write before every dry run has passed."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    writes = [(method, path, query) for method, path, query in cluster.requests if method in ("POST", "PUT")]
    dry = {path.rsplit("/", 1)[-1] for method, path, query in writes if query.get("dryRun") == "All"}
    real = {path.rsplit("/", 1)[-1] for method, path, query in writes if "dryRun" not in query}
    assert dry == real - {"rolebindings", "events"}, (dry, real)
    assert {"configmaps", "roles", "deployments", "services"} <= dry
    first_real = next(i for i, (_, _, query) in enumerate(writes) if "dryRun" not in query)
    assert all(query.get("dryRun") == "All" for _, _, query in writes[:first_real])


def _no_team_label(operation: str, obj: Mapping[str, Any], _old: Mapping[str, Any] | None) -> str | None:
    """A cluster policy: no gateway pod template may carry a ``team`` label."""
    labels = (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    return "pods may not set the team label" if "team" in labels else None


def test_a_refused_pass_leaves_the_auto_issued_certificate_as_it_was(cluster: FakeKubeApiServer) -> None:
    """``spec.tls: {}``: the cert-manager Certificate is part of the pass's all-or-nothing write. It was
    written before the dry run, so a spec edit that changed the client hostnames and was then refused
    (a webhook refusing the Deployment) still rewrote the Certificate's ``dnsNames``: cert-manager
    reissued it, and the next pass imported the new certificate under the ARN the live load balancer
    serves, while the status said nothing of the pass was applied."""
    cluster.install_cert_manager()
    with mock_aws():
        acm = boto3.client("acm", region_name="us-east-1")
        auto_tls = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm)
        reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=auto_tls)
        cluster.add(tls_igwc("chat"))
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
        write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
        assert _programmed(cluster)["status"] == "True"
        before = find(cluster, "Certificate", "inference", "chat-gateway")
        assert before is not None
        cluster.add_validating_webhook("policy.example.com", ["deployments"], _no_team_label)

        def edit(spec: dict[str, Any]) -> None:
            spec["extensions"]["dataPlane"]["hostnames"] = ["other.llm.example.com"]
            spec["podDefaults"] = {"labels": {"team": "a"}}

        update_spec(cluster, "inference", "chat", edit)
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True

        refused = _programmed(cluster)
        assert (refused["status"], refused["reason"]) == ("False", "ApplyFailed")
        assert "nothing of this pass was applied" in refused["message"]
        after = find(cluster, "Certificate", "inference", "chat-gateway")
        assert after is not None
        assert after["spec"]["dnsNames"] == before["spec"]["dnsNames"]
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

        cluster.store.validators.clear()
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
        applied = find(cluster, "Certificate", "inference", "chat-gateway")
        assert applied is not None
        assert applied["spec"]["dnsNames"][0] == "other.llm.example.com"


def test_a_certificate_the_api_server_refuses_is_named_and_nothing_is_applied(
    cluster: FakeKubeApiServer,
) -> None:
    """The Certificate's own dry run is one of the pass's: refused, it is named in the status, and no
    other object of the pass is written (before, the rest was written without it)."""
    cluster.install_cert_manager()
    with mock_aws():
        acm = boto3.client("acm", region_name="us-east-1")
        auto_tls = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm)
        reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=auto_tls)

        def no_certificates(op: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
            return "certificates come from the platform team"

        cluster.add_validating_webhook("policy.example.com", ["certificates"], no_certificates)
        cluster.add(tls_igwc("chat"))
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
        refused = _programmed(cluster)
        assert (refused["status"], refused["reason"]) == ("False", "ApplyFailed")
        assert "dry run: Certificate inference/chat-gateway (" in refused["message"]
        assert "certificates come from the platform team" in refused["message"]
        assert find(cluster, "ConfigMap", "inference", "chat-gateway-config") is None


def test_a_write_conflicting_with_another_writer_is_read_again_and_written(
    cluster: FakeKubeApiServer,
) -> None:
    """The Deployment controller writes the Deployment's status all through a rollout; one such write
    between the pass's read and its replace (which carries the resourceVersion read) got 409 Conflict
    and made the pass ``PartlyApplied``: the new ConfigMap served with the old Deployment, a Warning
    Event and GatewayProgrammed=False until the next resync. The object is read again and written."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings())
    cluster.add(igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    deployments = cluster.store.kind_for(api_version="apps/v1", kind="Deployment")
    status_writes: list[str] = []

    def deployment_controller(
        operation: str, kind: ResourceKind, obj: Mapping[str, Any], old: Mapping[str, Any] | None, dry: bool
    ) -> None:
        if kind.plural == "deployments" and dry and not status_writes:  # between the read and the write
            status_writes.append(operation)
            current = cluster.store.get(deployments, "inference", "chat-gateway")
            current["status"] = {"observedGeneration": current["metadata"]["generation"], "replicas": 2}
            cluster.store.replace(deployments, "inference", "chat-gateway", current, status_only=True)

    cluster.store.validators.append(deployment_controller)
    update_spec(cluster, "inference", "chat", lambda spec: spec["schedulers"][0].update(replicas=3))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True

    assert status_writes == ["UPDATE"]
    programmed = _programmed(cluster)
    assert (programmed["status"], programmed["reason"]) == ("True", "Programmed"), programmed["message"]
    deployment = find(cluster, "Deployment", "inference", "chat-gateway")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 3
    assert deployment["status"]["replicas"] == 2  # the controller's write is kept
