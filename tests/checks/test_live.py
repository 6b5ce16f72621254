"""The live path: the real ``kubernetes`` client against the fake API server, real HTTP probes of
/metrics pages, and the AWS side through moto (IAM, EC2, ELBv2) plus a Stubber-wrapped EKS client."""

from __future__ import annotations

import copy
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from igw.checks.framework import CheckContext, CheckOptions, run_checks
from igw.checks.model import Command, Severity, SkipKind, Status
from igw.checks.registry import checks_for
from igw.checks.sources.aws_api import AwsAccount
from igw.checks.sources.live import load_live
from igw.cli.main import main
from tests.checks.helpers import SECURE, cli, crds_first, find, secure_docs
from tests.fakes.kube_api import (
    FakeKubeApiServer,
    make_pod,
    running_fake_kube,
    unreachable_url,
    write_kubeconfig,
)

VLLM_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="llama"} 0.42
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="llama"} 0.0
"""
OLD_VLLM_PAGE = VLLM_PAGE.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
NO_KV_PAGE = "\n".join(line for line in VLLM_PAGE.splitlines() if "kv_cache" not in line)


class _MetricsServer:
    """A real HTTP server on loopback serving one /metrics page (changeable between scans)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.page: str | None = VLLM_PAGE
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics" or outer.page is None:
                    self.send_error(404)
                    return
                body = outer.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server_class = ThreadingHTTPServer
        if ":" in host:

            class IPv6Server(ThreadingHTTPServer):
                address_family = socket.AF_INET6

            server_class = IPv6Server
        self.server = server_class((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> _MetricsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def metrics() -> Iterator[_MetricsServer]:
    with _MetricsServer() as server:
        yield server


def _seed(kube: FakeKubeApiServer, port: int, pod_ip: str = "127.0.0.1") -> None:
    """The secure corpus, with the llama scheduler pointed at a real metrics server and live pods."""
    docs = copy.deepcopy(secure_docs())
    igwc = find(docs, "InferenceGatewayConfig", "gateway")
    igwc["spec"]["schedulers"] = [s for s in igwc["spec"]["schedulers"] if s["name"] == "llama"]
    igwc["spec"]["schedulers"][0]["targetPort"] = port
    for doc in docs:
        if doc["kind"] == "Deployment":
            replicas = doc["spec"].get("replicas", 1)
            doc["status"] = {"replicas": replicas, "availableReplicas": replicas, "readyReplicas": replicas}
    kube.add_all(d for d in crds_first(docs) if d["kind"] != "Namespace")
    for index in range(3):
        kube.add(
            make_pod(
                name=f"llama-{index}",
                namespace="ml",
                labels={"app": "llama-8b"},
                args=["--model", "llama", "--port", str(port)],
                port=port,
                pod_ip=pod_ip,
                ready=index < 2,
            )
        )


def _scan(kube: FakeKubeApiServer, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    code, out = cli("preflight", "--kubeconfig", str(config), "-o", "json", *extra)
    return code, json.loads(out)


def _by_check(report: dict[str, Any], check_id: str) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["checkId"] == check_id]


def test_live_preflight_with_probe(tmp_path: Path, metrics: _MetricsServer) -> None:
    with running_fake_kube() as kube:
        _seed(kube, metrics.port)
        code, report = _scan(kube, tmp_path, "--probe", "--skip-check", "IGW-PF015")
        assert code == 0, report
        [selector] = _by_check(report, "IGW-PF010")
        assert selector["status"] == "PASS"
        assert selector["message"].startswith("2 Ready pod(s) of 3 matching app=llama-8b")
        [probe] = _by_check(report, "IGW-PF014")
        assert probe == {**probe, "status": "PASS", "message": "2 pod(s) expose every signal"}
        [lbc] = _by_check(report, "IGW-PF007")
        assert lbc["message"] == "2/2 replicas available"
        # the client listed each kind once, across all namespaces
        pod_lists = [r for r in kube.requests if r[1] == "/api/v1/pods"]
        assert len(pod_lists) == 1

        metrics.page = OLD_VLLM_PAGE
        code, report = _scan(kube, tmp_path, "--probe", "--skip-check", "IGW-PF015")
        [probe] = _by_check(report, "IGW-PF014")
        assert (probe["status"], probe["severity"]) == ("WARN", "MEDIUM")
        assert "only vllm:gpu_cache_usage_perc (expected vllm:kv_cache_usage_perc)" in probe["message"]
        assert code == 0  # a MEDIUM warning is below the default --fail-on high

        metrics.page = NO_KV_PAGE
        code, report = _scan(kube, tmp_path, "--probe", "--skip-check", "IGW-PF015")
        [probe] = _by_check(report, "IGW-PF014")
        assert (probe["status"], code) == ("FAIL", 1)
        assert "missing kv-cache (vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc)" in probe["message"]

        metrics.page = None
        code, report = _scan(kube, tmp_path, "--probe", "--skip-check", "IGW-PF015")
        [probe] = _by_check(report, "IGW-PF014")
        assert probe["status"] == "FAIL"
        assert "HTTP 404" in probe["message"]


def test_the_probe_reaches_ipv6_pods(tmp_path: Path) -> None:
    """An IPv6 pod IP goes in brackets in the probe's URL; joined as it is (``http://::1:PORT``) every
    IPv6 pod was reported unreachable."""
    with _MetricsServer("::1") as metrics, running_fake_kube() as kube:
        _seed(kube, metrics.port, pod_ip="::1")
        code, report = _scan(kube, tmp_path, "--probe", "--skip-check", "IGW-PF015")
        [probe] = _by_check(report, "IGW-PF014")
        assert probe == {**probe, "status": "PASS", "message": "2 pod(s) expose every signal"}
        assert code == 0


def test_probe_is_opt_in(tmp_path: Path, metrics: _MetricsServer) -> None:
    with running_fake_kube() as kube:
        _seed(kube, metrics.port)
        code, report = _scan(kube, tmp_path)
        [probe] = _by_check(report, "IGW-PF014")
        assert (probe["status"], probe["skipKind"]) == ("SKIP", "not-applicable")
        assert "--probe" in probe["message"]
        assert code == 0


def test_live_near_miss_across_namespaces(tmp_path: Path, metrics: _MetricsServer) -> None:
    with running_fake_kube() as kube:
        _seed(kube, metrics.port)
        for name in ("llama-0", "llama-1", "llama-2"):
            kube.store.delete(kube.store.kind_for(api_version="v1", kind="Pod"), "ml", name)
        kube.add(make_pod(name="llama-x", namespace="ml-staging", labels={"app": "llama-8b"}))
        kube.add(make_pod(name="llama-y", namespace="ml", labels={"app": "Llama-8B"}))
        code, report = _scan(kube, tmp_path)
        [selector] = _by_check(report, "IGW-PF010")
        assert code == 1
        assert "1 matching pod(s) in namespace 'ml-staging'" in selector["message"]
        assert "Pod ml/llama-y: label app='Llama-8B' differs only in case" in selector["message"]


def test_forbidden_api_is_exit_3_and_never_a_pass(tmp_path: Path) -> None:
    with running_fake_kube() as kube:
        _seed(kube, 8000)
        kube.forbid()
        code, report = _scan(kube, tmp_path)
        assert code == 3
        kube_checks = [
            r for r in report["results"] if r["checkId"] in ("IGW-PF006", "IGW-PF009", "IGW-PF010")
        ]
        assert kube_checks
        assert all(r["status"] == "SKIP" and r["skipKind"] == "not-evaluated" for r in kube_checks)
        assert "API forbidden" in kube_checks[0]["message"]
        assert not [r for r in report["results"] if r["status"] == "PASS"]


def test_forbidden_pods_only_skips_what_needs_pods(tmp_path: Path, metrics: _MetricsServer) -> None:
    with running_fake_kube() as kube:
        _seed(kube, metrics.port)
        kube.forbid("pods")
        code, report = _scan(kube, tmp_path)
        [selector] = _by_check(report, "IGW-PF010")
        assert selector["skipKind"] == "not-evaluated"
        assert (
            'pods is forbidden: User "system:serviceaccount:igw:test" cannot list resource "pods"'
            in (selector["message"])
        )
        [crd] = _by_check(report, "IGW-PF006")
        assert crd["status"] == "PASS"
        assert code == 3


def test_unreachable_api_is_exit_3(tmp_path: Path) -> None:
    config = write_kubeconfig(tmp_path / "kubeconfig", server=unreachable_url())
    code, out = cli("audit", "--kubeconfig", str(config), "-o", "json")
    report = json.loads(out)
    assert code == 3
    assert all(r["status"] == "SKIP" for r in report["results"])
    assert any("Kubernetes API unreachable" in r["message"] for r in report["results"])


# ---- AWS side -------------------------------------------------------------------------------------

GATEWAY_SA = "system:serviceaccount:hyperpod-inference-system:inference-gateway"
OIDC = "oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"


def _trust(sub: str | None) -> str:
    condition = {"StringEquals": {f"{OIDC}:aud": "sts.amazonaws.com"}}
    if sub:
        condition["StringEquals"][f"{OIDC}:sub"] = sub
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Principal": {"Federated": f"arn:aws:iam::123456789012:oidc-provider/{OIDC}"},
                    "Condition": condition,
                }
            ],
        }
    )


