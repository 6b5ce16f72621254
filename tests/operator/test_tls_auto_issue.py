"""``spec.tls: {}`` end to end: Certificate, ACM import (moto), Service TLS listener, status, delete."""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import trustme
from cryptography import x509
from moto import mock_aws

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import Kube, OperatorStopping
from igw.operator.reconcile import ISSUER_READ_TTL_S, RENEWAL_REASON, Reconciler
from igw.operator.tls import KUBE_ACCESS, UID_TAG, AcmImporter, AutoTlsSettings, IssuerRef
from tests.fakes.kube_api import FakeKubeApiServer, make_pod
from tests.operator.harness import (
    InUseOnce,
    add_issuer,
    condition,
    find,
    igwc,
    mark_deployment_ready,
    running_operator,
    tls_igwc,
    update_spec,
    wait_condition,
    wait_for,
    write_tls_secret,
)

REGION = "us-east-1"
SSL = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert"


@pytest.fixture
def acm() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("acm", region_name=REGION)


def _options(acm: Any) -> dict[str, Any]:
    return {"auto_tls": AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm)}


def _pem(text: str) -> str:
    return "".join(text.split())


@pytest.mark.usefixtures("cert_manager")
def test_auto_issued_certificate_is_imported_renewed_and_deleted(
    cluster: FakeKubeApiServer, kubeconfig: Path, acm: Any
) -> None:
    add_issuer(cluster, "ClusterIssuer", "test-ca")
    with running_operator(kubeconfig, **_options(acm)):
        uid = cluster.add(tls_igwc("chat"))["metadata"]["uid"]
        certificate = wait_for(lambda: find(cluster, "Certificate", "inference", "chat-gateway"), what="cert")
        assert certificate["metadata"]["ownerReferences"][0]["uid"] == uid
        assert certificate["spec"]["secretName"] == "chat-gateway-tls"
        assert certificate["spec"]["issuerRef"] == {
            "group": "cert-manager.io",
            "kind": "ClusterIssuer",
            "name": "test-ca",
        }
        assert "chat-gateway.inference.svc" in certificate["spec"]["dnsNames"]
        assert certificate["spec"]["dnsNames"][0] == "chat.llm.example.com"  # the client-facing name first
        pending = wait_condition(cluster, "chat", "GatewayProgrammed", "False")
        assert pending["reason"] == "CertificatePending"
        assert "inference/chat-gateway-tls" in pending["message"]
        # No plain-HTTP endpoint while the certificate is missing.
        assert find(cluster, "Service", "inference", "chat-gateway") is None

        first = write_tls_secret(cluster, "chat-gateway-tls", certificate["spec"]["dnsNames"])
        wait_condition(cluster, "chat", "GatewayProgrammed", "True")
        obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
        assert obj is not None
        tls = obj["status"]["tls"]
        arn = tls["acmArn"]
        assert tls["dnsNames"] == certificate["spec"]["dnsNames"]
        assert tls["issuedAt"].endswith("Z")
        assert _pem(acm.get_certificate(CertificateArn=arn)["Certificate"]) == _pem(first)
        tags = acm.list_tags_for_certificate(CertificateArn=arn)["Tags"]
        assert {"Key": UID_TAG, "Value": uid} in tags
        service = find(cluster, "Service", "inference", "chat-gateway")
        assert service is not None
        assert service["metadata"]["annotations"][SSL] == arn
        assert service["spec"]["ports"][0]["port"] == 443

        renewed = write_tls_secret(cluster, "chat-gateway-tls", "chat-gateway.inference.svc")
        wait_for(
            lambda: _pem(acm.get_certificate(CertificateArn=arn)["Certificate"]) == _pem(renewed),
            what="re-import of the renewed certificate",
        )
        assert len(acm.list_certificates()["CertificateSummaryList"]) == 1
        service = find(cluster, "Service", "inference", "chat-gateway")
        assert service is not None
        assert service["metadata"]["annotations"][SSL] == arn

        cluster.store.delete(
            cluster.store.kind_for(
                api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
            ),
            "inference",
            "chat",
        )
        wait_for(lambda: not acm.list_certificates()["CertificateSummaryList"], what="ACM deletion")
        assert find(cluster, "Certificate", "inference", "chat-gateway") is None


def test_without_cert_manager_the_condition_says_so(
    cluster: FakeKubeApiServer, kubeconfig: Path, acm: Any
) -> None:
    # ``cluster`` has no cert-manager CRDs: ``cert-manager.io`` answers 404, as on such a cluster
    with running_operator(kubeconfig, **_options(acm)):
        cluster.add(tls_igwc("plain"))

        # A transient API error on the first pass is reported as CertificateFailed and replaced at
        # the next resync (0.5 s here), as on a real cluster; the settled reason is the one that counts.
        def settled() -> dict[str, Any] | None:
            found = condition(
                find(cluster, "InferenceGatewayConfig", "inference", "plain"), "GatewayProgrammed"
            )
            return found if found and found.get("reason") == "CertManagerMissing" else None

        missing = wait_for(settled, timeout=30, what="GatewayProgrammed=False, CertManagerMissing")
        assert missing["status"] == "False"
        assert "install cert-manager" in missing["message"]
        assert find(cluster, "Service", "inference", "plain-gateway") is None
        assert not acm.list_certificates()["CertificateSummaryList"]


def test_a_user_supplied_certificate_is_never_deleted(acm: Any) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("x.example")
    arn = acm.import_certificate(
        Certificate=leaf.cert_chain_pems[0].bytes(), PrivateKey=leaf.private_key_pem.bytes()
    )["CertificateArn"]
    assert AcmImporter(lambda: acm).delete_owned(arn, uid="someone") is False
    assert acm.describe_certificate(CertificateArn=arn)["Certificate"]["CertificateArn"] == arn


