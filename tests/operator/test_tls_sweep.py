"""The orphan sweep of auto-issued TLS (``igw.operator.tls_sweep``): an InferenceGatewayConfig deleted
while no operator ran (or during a watch gap: a 410 relist reports no DELETED) left its ACM import and
the Secret with its private key behind for good, since :meth:`Reconciler.forget` never ran.

Fake API server, moto's ACM, real trustme certificates."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import trustme
from moto import mock_aws

from igw.operator.dataplane import DataPlaneSettings
from igw.operator.kube import Kube
from igw.operator.reconcile import Reconciler
from igw.operator.tls import (
    CLUSTER_TAG,
    KUBE_ACCESS,
    NAME_TAG,
    NAMESPACE_TAG,
    UID_TAG,
    AcmImporter,
    AutoTlsSettings,
    IssuerRef,
)
from igw.operator.tls_sweep import CRD_MISSING_REPEAT_S, ClusterIdentity, OrphanSweep
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import (
    InUseOnce,
    find,
    install_crd,
    running_operator,
    tls_igwc,
    wait_for,
    write_tls_secret,
)

pytestmark = pytest.mark.usefixtures("cert_manager")

REGION = "us-east-1"
IGWC = {"api_version": "inference.sagemaker.aws.amazon.com/v1alpha1", "kind": "InferenceGatewayConfig"}


@pytest.fixture
def acm() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("acm", region_name=REGION)


@pytest.fixture
def cluster_uid(cluster: FakeKubeApiServer) -> str:
    """The cluster's identity: its kube-system Namespace's uid, as on every real cluster."""
    created = cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    return str(created["metadata"]["uid"])


def _settings(acm: Any, *, enabled: bool = True) -> AutoTlsSettings:
    return AutoTlsSettings(IssuerRef("ClusterIssuer", "test-ca"), lambda: acm, enabled=enabled)


def _issue(cluster: FakeKubeApiServer, acm: Any, name: str) -> tuple[Reconciler, str]:
    """``name`` with ``tls: {}``, its certificate issued and imported (by an operator since stopped)."""
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=_settings(acm))
    uid = str(cluster.add(tls_igwc(name))["metadata"]["uid"])
    asyncio.run(reconciler.reconcile("inference", name))
    write_tls_secret(cluster, f"{name}-gateway-tls", f"{name}.llm.example.com")
    asyncio.run(reconciler.reconcile("inference", name))
    return reconciler, uid


def _delete_unseen(cluster: FakeKubeApiServer, name: str) -> None:
    """Delete the config with no operator watching: nothing calls ``forget``."""
    cluster.store.delete(cluster.store.kind_for(**IGWC), "inference", name)


def _arns(acm: Any) -> set[str]:
    listed = acm.list_certificates(Includes={"keyTypes": ["EC_prime256v1", "RSA_2048"]})
    return {c["CertificateArn"] for c in listed["CertificateSummaryList"]}


def _foreign_import(acm: Any, tags: list[dict[str, str]]) -> str:
    leaf = trustme.CA().issue_cert("other.example")
    return str(
        acm.import_certificate(
            Certificate=leaf.cert_chain_pems[0].bytes(), PrivateKey=leaf.private_key_pem.bytes(), Tags=tags
        )["CertificateArn"]
    )


def test_a_config_deleted_while_no_operator_ran_loses_its_acm_import_and_secret_at_start(
    cluster: FakeKubeApiServer, kubeconfig: Path, acm: Any, cluster_uid: str
) -> None:
    """The leader sweeps when it starts: the gone config's import and private-key Secret are deleted;
    another cluster's import of the same account, an untagged one, a live config's and a Secret
    without the operator's labels are not."""
    _, gone_uid = _issue(cluster, acm, "chat")
    _, live_uid = _issue(cluster, acm, "live")
    (gone_arn,) = [a for a in _arns(acm) if {"Key": UID_TAG, "Value": gone_uid} in _tags(acm, a)]
    assert {"Key": CLUSTER_TAG, "Value": cluster_uid} in _tags(acm, gone_arn)
    other_cluster = _foreign_import(
        acm, [{"Key": UID_TAG, "Value": gone_uid}, {"Key": CLUSTER_TAG, "Value": "another-cluster"}]
    )
    untagged = _foreign_import(acm, [{"Key": "team", "Value": "search"}])
    write_tls_secret(cluster, "hand-made-tls", "hand.example.com", certificate="hand-made")
    _delete_unseen(cluster, "chat")
    assert find(cluster, "Secret", "inference", "chat-gateway-tls") is not None

    with running_operator(kubeconfig, auto_tls=_settings(acm)):
        wait_for(lambda: gone_arn not in _arns(acm), what="the orphaned ACM import deleted")
        wait_for(
            lambda: find(cluster, "Secret", "inference", "chat-gateway-tls") is None,
            what="the orphaned Secret deleted",
        )
    left = _arns(acm)
    assert {other_cluster, untagged} <= left
    assert len(left) == 3  # the live config's import too
    assert any({"Key": UID_TAG, "Value": live_uid} in _tags(acm, a) for a in left)
    assert find(cluster, "Secret", "inference", "live-gateway-tls") is not None
    assert find(cluster, "Secret", "inference", "hand-made-tls") is not None