def _aws_world(*, secure: bool) -> dict[str, Any]:
    """One account holding both a secure and an insecure setup (separate VPCs, role names)."""
    region = "us-west-2"
    role_name = f"igw-gateway-{'secure' if secure else 'insecure'}"
    iam = boto3.client("iam", region_name=region)
    ec2 = boto3.client("ec2", region_name=region)
    elbv2 = boto3.client("elbv2", region_name=region)
    acm = boto3.client("acm", region_name=region)
    role = iam.create_role(
        RoleName=role_name, AssumeRolePolicyDocument=_trust(GATEWAY_SA if secure else None)
    )
    acm_actions = [
        "acm:ImportCertificate",
        "acm:AddTagsToCertificate",
        "acm:DescribeCertificate",
        "acm:DeleteCertificate",
    ]
    policy = iam.create_policy(
        PolicyName=f"{role_name}-acm",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": acm_actions, "Resource": "*"}],
            }
        ),
    )
    iam.attach_role_policy(RoleName=role_name, PolicyArn=policy["Policy"]["Arn"])
    if not secure:
        iam.put_role_policy(
            RoleName=role_name,
            PolicyName="extra",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = []
    for index, az in enumerate(("us-west-2a", "us-west-2b")):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=az)["Subnet"]
        if secure:
            ec2.create_tags(
                Resources=[subnet["SubnetId"]],
                Tags=[{"Key": "kubernetes.io/role/internal-elb", "Value": "1"}],
            )
        subnets.append(subnet["SubnetId"])
    sg = ec2.create_security_group(GroupName=role_name, Description="lb", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=sg,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 443,
                "ToPort": 443,
                "IpRanges": [{"CidrIp": "10.0.0.0/8" if secure else "0.0.0.0/0"}],
            }
        ],
    )
    lb = elbv2.create_load_balancer(
        Name=role_name,
        Subnets=subnets,
        SecurityGroups=[sg],
        Scheme="internal" if secure else "internet-facing",
        Type="application",
    )
    lb_arn = lb["LoadBalancers"][0]["LoadBalancerArn"]
    elbv2.modify_load_balancer_attributes(
        LoadBalancerArn=lb_arn,
        Attributes=[
            {"Key": "routing.http.drop_invalid_header_fields.enabled", "Value": "true" if secure else "false"}
        ],
    )
    tg = elbv2.create_target_group(Name=role_name, Protocol="HTTP", Port=8080, VpcId=vpc, TargetType="ip")
    tg_arn = tg["TargetGroups"][0]["TargetGroupArn"]
    cert = acm.request_certificate(DomainName="igw.example.com")["CertificateArn"]
    elbv2.create_listener(
        LoadBalancerArn=lb_arn,
        Protocol="HTTPS",
        Port=443,
        Certificates=[{"CertificateArn": cert}],
        SslPolicy="ELBSecurityPolicy-TLS13-1-2-Res-2021-06" if secure else "ELBSecurityPolicy-2016-08",
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg_arn}],
    )
    return {
        "role": role["Role"]["Arn"],
        "subnets": subnets,
        "vpc": vpc,
        "iam": iam,
        "ec2": ec2,
        "elbv2": elbv2,
    }