@pytest.mark.usefixtures("cert_manager")
def test_dropping_auto_issue_deletes_the_imported_certificate(
    cluster: FakeKubeApiServer, kubeconfig: Path, acm: Any
) -> None:
    with running_operator(kubeconfig, **_options(acm)):
        cluster.add(tls_igwc("edge"))
        wait_for(lambda: find(cluster, "Certificate", "inference", "edge-gateway"), what="Certificate")
        write_tls_secret(cluster, "edge-gateway-tls", "edge-gateway.inference.svc")
        wait_condition(cluster, "edge", "GatewayProgrammed", "True")
        assert len(acm.list_certificates()["CertificateSummaryList"]) == 1

        update_spec(cluster, "inference", "edge", lambda spec: spec.pop("tls"))

        def retired() -> bool:
            obj = find(cluster, "InferenceGatewayConfig", "inference", "edge") or {}
            return "tls" not in (obj.get("status") or {})

        wait_for(retired, what="status.tls removed")
        assert not acm.list_certificates()["CertificateSummaryList"]
        service = find(cluster, "Service", "inference", "edge-gateway")
        assert service is not None
        assert SSL not in service["metadata"]["annotations"]
        assert service["spec"]["ports"][0]["port"] == 80


@pytest.mark.usefixtures("cert_manager")
def test_moving_to_a_given_acm_arn_deletes_the_import_once_acm_lets_it_go(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """``tls: {}`` changed to ``tls: {acmArn}``: the imported certificate is deleted, retried while
    ACM says it is in use. The retry lost track of it: the given ARN's status replaced the auto-issued
    one's, so the next pass asked to delete the user's certificate (not ours: skipped) and the
    imported one stayed in ACM for good."""
    ca = trustme.CA()
    leaf = ca.issue_cert("chat.llm.example.com")
    given = acm.import_certificate(
        Certificate=leaf.cert_chain_pems[0].bytes(), PrivateKey=leaf.private_key_pem.bytes()
    )["CertificateArn"]
    in_use = InUseOnce(acm)
    settings = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: in_use)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
    asyncio.run(reconciler.reconcile("inference", "chat"))
    imported = _status_tls(cluster)["acmArn"]

    update_spec(cluster, "inference", "chat", lambda spec: spec.update(tls={"acmArn": given}))
    asyncio.run(reconciler.reconcile("inference", "chat"))  # the listener moves; ACM refuses the delete
    assert in_use.refused == 1
    assert _status_tls(cluster)["acmArn"] == imported  # still named, so the next pass retries
    for _ in range(2):
        asyncio.run(reconciler.reconcile("inference", "chat"))

    left = {c["CertificateArn"] for c in acm.list_certificates()["CertificateSummaryList"]}
    assert left == {given}
    assert _status_tls(cluster) == {"acmArn": given}
    service = find(cluster, "Service", "inference", "chat-gateway")
    assert service is not None
    assert service["metadata"]["annotations"][SSL] == given


def _status_tls(cluster: FakeKubeApiServer) -> dict[str, Any]:
    obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert obj is not None
    return dict(obj["status"]["tls"])


class _SlowImport:
    """moto's ACM whose ImportCertificate waits for ``release`` (a slow or throttled ACM)."""

    def __init__(self, acm: Any) -> None:
        self._acm = acm
        self.started = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._acm, name)

    def import_certificate(self, **kwargs: Any) -> Any:
        self.started.set()
        self.release.wait(10)
        return self._acm.import_certificate(**kwargs)