def _tags(acm: Any, arn: str) -> list[dict[str, str]]:
    return list(acm.list_tags_for_certificate(CertificateArn=arn)["Tags"])


def test_the_sweep_spares_a_config_made_anew_and_retries_an_import_acm_says_is_in_use(
    cluster: FakeKubeApiServer, acm: Any, cluster_uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``chat`` deleted unseen and made again (a new uid): the old uid's import is another owner's
    and goes (retried after ACM's in-use refusal); the new config's import stays, and so does the
    Secret, which the new config's Certificate names again."""
    reconciler, _ = _issue(cluster, acm, "chat")
    (old_arn,) = _arns(acm)
    _delete_unseen(cluster, "chat")
    cluster.add(tls_igwc("chat"))
    in_use = InUseOnce(acm)
    reconciler = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=_settings(in_use))
    asyncio.run(reconciler.reconcile("inference", "chat"))
    (new_arn,) = _arns(acm) - {old_arn}
    sweep = OrphanSweep(Kube(cluster.api_client()), reconciler.acm, reconciler.cluster)
    caplog.set_level(logging.INFO, logger="igw.operator")

    first = asyncio.run(sweep.sweep())
    assert (first.acm_deleted, first.acm_in_use, first.secrets_deleted) == ([], [old_arn], [])
    second = asyncio.run(sweep.sweep())
    assert (second.acm_deleted, second.acm_in_use, second.secrets_deleted) == ([old_arn], [], [])
    assert _arns(acm) == {new_arn}
    assert find(cluster, "Secret", "inference", "chat-gateway-tls") is not None
    assert "1 ACM certificate(s) deleted, 0 in use (retried), 0 Secret(s) deleted" in caplog.text


def test_with_auto_tls_off_no_sweep_runs(
    cluster: FakeKubeApiServer, kubeconfig: Path, acm: Any, cluster_uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``operator.autoTls: false``: the RBAC grants no Secret access and no ACM role is bound, so the
    operator sweeps nothing (and makes no refused call)."""
    _issue(cluster, acm, "chat")
    _delete_unseen(cluster, "chat")
    cluster.forbid(*{resource for _, resource in KUBE_ACCESS})
    caplog.set_level(logging.INFO, logger="igw.operator")
    with running_operator(kubeconfig, auto_tls=_settings(acm, enabled=False), tls_sweep_s=0.2):
        time.sleep(1.5)  # several sweep intervals
    assert len(_arns(acm)) == 1
    assert find(cluster, "Secret", "inference", "chat-gateway-tls") is not None
    assert "swept" not in caplog.text
    assert "Forbidden" not in caplog.text


def test_a_namespaced_operator_sweeps_only_its_namespaces(
    cluster: FakeKubeApiServer, acm: Any, cluster_uid: str
) -> None:
    """An import of this cluster tagged with a namespace the operator does not watch belongs to the
    configs of another operator (``operator.namespaces``), which this one cannot list: left alone."""
    reconciler, _ = _issue(cluster, acm, "chat")
    (ours,) = _arns(acm)
    theirs = _foreign_import(
        acm,
        [
            {"Key": UID_TAG, "Value": "uid-in-team-b"},
            {"Key": CLUSTER_TAG, "Value": cluster_uid},
            {"Key": NAMESPACE_TAG, "Value": "team-b"},
        ],
    )
    _delete_unseen(cluster, "chat")
    sweep = OrphanSweep(
        Kube(cluster.api_client()), reconciler.acm, reconciler.cluster, namespaces=["inference"]
    )
    result = asyncio.run(sweep.sweep())
    assert result.acm_deleted == [ours]
    assert result.secrets_deleted == ["inference/chat-gateway-tls"]
    assert _arns(acm) == {theirs}


def _count_tag_reads(acm: Any) -> list[str]:
    """Every ListTagsForCertificate call ``acm`` makes from now on (its ARN)."""
    calls: list[str] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(str(params.get("CertificateArn")))

    acm.meta.events.register("provide-client-params.acm.ListTagsForCertificate", record)
    return calls


def test_the_sweep_reads_each_imports_tags_once_and_again_only_before_deleting(
    cluster: FakeKubeApiServer, acm: Any, cluster_uid: str
) -> None:
    """The sweep listed every import of the account and region and read the tags of each, at every
    sweep (every 10 minutes, for good): tags that cannot change are now remembered. Deleting an
    import still reads its tags afresh (a hand-made retag is respected)."""
    reconciler, _ = _issue(cluster, acm, "chat")
    other = _foreign_import(acm, [{"Key": UID_TAG, "Value": "x"}, {"Key": CLUSTER_TAG, "Value": "another"}])
    _foreign_import(acm, [{"Key": "team", "Value": "search"}])
    sweep = OrphanSweep(Kube(cluster.api_client()), reconciler.acm, reconciler.cluster)
    reads = _count_tag_reads(acm)

    first = asyncio.run(sweep.sweep())
    assert len(reads) == 3
    reads.clear()
    second = asyncio.run(sweep.sweep())
    assert reads == []
    assert (first.tag_reads, second.tag_reads, second.acm_deleted) == (3, 0, [])

    (chat_arn,) = [a for a in _arns(acm) if {"Key": NAME_TAG, "Value": "chat"} in _tags(acm, a)]
    _delete_unseen(cluster, "chat")
    reads.clear()
    third = asyncio.run(sweep.sweep())
    assert third.acm_deleted == [chat_arn]
    assert (third.tag_reads, reads) == (0, [chat_arn])  # the fresh read before deleting
    reads.clear()
    acm.delete_certificate(CertificateArn=other)  # gone from the listing: forgotten
    new = _foreign_import(acm, [{"Key": "team", "Value": "ads"}])
    fourth = asyncio.run(sweep.sweep())
    assert (fourth.tag_reads, reads) == (1, [new])


def test_an_import_made_before_the_cluster_tag_is_reported_once_and_never_deleted(
    cluster: FakeKubeApiServer, acm: Any, cluster_uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An import with the operator's uid, name and namespace tags but no cluster tag (made by an
    operator before the tag existed): nothing says which cluster's it is, so it is never deleted. Its
    config gone from here, the sweep says so once, with the ARN and how to delete it by hand; one whose
    config is here is not reported, and gets the cluster tag at that config's next pass."""
    reconciler, live_uid = _issue(cluster, acm, "live")
    (live_arn,) = _arns(acm)
    acm.remove_tags_from_certificate(
        CertificateArn=live_arn, Tags=[{"Key": CLUSTER_TAG, "Value": cluster_uid}]
    )
    legacy = _foreign_import(
        acm,
        [
            {"Key": UID_TAG, "Value": "uid-of-a-config-gone-long-ago"},
            {"Key": NAME_TAG, "Value": "old-chat"},
            {"Key": NAMESPACE_TAG, "Value": "inference"},
        ],
    )
    sweep = OrphanSweep(Kube(cluster.api_client()), reconciler.acm, reconciler.cluster)
    caplog.set_level(logging.WARNING, logger="igw.operator")

    first = asyncio.run(sweep.sweep())
    # Only the records about this import: another test's leftovers on a shared worker log too.
    (warning,) = [r.getMessage() for r in caplog.records if legacy in r.getMessage()]
    assert not [r for r in caplog.records if live_arn in r.getMessage()]  # its config is here
    assert "inference/old-chat" in warning
    assert "aws acm delete-certificate" in warning
    assert (first.legacy_reported, first.acm_deleted) == ([legacy], [])
    caplog.clear()
    second = asyncio.run(sweep.sweep())
    about_it = [r for r in caplog.records if legacy in r.getMessage()]
    assert (second.legacy_reported, second.acm_deleted, about_it) == ([], [], [])
    assert _arns(acm) == {live_arn, legacy}

    # The upgraded operator's first pass tags it with the cluster (a new process: the import is not
    # one it found with its tags already, which it would take as is for VERIFY_INTERVAL_S).
    upgraded = Reconciler(Kube(cluster.api_client()), DataPlaneSettings(), auto_tls=_settings(acm))
    asyncio.run(upgraded.reconcile("inference", "live"))
    assert {"Key": CLUSTER_TAG, "Value": cluster_uid} in _tags(acm, live_arn)
    _delete_unseen(cluster, "live")
    assert asyncio.run(sweep.sweep()).acm_deleted == [live_arn]
    assert live_uid


def test_a_missing_crd_is_reported_once_with_what_to_do_then_at_most_every_half_hour(
    acm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The CRD not installed (``crds.enabled: false``, applied later): every sweep logged
    ``sweeping orphaned auto-issued TLS failed: ResourceNotFoundError: No matches found for {...}``.
    Now the first sweep says which CRD is missing and how to install it, the next ones say nothing
    until :data:`CRD_MISSING_REPEAT_S` has passed (injected clock), and the CRD's arrival is logged."""
    now = [1000.0]
    with running_fake_kube() as cluster:
        cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
        kube = Kube(cluster.api_client(), monotonic=lambda: now[0])
        sweep = OrphanSweep(kube, AcmImporter(lambda: acm), ClusterIdentity(kube), clock=lambda: now[0])
        caplog.set_level(logging.INFO, logger="igw.operator")

        def secret_lists() -> int:
            """Sweeps begun: each lists the operator's Secrets first."""
            return len([p for m, p, _ in cluster.requests if m == "GET" and p == "/api/v1/secrets"])

        def sweeps(count: int) -> list[str]:
            """Run ``count`` sweeps (the loop's own, 1 ms apart); the operator's records they logged."""
            caplog.clear()
            lists = secret_lists()

            async def main() -> None:
                stop = asyncio.Event()
                task = asyncio.create_task(sweep.run(stop, 0.001))
                await asyncio.to_thread(
                    wait_for,
                    lambda: secret_lists() >= lists + count,
                    what=f"{count} sweeps",
                )
                stop.set()
                await task

            asyncio.run(main())
            return [f"{r.levelname} {r.getMessage()}" for r in caplog.records if r.name == "igw.operator"]

        first = sweeps(5)
        assert len(first) == 1, first
        assert first[0].startswith(
            "WARNING the inferencegatewayconfigs.inference.sagemaker.aws.amazon.com CRD is not installed"
        )
        assert "crds.enabled: true" in first[0]
        assert "ResourceNotFoundError" not in first[0]
        now[0] += CRD_MISSING_REPEAT_S - 1
        assert sweeps(3) == []
        now[0] += 2
        assert [m.split(" CRD")[0] for m in sweeps(3)] == [
            "WARNING the inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"
        ]
        install_crd(cluster)
        now[0] += 60  # past the client's memory of the kind as not served
        back = sweeps(3)
        assert [m for m in back if "CRD" in m] == [
            "INFO the inferencegatewayconfigs.inference.sagemaker.aws.amazon.com CRD is installed: the "
            "orphan sweep of auto-issued TLS runs"
        ]
        assert not [m for m in back if m.startswith("WARNING")]
