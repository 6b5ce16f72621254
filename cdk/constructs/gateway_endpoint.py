"""A name outside clients can trust: an ACM certificate for ``<record>.<zone>`` validated through DNS
in the configured Route 53 zone, presented by the load balancer's TLS listener with a TLS 1.3 policy
(in operator mode the certificate is the InferenceGatewayConfig's ``spec.tls.acmArn`` and the operator
annotates its ``<name>-gateway`` Service; in the chart's gateway mode the chart's Service carries it),
and a record pointing that name at the load balancer.

The load balancer is created by the Load Balancer Controller from the gateway's ``Service``, so its
host name exists only after that Service exists (after the chart, and in operator mode after the
InferenceGatewayConfig the operator reconciles): a ``KubernetesObjectValue`` reads it from the
Service's status and the record is a CNAME to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_route53 as route53
from constructs import Construct

from cdk.config import EndpointConfig

RECORD_TTL: Final = cdk.Duration.minutes(5)
PLACEHOLDER_CERTIFICATE: Final = (
    "arn:aws:acm:us-west-2:111111111111:certificate/00000000-0000-0000-0000-000000000000"
)
"""Stands in for the certificate's ARN (known only at deploy time) when values are validated at synth."""


class GatewayCertificate(Construct):
    """Exposes ``certificate`` (DNS-validated in the configured hosted zone) and ``zone``."""

    def __init__(self, scope: Construct, id_: str, *, config: EndpointConfig) -> None:
        super().__init__(scope, id_)
        self.zone = route53.HostedZone.from_hosted_zone_attributes(
            self, "Zone", hosted_zone_id=config.hosted_zone_id, zone_name=config.zone_name
        )
        self.certificate = acm.Certificate(
            self,
            "Certificate",
            domain_name=config.fqdn,
            validation=acm.CertificateValidation.from_dns(self.zone),
        )


class GatewayDnsRecord(Construct):
    """Exposes ``record``: ``<record>.<zone>`` CNAME the gateway Service's load balancer; the Service
    ``service_name`` in ``namespace`` is read once everything in ``after`` (what creates it) exists."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        config: EndpointConfig,
        zone: route53.IHostedZone,
        service_name: str,
        namespace: str,
        after: Sequence[Construct],
    ) -> None:
        super().__init__(scope, id_)
        self.load_balancer_host = eks.KubernetesObjectValue(
            self,
            "LoadBalancerHost",
            cluster=cluster,
            object_type="service",
            object_name=service_name,
            object_namespace=namespace,
            json_path=".status.loadBalancer.ingress[0].hostname",
            timeout=cdk.Duration.minutes(10),
        )
        self.load_balancer_host.node.add_dependency(*after)
        self.record = route53.CnameRecord(
            self,
            "Record",
            zone=zone,
            record_name=config.record_name,
            domain_name=self.load_balancer_host.value,
            ttl=RECORD_TTL,
        )