@pytest.mark.usefixtures("cert_manager")
def test_a_stopping_operator_waits_for_an_acm_import_its_cancelled_pass_left_running(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """The leader stops (SIGTERM): its passes are cancelled, but an ACM import already in its worker
    thread runs on. ``Kube.quiesce`` (which the runner waits on before giving the Lease up) counted only
    Kubernetes calls, so it said "nothing runs" during the import: the next leader, finding no
    certificate of this object in ACM yet, imported a second one that no status named."""
    slow = _SlowImport(acm)
    kube = Kube(cluster.api_client())
    settings = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: slow)
    reconciler = Reconciler(kube, DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")

    async def main() -> tuple[bool, bool]:
        running = asyncio.ensure_future(reconciler.reconcile("inference", "chat"))
        assert await asyncio.to_thread(slow.started.wait, 10)
        running.cancel()  # as kopf's stop cancels a handler: the thread goes on
        busy = await asyncio.to_thread(kube.quiesce, 0.3)
        slow.release.set()
        idle = await asyncio.to_thread(kube.quiesce, 5)
        with pytest.raises(OperatorStopping):  # and no ACM call starts after
            await kube.outside(acm.list_certificates)
        return busy, idle

    assert asyncio.run(main()) == (False, True)


@pytest.mark.parametrize("issued_for", ["", "billing-api"])
@pytest.mark.usefixtures("cert_manager")
def test_a_secret_cert_manager_did_not_write_for_this_object_is_neither_imported_nor_overwritten(
    cluster: FakeKubeApiServer, acm: Any, issued_for: str
) -> None:
    """Someone who may create InferenceGatewayConfigs in a namespace, but not read its Secrets, named a
    config after an existing Secret (``<name>-gateway-tls``: made by hand, or cert-manager's for
    another Certificate): the operator, which may read every Secret, imported that key pair into ACM
    for the author's load balancer, and its Certificate then made cert-manager overwrite the Secret."""
    settings = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    theirs = write_tls_secret(cluster, "billing-gateway-tls", "billing.example.com", certificate=issued_for)
    cluster.add(tls_igwc("billing"))
    asyncio.run(reconciler.reconcile("inference", "billing"))

    refused = condition(find(cluster, "InferenceGatewayConfig", "inference", "billing"), "GatewayProgrammed")
    assert (refused["status"], refused["reason"]) == ("False", "CertificateSecretConflict")
    assert "Secret inference/billing-gateway-tls exists and is not cert-manager's" in refused["message"]
    assert not acm.list_certificates()["CertificateSummaryList"]
    assert find(cluster, "Certificate", "inference", "billing-gateway") is None
    assert find(cluster, "Service", "inference", "billing-gateway") is None
    secret = find(cluster, "Secret", "inference", "billing-gateway-tls")
    assert secret is not None
    assert _pem(base64.b64decode(secret["data"]["tls.crt"]).decode()).startswith(_pem(theirs))


def _issued(cluster: FakeKubeApiServer, acm: Any) -> Reconciler:
    """A reconciler and ``chat`` with ``tls: {}`` whose certificate cert-manager issued and ACM holds."""
    settings = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
    asyncio.run(reconciler.reconcile("inference", "chat"))
    assert _status_tls(cluster).get("issuedAt")
    return reconciler


@pytest.mark.parametrize("tls", [None, "given"])
@pytest.mark.usefixtures("cert_manager")
def test_dropping_auto_issue_deletes_the_certificate_and_its_secret_once_acm_let_go(
    cluster: FakeKubeApiServer, acm: Any, tls: str | None
) -> None:
    """``tls: {}`` changed to a given ``acmArn`` or to no TLS: the Certificate and the Secret holding
    its private key stayed until the object was deleted (the Secret even after), and cert-manager kept
    renewing a certificate nothing used. They go once the ACM import is deleted, not before."""
    ca = trustme.CA()
    leaf = ca.issue_cert("chat.llm.example.com")
    given = acm.import_certificate(
        Certificate=leaf.cert_chain_pems[0].bytes(), PrivateKey=leaf.private_key_pem.bytes()
    )["CertificateArn"]
    in_use = InUseOnce(acm)
    reconciler = _issued(cluster, in_use)

    def change(spec: dict[str, Any]) -> None:
        if tls is None:
            spec.pop("tls")
        else:
            spec["tls"] = {"acmArn": given}

    update_spec(cluster, "inference", "chat", change)
    asyncio.run(reconciler.reconcile("inference", "chat"))  # ACM still in use: everything stays
    assert in_use.refused == 1
    assert find(cluster, "Certificate", "inference", "chat-gateway") is not None
    assert find(cluster, "Secret", "inference", "chat-gateway-tls") is not None

    asyncio.run(reconciler.reconcile("inference", "chat"))
    assert {c["CertificateArn"] for c in acm.list_certificates()["CertificateSummaryList"]} == {given}
    assert find(cluster, "Certificate", "inference", "chat-gateway") is None
    assert find(cluster, "Secret", "inference", "chat-gateway-tls") is None
    condition_ = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert condition_["status"] == "True"


@pytest.mark.usefixtures("cert_manager")
def test_a_secret_of_that_name_without_the_operators_labels_is_left_alone(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """Only the Secret cert-manager wrote for the operator's Certificate (annotated with its name and
    carrying the data plane's labels) is deleted; the same name made by someone else is theirs."""
    reconciler = _issued(cluster, acm)
    theirs = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert theirs is not None
    theirs["metadata"].pop("labels")
    secrets = cluster.store.kind_for(api_version="v1", kind="Secret")
    cluster.store.replace(secrets, "inference", "chat-gateway-tls", theirs)

    update_spec(cluster, "inference", "chat", lambda spec: spec.pop("tls"))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    assert find(cluster, "Certificate", "inference", "chat-gateway") is None
    assert find(cluster, "Secret", "inference", "chat-gateway-tls") is not None


@pytest.mark.usefixtures("cert_manager")
def test_deleting_the_object_deletes_the_secret_of_its_certificate(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """The garbage collector removes the owned Certificate, but cert-manager's Secret has no owner
    reference (cert-manager's default): the private key stayed in the namespace for good."""
    reconciler = _issued(cluster, acm)
    obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert obj is not None
    kind = cluster.store.kind_for(
        api_version="inference.sagemaker.aws.amazon.com/v1alpha1", kind="InferenceGatewayConfig"
    )
    cluster.store.delete(kind, "inference", "chat")
    asyncio.run(reconciler.forget(obj))  # the watch's DELETED event
    assert not acm.list_certificates()["CertificateSummaryList"]
    assert find(cluster, "Certificate", "inference", "chat-gateway") is None
    assert find(cluster, "Secret", "inference", "chat-gateway-tls") is None


@pytest.mark.usefixtures("cert_manager")
def test_with_auto_tls_switched_off_tls_auto_issue_is_reported_without_touching_secrets(
    cluster: FakeKubeApiServer, acm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``--no-auto-tls`` (chart ``operator.autoTls: false``, whose RBAC grants no Secret and no
    Certificate access: the fake answers 403 for both, as the API server would): a ``tls: {}`` config
    is reported ``AutoTlsDisabled`` with no Service, and a config without it is programmed, its pass
    making no call that RBAC refuses. Without the switch the 403 surfaced as ``CertificateFailed``."""
    cluster.forbid(*{resource for _, resource in KUBE_ACCESS})
    caplog.set_level(logging.WARNING, logger="igw.operator")
    settings = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm, enabled=False)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    cluster.add(igwc("plain", model="mistral", app="mistral"))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    asyncio.run(reconciler.reconcile("inference", "plain"))

    refused = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert (refused["status"], refused["reason"]) == ("False", "AutoTlsDisabled")
    assert "spec.tls.acmArn" in refused["message"]
    assert "operator.autoTls" in refused["message"]
    assert find(cluster, "Service", "inference", "chat-gateway") is None  # never plain HTTP instead
    assert not acm.list_certificates()["CertificateSummaryList"]
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "plain"), "GatewayProgrammed")
    assert programmed["status"] == "True", programmed

    update_spec(cluster, "inference", "chat", lambda spec: spec.pop("tls"))  # nothing to clean up either
    asyncio.run(reconciler.reconcile("inference", "chat"))
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert programmed["status"] == "True", programmed
    refusals = [r.getMessage() for r in caplog.records if "Forbidden" in r.getMessage()]
    assert not refusals, refusals


def _serve_issued_chat(cluster: FakeKubeApiServer, reconciler: Reconciler) -> dict[str, Any]:
    """Add the ``chat`` object (auto-issued TLS), reconcile, write the Secret cert-manager would for
    the Certificate asked for, and reconcile again: the certificate is served. That Certificate."""
    cluster.add(tls_igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    certificate = find(cluster, "Certificate", "inference", "chat-gateway")
    assert certificate is not None
    write_tls_secret(cluster, "chat-gateway-tls", certificate["spec"]["dnsNames"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    return certificate


@pytest.mark.usefixtures("cert_manager")
def test_status_names_what_the_imported_certificate_covers_not_what_the_spec_asks(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """``status.tls.dnsNames`` is documented as the names the certificate covers. It was computed from
    the spec, so right after a ``hostnames`` edit (cert-manager not done reissuing, or an issuer that
    refuses the new name for good) the status listed a name the load balancer's certificate lacks."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), **_options(acm))
    asked = _serve_issued_chat(cluster, reconciler)

    def names() -> list[str]:
        obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
        assert obj is not None
        return list(obj["status"]["tls"]["dnsNames"])

    assert names() == asked["spec"]["dnsNames"]

    def rename(spec: dict[str, Any]) -> None:
        spec["extensions"]["dataPlane"]["hostnames"] = ["new.example.com"]

    update_spec(cluster, "inference", "chat", rename)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    reissue = find(cluster, "Certificate", "inference", "chat-gateway")
    assert reissue is not None
    assert reissue["spec"]["dnsNames"][0] == "new.example.com"
    assert "new.example.com" not in names()  # cert-manager has not reissued: not covered yet
    assert names() == asked["spec"]["dnsNames"]

    write_tls_secret(cluster, "chat-gateway-tls", reissue["spec"]["dnsNames"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert names() == reissue["spec"]["dnsNames"]


@pytest.mark.usefixtures("cert_manager")
def test_a_failed_issuance_is_reported_with_cert_managers_reason_not_as_pending(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """An issuer that refuses (an ACME order gone invalid, a CA that denies the request) makes
    cert-manager set ``Issuing=False`` with the cause on the Certificate. The object said
    ``CertificatePending: waiting for cert-manager to issue ...`` for good, the cause nowhere on it."""
    add_issuer(cluster, "ClusterIssuer", "test-ca")
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), **_options(acm))
    cluster.add(tls_igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    kind = cluster.store.kind_for(api_version="cert-manager.io/v1", kind="Certificate")
    applied = find(cluster, "Certificate", "inference", "chat-gateway")
    assert applied is not None
    cause = (
        "The certificate request has failed to complete and will be retried: Failed to wait for order "
        'resource "chat-gateway-1-2299060280" to become ready: order is in "invalid" state'
    )

    def cert_manager_says(observed_generation: int) -> None:
        live = find(cluster, "Certificate", "inference", "chat-gateway")
        assert live is not None
        issuing = {"type": "Issuing", "status": "False", "reason": "Failed", "message": cause}
        live["status"] = {"conditions": [issuing | {"observedGeneration": observed_generation}]}
        cluster.store.replace(kind, "inference", "chat-gateway", live, status_only=True)

    def programmed() -> dict[str, Any]:
        found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
        assert found is not None
        return found

    cert_manager_says(applied["metadata"]["generation"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    failed = programmed()
    assert (failed["status"], failed["reason"]) == ("False", "CertificateIssuanceFailed")
    assert 'order is in "invalid" state' in failed["message"]
    assert "inference/chat-gateway" in failed["message"]
    assert "ClusterIssuer/test-ca" in failed["message"]
    assert find(cluster, "Service", "inference", "chat-gateway") is None

    # About an older spec (the Certificate changed since): cert-manager tries anew, so pending again.
    cert_manager_says(applied["metadata"]["generation"] - 1)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert programmed()["reason"] == "CertificatePending"
    # cert-manager waits for a missing issuer without failing: the message says where to look.
    assert "check that ClusterIssuer test-ca exists and is Ready" in programmed()["message"]

    cert_manager_says(applied["metadata"]["generation"])
    write_tls_secret(cluster, "chat-gateway-tls", applied["spec"]["dnsNames"])  # a retry succeeded
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert programmed()["status"] == "True"


def _renewal_events(cluster: FakeKubeApiServer) -> list[dict[str, Any]]:
    return [e for e in cluster.store.iter_all() if e["kind"] == "Event" and e.get("reason") == RENEWAL_REASON]


@pytest.mark.usefixtures("cert_manager")
def test_a_failed_renewal_is_reported_while_the_current_certificate_keeps_being_served(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """Once the Secret held a certificate, cert-manager's ``Issuing=False`` (a renewal the issuer
    refused) was never looked at: the object said ``Programmed`` and nothing else until the load
    balancer served an expired certificate. Now GatewayProgrammed stays True (the current certificate
    is still valid and served) with the failure in its message, and one Warning Event says it."""
    add_issuer(cluster, "ClusterIssuer", "test-ca")  # Ready: only cert-manager's own failures here
    now = [datetime.now(UTC)]
    reconciler = Reconciler(
        Kube(cluster.api_client()), DataPlaneSettings(), clock=lambda: now[0], **_options(acm)
    )
    cluster.add(tls_igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    kind = cluster.store.kind_for(api_version="cert-manager.io/v1", kind="Certificate")
    applied = find(cluster, "Certificate", "inference", "chat-gateway")
    assert applied is not None
    write_tls_secret(cluster, "chat-gateway-tls", applied["spec"]["dnsNames"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True

    def programmed() -> dict[str, Any]:
        found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
        assert found is not None
        return found

    assert programmed()["status"] == "True"
    assert "RENEWAL" not in programmed()["message"]
    assert not _renewal_events(cluster)

    def cert_manager_says(*conditions: dict[str, Any]) -> None:
        live = find(cluster, "Certificate", "inference", "chat-gateway")
        assert live is not None
        live["status"] = {"conditions": list(conditions)}
        cluster.store.replace(kind, "inference", "chat-gateway", live, status_only=True)

    cause = "The certificate request has failed to complete and will be retried: CA refused: quota exceeded"
    generation = applied["metadata"]["generation"]
    cert_manager_says(
        {"type": "Ready", "status": "True", "reason": "Ready"},
        {"type": "Issuing", "status": "False", "reason": "Failed", "message": cause}
        | {"observedGeneration": generation},
    )
    for _ in range(2):  # the second pass posts no second Event
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    found = programmed()
    assert (found["status"], found["reason"]) == ("True", "Programmed")
    assert "CA refused: quota exceeded" in found["message"]
    assert "inference/chat-gateway" in found["message"]
    events = _renewal_events(cluster)
    assert len(events) == 1, events
    assert events[0]["type"] == "Warning"
    assert "CA refused: quota exceeded" in events[0]["message"]
    assert "expires at" in events[0]["message"]
    assert find(cluster, "Service", "inference", "chat-gateway") is not None

    # No Issuing condition, but the certificate is past two thirds of its life and not Ready.
    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert secret is not None
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert_manager_says({"type": "Ready", "status": "False", "reason": "Issuing", "message": "renewing"})
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert "RENEWAL" not in programmed()["message"]  # early in its life: cert-manager is on it
    now[0] = leaf.not_valid_after_utc - timedelta(hours=1)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert "Certificate not Ready: renewing" in programmed()["message"]
    assert len(_renewal_events(cluster)) == 2

    # Renewed: the report goes.
    now[0] = datetime.now(UTC)
    cert_manager_says({"type": "Ready", "status": "True", "reason": "Ready"})
    write_tls_secret(cluster, "chat-gateway-tls", applied["spec"]["dnsNames"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert "RENEWAL" not in programmed()["message"]


@pytest.mark.usefixtures("cert_manager")
@pytest.mark.parametrize("kind", ["ClusterIssuer", "Issuer"])
def test_a_missing_or_unready_issuer_is_reported_not_left_pending(
    cluster: FakeKubeApiServer, acm: Any, kind: str
) -> None:
    """cert-manager waits for a missing or unready issuer without failing the Certificate: the object
    said ``CertificatePending`` for good (its message only suggested checking the issuer). The
    operator reads the issuer it is configured with while the Certificate waits: ``IssuerNotFound``,
    then ``IssuerNotReady`` with the issuer's own Ready message, then pending once it is Ready."""
    settings = AutoTlsSettings(IssuerRef(kind, "team-ca"), lambda: acm)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    namespace = "inference" if kind == "Issuer" else None

    def programmed() -> dict[str, Any]:
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
        found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
        assert found is not None
        assert found["status"] == "False"
        return found

    missing = programmed()
    assert missing["reason"] == "IssuerNotFound"
    assert f"{kind} team-ca does not exist" in missing["message"]
    assert "inference/chat-gateway" in missing["message"]
    assert ("in namespace inference" in missing["message"]) == (kind == "Issuer")
    assert find(cluster, "Certificate", "inference", "chat-gateway") is not None  # applied all the same

    # an Issuer of that name elsewhere is not the one the Certificate names
    if kind == "Issuer":
        add_issuer(cluster, kind, "team-ca", namespace="default")
        assert programmed()["reason"] == "IssuerNotFound"
    cause = 'Error initializing issuer: secret "team-ca-key" not found'
    add_issuer(cluster, kind, "team-ca", namespace=namespace, ready={"status": "False", "message": cause})
    unready = programmed()
    assert unready["reason"] == "IssuerNotReady"
    assert f"{kind} team-ca" in unready["message"]
    assert cause in unready["message"]

    add_issuer(cluster, kind, "team-ca", namespace=namespace)
    assert programmed()["reason"] == "CertificatePending"
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    done = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert done is not None
    assert done["status"] == "True"


@pytest.mark.usefixtures("cert_manager")
def test_an_issuer_the_operator_may_not_read_leaves_the_pending_message(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """RBAC narrowed by hand (no ``get`` on clusterissuers): the read's 403 is no verdict, the pass
    goes on and reports ``CertificatePending`` with its advice to check the issuer, as before."""
    cluster.forbid("clusterissuers")
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), **_options(acm))
    cluster.add(tls_igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    pending = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert pending is not None
    assert (pending["status"], pending["reason"]) == ("False", "CertificatePending")
    assert "check that ClusterIssuer test-ca exists and is Ready" in pending["message"]
    assert find(cluster, "Certificate", "inference", "chat-gateway") is not None
    assert any(path.endswith("/clusterissuers/test-ca") for _, path, _ in cluster.requests)


def _issued_chat(
    cluster: FakeKubeApiServer, acm: Any, now: list[datetime], ticks: list[float] | None = None
) -> tuple[Reconciler, x509.Certificate]:
    """A reconciler (wall clock ``now``, monotonic clock ``ticks`` when given) whose ``chat`` object
    serves an auto-issued certificate issued by a Ready ``ClusterIssuer/test-ca``, and that
    certificate's leaf."""
    add_issuer(cluster, "ClusterIssuer", "test-ca")
    reconciler = Reconciler(
        Kube(cluster.api_client()),
        DataPlaneSettings(),
        clock=lambda: now[0],
        **_options(acm),
        monotonic=time.monotonic if ticks is None else lambda: ticks[0],
    )
    _serve_issued_chat(cluster, reconciler)
    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert secret is not None
    return reconciler, x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))


def _events(cluster: FakeKubeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.store.iter_all() if e["kind"] == "Event" and e.get("reason") == reason]


@pytest.mark.usefixtures("cert_manager")
def test_an_expired_served_certificate_is_not_programmed_and_recovers_when_renewed(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """Past the served certificate's notAfter (cert-manager never renewed it) the object said
    ``GatewayProgrammed=True Programmed`` and ``Ready`` stayed True in ``kubectl get igwc`` while every
    client's TLS handshake failed. Now GatewayProgrammed (and Ready) is False, reason
    ``CertificateExpired`` naming the notAfter; ``status.tls.notAfter`` carries it; one Warning Event
    (the transition), none more on later passes; a fresh certificate brings it back."""
    now = [datetime.now(UTC)]
    reconciler, leaf = _issued_chat(cluster, acm, now)
    stamp = leaf.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")

    def status() -> dict[str, Any]:
        found = find(cluster, "InferenceGatewayConfig", "inference", "chat")
        assert found is not None
        return dict(found["status"])

    assert status()["tls"]["notAfter"] == stamp
    assert condition({"status": status()}, "GatewayProgrammed")["reason"] == "Programmed"
    now[0] = leaf.not_valid_after_utc + timedelta(minutes=1)
    for _ in range(3):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    programmed = condition({"status": status()}, "GatewayProgrammed")
    ready = condition({"status": status()}, "Ready")
    assert programmed is not None
    assert ready is not None
    assert (programmed["status"], programmed["reason"]) == ("False", "CertificateExpired")
    assert f"expired at {stamp}" in programmed["message"]
    assert ready["status"] == "False"
    assert status()["tls"]["acmArn"]  # still on the listener: nothing better to serve
    expired_events = _events(cluster, "GatewayProgrammedCertificateExpired")
    assert len(expired_events) == 1
    assert expired_events[0]["type"] == "Warning"
    assert not _renewal_events(cluster)  # the transition said it; no second Event for the same news
    assert find(cluster, "Service", "inference", "chat-gateway") is not None

    write_tls_secret(cluster, "chat-gateway-tls", ["chat-gateway.inference.svc"])  # renewed at last
    fresh = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert fresh is not None
    renewed = x509.load_pem_x509_certificate(base64.b64decode(fresh["data"]["tls.crt"]))
    now[0] = datetime.now(UTC)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    programmed = condition({"status": status()}, "GatewayProgrammed")
    assert programmed is not None
    assert (programmed["status"], programmed["reason"]) == ("True", "Programmed")
    assert status()["tls"]["notAfter"] == renewed.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.usefixtures("cert_manager")
def test_an_issuer_gone_after_issuance_is_reported_once_per_change_from_a_shared_read(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """The issuer was read only while the first certificate waited: deleted or NotReady afterwards,
    nothing said so and every renewal failed silently until the served certificate expired. Now
    GatewayProgrammed's message says the renewal is at risk and one Warning Event (the issuer's reason)
    is posted per change; the issuer is read at most once per ``ISSUER_READ_TTL_S`` for all passes."""
    now, ticks = [datetime.now(UTC)], [0.0]
    reconciler, _ = _issued_chat(cluster, acm, now, ticks)

    def programmed() -> dict[str, Any]:
        found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
        assert found is not None
        return found

    assert "RENEWAL AT RISK" not in programmed()["message"]
    add_issuer(
        cluster, "ClusterIssuer", "test-ca", ready={"status": "False", "message": "secret ca-key not found"}
    )
    ticks[0] += ISSUER_READ_TTL_S
    reads = len(cluster.requests)
    for _ in range(3):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    issuer_reads = [r for r in cluster.requests[reads:] if "clusterissuers" in r[1]]
    assert len(issuer_reads) == 1, issuer_reads  # one read serves the passes within the TTL
    found = programmed()
    assert (found["status"], found["reason"]) == ("True", "Programmed")  # still served, still valid
    assert "RENEWAL AT RISK" in found["message"]
    assert "secret ca-key not found" in found["message"]
    events = _events(cluster, "IssuerNotReady")
    assert len(events) == 1
    assert events[0]["type"] == "Warning"
    assert "cannot renew Certificate inference/chat-gateway" in events[0]["message"]

    cluster.store.delete(
        cluster.store.kind_for(api_version="cert-manager.io/v1", kind="ClusterIssuer"), "", "test-ca"
    )
    ticks[0] += ISSUER_READ_TTL_S
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert "ClusterIssuer test-ca does not exist" in programmed()["message"]
    assert len(_events(cluster, "IssuerNotFound")) == 1

    add_issuer(cluster, "ClusterIssuer", "test-ca")  # back: the report goes
    ticks[0] += ISSUER_READ_TTL_S
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert "RENEWAL AT RISK" not in programmed()["message"]


@pytest.mark.usefixtures("cert_manager")
def test_a_wall_clock_stepped_back_does_not_freeze_the_issuer_read(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """The shared issuer read was aged on the wall clock: stepped back an hour (NTP, a restored VM),
    the read taken before kept being fresh for that hour plus ``ISSUER_READ_TTL_S``, and an issuer
    deleted meanwhile went unreported. Its age is monotonic now: one TTL later it is read again."""
    now, ticks = [datetime.now(UTC)], [0.0]
    reconciler, _ = _issued_chat(cluster, acm, now, ticks)
    cluster.store.delete(
        cluster.store.kind_for(api_version="cert-manager.io/v1", kind="ClusterIssuer"), "", "test-ca"
    )
    now[0] -= timedelta(hours=1)
    ticks[0] += ISSUER_READ_TTL_S
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert found is not None
    assert "RENEWAL AT RISK" in found["message"]
    assert "ClusterIssuer test-ca does not exist" in found["message"]
    assert len(_events(cluster, "IssuerNotFound")) == 1


def _delete(cluster: FakeKubeApiServer, kind: str, api_version: str, name: str) -> None:
    cluster.store.delete(cluster.store.kind_for(api_version=api_version, kind=kind), "inference", name)


@pytest.mark.usefixtures("cert_manager")
def test_a_secret_deleted_after_issuance_keeps_the_previous_certificate_served_and_says_so(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """Deleting the Secret (a common way to make cert-manager issue anew) made the object say
    ``CertificatePending: ... the Service is created once the certificate is in ACM`` (Ready False)
    while the Service existed and served the previous certificate; a Service deleted meanwhile was not
    made again. Now GatewayProgrammed stays True naming the certificate served while a new one is
    issued, the Service is kept (made again) with it, a failed issuance posts one renewal Event, and
    the new certificate is imported under the same ARN."""
    now = [datetime.now(UTC)]
    reconciler, _ = _issued_chat(cluster, acm, now)
    arn = _status_tls(cluster)["acmArn"]

    def programmed() -> dict[str, Any]:
        found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
        assert found is not None
        return found

    pending_before = len(_events(cluster, "GatewayProgrammedCertificatePending"))  # the first issuance's
    _delete(cluster, "Secret", "v1", "chat-gateway-tls")
    _delete(cluster, "Service", "v1", "chat-gateway")
    for _ in range(2):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    found = programmed()
    assert (found["status"], found["reason"]) == ("True", "Programmed")
    assert "Service is created once" not in found["message"]
    assert "REISSUING: Secret inference/chat-gateway-tls holds no certificate" in found["message"]
    assert f"keeps serving the previous certificate {arn} from ACM" in found["message"]
    assert len(_events(cluster, "GatewayProgrammedCertificatePending")) == pending_before
    service = find(cluster, "Service", "inference", "chat-gateway")
    assert service is not None
    assert service["metadata"]["annotations"][SSL] == arn
    assert _status_tls(cluster)["acmArn"] == arn

    live = find(cluster, "Certificate", "inference", "chat-gateway")
    assert live is not None
    issuing = {"type": "Issuing", "status": "False", "reason": "Failed", "message": "CA refused"}
    live["status"] = {"conditions": [issuing | {"observedGeneration": live["metadata"]["generation"]}]}
    kind = cluster.store.kind_for(api_version="cert-manager.io/v1", kind="Certificate")
    cluster.store.replace(kind, "inference", "chat-gateway", live, status_only=True)
    for _ in range(3):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert "RENEWAL FAILING" in programmed()["message"]
    assert "CA refused" in programmed()["message"]
    assert len(_renewal_events(cluster)) == 1

    live = find(cluster, "Certificate", "inference", "chat-gateway")
    assert live is not None
    live["status"] = {}
    cluster.store.replace(kind, "inference", "chat-gateway", live, status_only=True)
    fresh = write_tls_secret(cluster, "chat-gateway-tls", ["chat-gateway.inference.svc"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _pem(acm.get_certificate(CertificateArn=arn)["Certificate"]) == _pem(fresh)
    assert "REISSUING" not in programmed()["message"]
    assert programmed()["status"] == "True"


def _serving_ready(cluster: FakeKubeApiServer, reconciler: Reconciler) -> None:
    """``chat`` (certificate issued) with a ready model-server pod and a ready Deployment: Ready True."""
    cluster.add(make_pod(name="llama-0", namespace="inference", labels={"app": "llama"}))
    mark_deployment_ready(cluster, "inference", "chat-gateway")
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert (
        condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "Ready")["status"] == "True"
    )


def _renewal_refused_checks(
    cluster: FakeKubeApiServer,
    reconciler: Reconciler,
    now: list[datetime],
    leaf: x509.Certificate,
    reason: str,
    said: str,
) -> None:
    """After a refused renewal (``reason``, whose text includes ``said``): GatewayProgrammed and Ready
    stay True (the previous certificate is valid and served), the message says the renewal failed and
    which certificate is served until when, one ``CertificateRenewalFailed`` Warning Event however many
    passes, no GatewayProgrammed transition; past the previous certificate's notAfter it is
    ``CertificateExpired`` naming the failure."""
    arn = _status_tls(cluster)["acmArn"]
    not_after = leaf.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    _delete(cluster, "Service", "v1", "chat-gateway")  # made again with the previous certificate
    renewal_events = len(_renewal_events(cluster))
    not_programmed = len(_events(cluster, "ReadyNotProgrammed"))  # the first issuance's
    for _ in range(3):
        assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    programmed, ready = condition(obj, "GatewayProgrammed"), condition(obj, "Ready")
    assert (programmed["status"], programmed["reason"]) == ("True", "Programmed")
    assert (ready["status"], ready["reason"]) == ("True", "Ready")
    message = programmed["message"]
    assert "RENEWAL FAILING: Certificate inference/chat-gateway (issuer ClusterIssuer/test-ca)" in message
    assert f"the new certificate was not imported ({reason})" in message
    assert said in message
    assert f"keeps serving the previous certificate {arn} from ACM (notAfter {not_after})" in message
    events = _renewal_events(cluster)[renewal_events:]
    assert len(events) == 1, events
    assert events[0]["type"] == "Warning"
    assert said in events[0]["message"]
    assert arn in events[0]["message"]
    assert not _events(cluster, f"GatewayProgrammed{reason}")
    assert len(_events(cluster, "ReadyNotProgrammed")) == not_programmed
    service = find(cluster, "Service", "inference", "chat-gateway")
    assert service is not None
    assert service["metadata"]["annotations"][SSL] == arn
    assert _status_tls(cluster)["notAfter"] == not_after

    now[0] = leaf.not_valid_after_utc + timedelta(minutes=1)
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert (programmed["status"], programmed["reason"]) == ("False", "CertificateExpired")
    assert f"({arn}) expired at {not_after}" in programmed["message"]
    assert said in programmed["message"]
    now[0] = datetime.now(UTC)


@pytest.mark.usefixtures("cert_manager")
def test_an_unusable_secret_after_issuance_is_a_failing_renewal_while_the_previous_one_is_valid(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """A Secret whose certificate is not PEM (``CertificateInvalid``) after issuance made
    GatewayProgrammed and Ready False while the load balancer served the previous, valid certificate.
    Now that is a failing renewal (``RENEWAL FAILING``, one ``CertificateRenewalFailed`` Event), and
    ``CertificateExpired`` once the previous certificate expires; a usable Secret clears it."""
    now = [datetime.now(UTC)]
    reconciler, leaf = _issued_chat(cluster, acm, now)
    _serving_ready(cluster, reconciler)
    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert secret is not None
    secret["data"]["tls.crt"] = base64.b64encode(b"not a certificate").decode()
    cluster.store.replace(
        cluster.store.kind_for(api_version="v1", kind="Secret"), "inference", "chat-gateway-tls", secret
    )
    said = "Secret inference/chat-gateway-tls: tls.crt does not start with a PEM certificate"
    _renewal_refused_checks(cluster, reconciler, now, leaf, "CertificateInvalid", said)

    write_tls_secret(cluster, "chat-gateway-tls", ["chat-gateway.inference.svc"])
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert (programmed["status"], programmed["reason"]) == ("True", "Programmed")
    assert "RENEWAL" not in programmed["message"]


@pytest.mark.usefixtures("cert_manager")
def test_a_private_key_in_tls_crt_is_refused_and_never_sent_to_acm(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """A Secret whose ``tls.crt`` holds the certificates followed by their private key (a combined
    PEM, as some tools write it): the blocks were cut at each ``END CERTIFICATE`` line, so the key
    went to ACM inside ``CertificateChain`` and the object said ``AcmImportFailed`` with ACM's "not
    PEM-encoded". Now ``CertificateInvalid`` names the problem, quotes no key, and ACM is not asked."""
    add_issuer(cluster, "ClusterIssuer", "test-ca")
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), **_options(acm))
    cluster.add(tls_igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert secret is not None
    key = base64.b64decode(secret["data"]["tls.key"])
    secret["data"]["tls.crt"] = base64.b64encode(base64.b64decode(secret["data"]["tls.crt"]) + key).decode()
    cluster.store.replace(
        cluster.store.kind_for(api_version="v1", kind="Secret"), "inference", "chat-gateway-tls", secret
    )
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert found is not None
    assert (found["status"], found["reason"]) == ("False", "CertificateInvalid")
    assert "tls.crt holds a private key" in found["message"]
    assert "the key belongs in tls.key" in found["message"]
    listed = acm.list_certificates(Includes={"keyTypes": ["RSA_2048", "EC_prime256v1", "EC_secp384r1"]})
    assert listed["CertificateSummaryList"] == []
    body = "".join(key.decode().strip().splitlines()[1:-1])
    events = [e["message"] for e in cluster.store.iter_all() if e["kind"] == "Event"]
    for text in [found["message"], *events]:
        assert body[:40] not in text


class _EchoingAcm:
    """moto's ACM, except that ImportCertificate is refused with a message quoting the request, as an
    AWS validation error does (``Value '...' at 'privateKey' failed to satisfy constraint``; a blob
    travels base64-encoded): the private key both as PEM and as its base64."""

    def __init__(self, acm: Any) -> None:
        self._acm = acm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._acm, name)

    def import_certificate(self, **kwargs: Any) -> Any:
        key = bytes(kwargs["PrivateKey"])
        message = (
            f"2 validation errors detected: Value '{base64.b64encode(key).decode()}' at 'privateKey' failed "
            f"to satisfy constraint: Member must be valid; Value '{key.decode()}' at 'privateKey' failed"
        )
        error = {"Error": {"Code": "ValidationException", "Message": message}}
        raise self._acm.exceptions.ValidationException(error, "ImportCertificate")


@pytest.mark.usefixtures("cert_manager")
def test_an_acm_refusal_quoting_the_private_key_reaches_neither_status_nor_events(
    cluster: FakeKubeApiServer, acm: Any
) -> None:
    """``AcmImportFailed`` carried ACM's error text as it came: an AWS validation error that quotes the
    request put the Secret's private key into the object's status and a Warning Event, readable by
    anyone who may read the object (not the Secret)."""
    add_issuer(cluster, "ClusterIssuer", "test-ca")
    settings = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: _EchoingAcm(acm))
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert secret is not None
    key = base64.b64decode(secret["data"]["tls.key"]).decode()
    body = "".join(key.strip().splitlines()[1:-1])
    found = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert found is not None
    assert found["reason"] == "AcmImportFailed"
    assert "ValidationException" in found["message"]
    # Ready (reason NotProgrammed) carries the message alone: it says what ACM refused.
    ready = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NotProgrammed")
    assert ready["message"].startswith(
        "ACM refused to import the certificate of Secret inference/chat-gateway-tls: ValidationException"
    )
    events = [e["message"] for e in cluster.store.iter_all() if e["kind"] == "Event"]
    assert any("AcmImportFailed" in e or "ValidationException" in e for e in events)
    for text in [found["message"], *events]:
        assert "PRIVATE KEY" not in text
        assert body[:40] not in text
        assert base64.b64encode(key.encode()).decode()[:40] not in text


class _RefusingAcm(_EchoingAcm):
    """:class:`_EchoingAcm` once ``refuse`` is set (moto's ACM before): a re-import ACM refuses."""

    refuse = False

    def import_certificate(self, **kwargs: Any) -> Any:
        if self.refuse:
            return super().import_certificate(**kwargs)
        return self._acm.import_certificate(**kwargs)


@pytest.mark.usefixtures("cert_manager")
def test_an_acm_refusal_of_a_renewed_certificate_is_a_failing_renewal_while_the_previous_one_is_valid(
    cluster: FakeKubeApiServer, acm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """ACM refusing the re-import of a renewed certificate (``AcmImportFailed``) made GatewayProgrammed
    and Ready False while the load balancer served the previous, valid certificate under the same ARN.
    Now it is a failing renewal (``RENEWAL FAILING``, one ``CertificateRenewalFailed`` Event, one
    operator log line), ``CertificateExpired`` once the previous certificate expires, and the renewed
    one is imported once ACM takes it. The key ACM's error quotes is in none of them."""
    caplog.set_level(logging.DEBUG)
    refusing = _RefusingAcm(acm)
    now = [datetime.now(UTC)]
    reconciler, leaf = _issued_chat(cluster, refusing, now)
    _serving_ready(cluster, reconciler)
    arn = _status_tls(cluster)["acmArn"]
    previous = acm.get_certificate(CertificateArn=arn)["Certificate"]
    refusing.refuse = True
    renewed = write_tls_secret(cluster, "chat-gateway-tls", ["chat-gateway.inference.svc"])
    said = "ACM refused to import the certificate of Secret inference/chat-gateway-tls: ValidationException"
    _renewal_refused_checks(cluster, reconciler, now, leaf, "AcmImportFailed", said)
    assert _pem(acm.get_certificate(CertificateArn=arn)["Certificate"]) == _pem(previous)
    logged = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and said in r.getMessage()
    ]
    assert len(logged) == 1, logged

    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert secret is not None
    key = base64.b64decode(secret["data"]["tls.key"]).decode()
    body = "".join(key.strip().splitlines()[1:-1])
    obj = find(cluster, "InferenceGatewayConfig", "inference", "chat")
    assert obj is not None
    texts = [c["message"] for c in obj["status"]["conditions"]]
    texts += [e["message"] for e in cluster.store.iter_all() if e["kind"] == "Event"]
    texts += [r.getMessage() for r in caplog.records if r.name.startswith("igw")]  # botocore's own: not ours
    for text in texts:
        assert "PRIVATE KEY" not in text
        assert body[:40] not in text
        assert base64.b64encode(key.encode()).decode()[:40] not in text

    refusing.refuse = False
    assert asyncio.run(reconciler.reconcile("inference", "chat")) is True
    assert _pem(acm.get_certificate(CertificateArn=arn)["Certificate"]) == _pem(renewed)
    programmed = condition(find(cluster, "InferenceGatewayConfig", "inference", "chat"), "GatewayProgrammed")
    assert (programmed["status"], programmed["reason"]) == ("True", "Programmed")
    assert "RENEWAL" not in programmed["message"]


@pytest.mark.usefixtures("cert_manager")
def test_a_refused_first_import_is_logged_once_without_the_key(
    cluster: FakeKubeApiServer, acm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``AcmImportFailed`` on the first import set the condition and posted an Event, and the
    operator's log said nothing. Now one WARNING line per change, the key ACM's error quotes left out."""
    caplog.set_level(logging.INFO, logger="igw.operator")
    add_issuer(cluster, "ClusterIssuer", "test-ca")
    settings = AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: _EchoingAcm(acm))
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=settings)
    cluster.add(tls_igwc("chat"))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    write_tls_secret(cluster, "chat-gateway-tls", "chat.llm.example.com")
    for _ in range(3):
        asyncio.run(reconciler.reconcile("inference", "chat"))
    lines = [r.getMessage() for r in caplog.records if "AcmImportFailed" in r.getMessage()]
    assert len(lines) == 1, lines
    assert all(r.levelno == logging.WARNING for r in caplog.records if "AcmImportFailed" in r.getMessage())
    assert lines[0].startswith("inference/chat: AcmImportFailed: ACM refused to import the certificate")
    assert "ValidationException" in lines[0]
    secret = find(cluster, "Secret", "inference", "chat-gateway-tls")
    assert secret is not None
    key = base64.b64decode(secret["data"]["tls.key"]).decode()
    body = "".join(key.strip().splitlines()[1:-1])
    assert "PRIVATE KEY" not in lines[0]
    assert body[:40] not in lines[0]
    assert base64.b64encode(key.encode()).decode()[:40] not in lines[0]
