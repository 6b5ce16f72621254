"""The chart's ``mode: gateway`` as an explicit deployment-config choice: the chart runs one gateway
itself, serving the deployment config's InferenceGatewayConfig from its values, with the endpoint's
certificate on the chart's Service and the DNS record on that Service's load balancer."""

from __future__ import annotations

import yaml

from igw.addon import chart, pins
from tests.cdk.support import CERTIFICATE_ARN, Synthesized, inference_kubernetes_inputs

LB = "service.beta.kubernetes.io/aws-load-balancer"


def test_gateway_mode_chart_serves_the_deployment_configs_object_with_tls(gateway_mode: Synthesized) -> None:
    manifests, helm = inference_kubernetes_inputs(gateway_mode.templates["inference"])
    (igwc,) = manifests
    values = helm["Values"]
    assert values["mode"] == "gateway"
    assert values["replicaCount"] == 3
    assert values["service"]["tls"]["certificateArn"] == CERTIFICATE_ARN
    assert "acmArn" not in igwc["spec"]["tls"], "the chart's Service carries the certificate, not the object"
    assert values["gateway"]["config"] == {
        "name": igwc["metadata"]["name"],
        "namespace": igwc["metadata"]["namespace"],
        "spec": igwc["spec"],
    }

    rendered = chart.render(values, release=helm["Release"], namespace=helm["Namespace"])
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][0] == "serve"
    (config_map,) = [o for o in rendered if o["kind"] == "ConfigMap"]
    (text,) = config_map["data"].values()
    served = yaml.safe_load(text)
    served["spec"].get("extensions", {}).pop("tlsTermination", None)
    if served["spec"].get("extensions") == {}:
        del served["spec"]["extensions"]
    assert served["spec"] == igwc["spec"], "the chart's gateway serves the applied object, auth included"
    services = {o["spec"]["type"]: o for o in rendered if o["kind"] == "Service"}
    assert sorted(services) == ["ClusterIP", "LoadBalancer"]  # the management Service stays in the cluster
    service = services["LoadBalancer"]
    assert service["metadata"]["name"] == pins.CHART_NAME
    annotations = service["metadata"]["annotations"]
    assert annotations[f"{LB}-scheme"] == "internal"
    assert annotations[f"{LB}-ssl-cert"] == CERTIFICATE_ARN
    assert annotations[f"{LB}-ssl-negotiation-policy"].startswith("ELBSecurityPolicy-TLS13")


def test_gateway_mode_dns_record_reads_the_charts_service(gateway_mode: Synthesized) -> None:
    resources = gateway_mode.templates["inference"]["Resources"]
    (lookup,) = [r for r in resources.values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"]
    assert lookup["Properties"]["ObjectName"] == pins.CHART_NAME
    assert lookup["Properties"]["ObjectNamespace"] == pins.ADDON_NAMESPACE