def _stub_eks(world: dict[str, Any], *, secure: bool, deny: bool = False) -> Any:
    eks = boto3.client("eks", region_name="us-west-2")
    stub = Stubber(eks)
    if deny:
        stub.add_client_error(
            "describe_cluster",
            service_error_code="AccessDeniedException",
            service_message="User is not authorized to perform eks:DescribeCluster",
            http_status_code=403,
        )
    else:
        stub.add_response(
            "describe_cluster",
            {
                "cluster": {
                    "name": "hp",
                    "version": "1.34",
                    "accessConfig": {"authenticationMode": "API" if secure else "CONFIG_MAP"},
                    "resourcesVpcConfig": {"subnetIds": world["subnets"], "vpcId": world["vpc"]},
                    "identity": {"oidc": {"issuer": f"https://{OIDC}"}},
                }
            },
            {"name": "hp"},
        )
    addons = {
        "amazon-sagemaker-hyperpod-inference": "v2.0.1-eksbuild.1" if secure else "v1.5.0-eksbuild.1",
        "cert-manager": "v1.18.2-eksbuild.2",
        "metrics-server": "v0.7.2-eksbuild.4",
        "aws-mountpoint-s3-csi-driver": "v1.15.0-eksbuild.1",
        "aws-fsx-csi-driver": "v1.6.0-eksbuild.1",
    }
    stub.add_response("list_addons", {"addons": list(addons)}, {"clusterName": "hp"})
    for name, version in addons.items():
        addon: dict[str, Any] = {
            "addonName": name,
            "clusterName": "hp",
            "addonVersion": version,
            "status": "ACTIVE",
        }
        if name == "amazon-sagemaker-hyperpod-inference":
            addon["serviceAccountRoleArn"] = world["role"]
        stub.add_response("describe_addon", {"addon": addon}, {"clusterName": "hp", "addonName": name})
    stub.activate()
    return eks


AWS_CHECKS = (
    "IGW-PF001",
    "IGW-PF002",
    "IGW-PF003",
    "IGW-PF004",
    "IGW-PF005",
    "IGW-AU102",
    "IGW-AU301",
    "IGW-AU302",
    "IGW-AU304",
    "IGW-AU501",
    "IGW-AU502",
)


@pytest.fixture(scope="module")
def aws_worlds() -> Iterator[dict[bool, dict[str, Any]]]:
    with mock_aws():
        yield {True: _aws_world(secure=True), False: _aws_world(secure=False)}


def _aws_results(worlds: dict[bool, dict[str, Any]], secure: bool) -> dict[str, set[tuple[str, str]]]:
    with running_fake_kube() as kube:
        world = worlds[secure]
        eks = _stub_eks(world, secure=secure)
        account = AwsAccount(
            clients={"eks": eks, "iam": world["iam"], "ec2": world["ec2"], "elbv2": world["elbv2"]}
        )
        inventory = load_live(api_client=kube.api_client(), cluster_name="hp", account=account)
        ctx = CheckContext(inventory=inventory, options=CheckOptions())
        results = run_checks(checks_for(Command.PREFLIGHT), ctx) + run_checks(checks_for(Command.AUDIT), ctx)
    out: dict[str, set[tuple[str, str]]] = {}
    for r in results:
        if r.check_id in AWS_CHECKS:
            out.setdefault(r.check_id, set()).add((r.status.value, r.severity.label if r.is_finding else ""))
    return out


def test_aws_side_secure_account(aws_worlds: dict[bool, dict[str, Any]]) -> None:
    assert _aws_results(aws_worlds, secure=True) == {check: {("PASS", "")} for check in AWS_CHECKS}


def test_aws_side_insecure_account(aws_worlds: dict[bool, dict[str, Any]]) -> None:
    assert _aws_results(aws_worlds, secure=False) == {
        "IGW-PF001": {("FAIL", "HIGH")},
        "IGW-PF002": {("FAIL", "CRITICAL")},
        "IGW-PF003": {("PASS", "")},
        "IGW-PF004": {("PASS", "")},  # the attached policy still grants the ACM actions
        "IGW-PF005": {("FAIL", "HIGH")},
        "IGW-AU102": {("FAIL", "HIGH")},
        "IGW-AU301": {("WARN", "MEDIUM")},  # an actual LB's scheme is explicit: not approved → warning
        "IGW-AU302": {("FAIL", "HIGH")},
        "IGW-AU304": {("FAIL", "MEDIUM")},
        "IGW-AU501": {("FAIL", "CRITICAL")},
        "IGW-AU502": {("FAIL", "HIGH")},
    }


def test_aws_access_denied_is_not_evaluated(aws_worlds: dict[bool, dict[str, Any]]) -> None:
    with running_fake_kube() as kube:
        world = aws_worlds[True]
        eks = _stub_eks(world, secure=True, deny=True)
        account = AwsAccount(
            clients={"eks": eks, "iam": world["iam"], "ec2": world["ec2"], "elbv2": world["elbv2"]}
        )
        inventory = load_live(api_client=kube.api_client(), cluster_name="hp", account=account)
        ctx = CheckContext(inventory=inventory)
        [result] = run_checks([c for c in checks_for(Command.PREFLIGHT) if c.meta.id == "IGW-PF001"], ctx)
    assert (result.status, result.skip_kind) == (Status.SKIP, SkipKind.NOT_EVALUATED)
    assert "eks:DescribeCluster hp: AccessDeniedException" in result.message
    assert result.severity is Severity.HIGH


def test_cli_cluster_name_reads_aws_and_reports_what_moto_cannot_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI builds its own boto3 session from --region; moto has EKS clusters but no add-on APIs, so
    the add-on check is not-evaluated (named API call), never passed."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws(), running_fake_kube() as kube:
        ec2 = boto3.client("ec2", region_name="us-west-2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        ec2.create_tags(Resources=[subnet], Tags=[{"Key": "kubernetes.io/role/internal-elb", "Value": "1"}])
        boto3.client("eks", region_name="us-west-2").create_cluster(
            name="hp",
            roleArn="arn:aws:iam::123456789012:role/eks",
            resourcesVpcConfig={"subnetIds": [subnet]},
        )
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code, out = cli(
            "preflight",
            "--kubeconfig",
            str(config),
            "--cluster-name",
            "hp",
            "--region",
            "us-west-2",
            "-o",
            "json",
            "--check",
            "IGW-PF002",
            "--check",
            "IGW-PF005",
        )
    results = {r["checkId"]: r for r in json.loads(out)["results"]}
    assert results["IGW-PF005"]["status"] == "PASS"
    assert results["IGW-PF002"]["skipKind"] == "not-evaluated"
    assert results["IGW-PF002"]["message"].startswith("eks:ListAddons/DescribeAddon: 404")
    assert code == 3


def test_live_table_scan_shows_a_progress_bar_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich treats stderr as a terminal
    with running_fake_kube() as kube:
        _seed(kube, 8000)
        config = kube.write_kubeconfig(tmp_path / "kubeconfig")
        code = main(["audit", "--kubeconfig", str(config)])
    captured = capsys.readouterr()
    assert "audit: running checks" in captured.err
    assert "reading the cluster" in captured.err
    assert "fail-on high, exit 0" in captured.out
    assert code == 0
    assert main(["audit", "--manifests", str(SECURE)]) == 0  # static scans: no progress bar
    assert "running checks" not in capsys.readouterr().err
