"""Add-on configuration errors name the value's path and rule and never echo a credential.

A configuration value can hold a token or a password (a Redis URL, a pull secret's name pasted from
the wrong place, a bearer token in a wrong field); jsonschema's messages, and EKS's own schema errors,
quoted the whole value into terminals, CI logs and CloudFormation events."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from igw.addon import aws_addon, configuration
from igw.addon.eks_api import AddonApiError, EksAddonApi

JWT = (
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZG1pbiIsImF1ZCI6ImlndyIsImV4cCI6OTk5OTk5OTk5OX0"
    ".c2lnbmF0dXJlLXRoYXQtaXMtbG9uZy1lbm91Z2gtdG8tYmUtcmVhbA"
)
SECRETS = ("hunter2hunter2", "ghp_Z9x8Y7w6V5u4T3s2R1q0P9o8N7m6", JWT[:30], "s3cr3t-Pa55")
"""Every credential below, and a piece of each long enough to be of use (a cut JWT's header)."""

CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "a password in a URL, in a field with a pattern": (
        {"imagePullSecrets": [{"name": "https://bob:hunter2hunter2@registry.example.com"}]},
        "imagePullSecrets[0].name:",
        "schema.pattern",
    ),
    "a bearer JWT in an integer field": (
        {"gateway": {"port": f"Bearer {JWT}"}},
        "gateway.port:",
        "schema.type",
    ),
    "an API token assigned in a duration": (
        {"certManager": {"duration": "token=ghp_Z9x8Y7w6V5u4T3s2R1q0P9o8N7m6"}},
        "certManager.duration:",
        "schema.pattern",
    ),
    "a bare token in a quantity": (
        {"resources": {"requests": {"cpu": "ghp_Z9x8Y7w6V5u4T3s2R1q0P9o8N7m6"}}},
        "resources.requests.cpu:",
        "schema.pattern",
    ),
    "a password in an enum field": (
        {"service": {"scheme": "password=s3cr3t-Pa55"}},
        "service.scheme:",
        "schema.enum",
    ),
    "a JWT in the InferenceGatewayConfig's JWKS URI": (
        {
            "gateway": {
                "config": {
                    "name": "x",
                    "spec": {
                        "schedulers": [
                            {"name": "a", "modelName": "m", "modelSelector": {"matchLabels": {"app": "m"}}}
                        ],
                        "auth": {
                            "jwt": {
                                "provider": {
                                    "name": "p",
                                    "issuer": "https://issuer.example.com",
                                    "remoteJWKS": {"uri": f"ftp://issuer.example.com/{JWT}"},
                                    "audiences": ["igw"],
                                }
                            }
                        },
                    },
                }
            }
        },
        "gateway.config.spec.auth.jwt.provider.remoteJWKS.uri:",
        "schema.",
    ),
}


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text


@pytest.mark.parametrize("case", list(CASES))
def test_a_credential_in_a_bad_value_is_not_echoed_and_the_path_and_rule_are_named(case: str) -> None:
    values, path, rule = CASES[case]
    found = configuration.problems(values)
    (line,) = [p for p in found if p.startswith(path)]
    assert f"(rule {rule}" in line, line
    if rule != "schema.type":  # a type error quotes no value, only its type
        assert "[REDACTED]" in line, line
    _assert_no_secret("\n".join(found))
    _assert_no_secret(str(configuration.ConfigurationValuesError(found)))


def test_excerpts_are_short_and_redacted_before_they_are_cut() -> None:
    # Cut first, a JWT's tail would be lost and its header (a piece of the token) shown unmasked.
    quoted = configuration.excerpt(f"x{JWT}")
    assert len(quoted) <= configuration.EXCERPT_MAX_CHARS
    _assert_no_secret(quoted)
    long_plain = configuration.excerpt("a-plain-value " * 20)
    assert long_plain.endswith("...")
    assert len(long_plain) == configuration.EXCERPT_MAX_CHARS


def test_aws_managed_addon_values_are_quoted_the_same_way() -> None:
    found = aws_addon.problems(
        {"executionRoleArn": "arn:aws:iam::123456789012:user/x?password=hunter2hunter2"},
        require_generated=False,
    )
    (line,) = found
    assert line.startswith("executionRoleArn: "), line
    assert "(rule schema.pattern)" in line, line
    _assert_no_secret(line)


def test_eks_schema_errors_that_quote_the_value_are_redacted() -> None:
    client = boto3.client(
        "eks", region_name="us-west-2", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stubber = Stubber(client)
    stubber.add_client_error(
        "create_addon",
        service_error_code="InvalidParameterException",
        service_message=(
            "ConfigurationValue provided in request is not supported: Json schema validation failed "
            "with error: [$.gateway.emfEndpoint: does not match the regex pattern, value "
            "redis://:hunter2hunter2@cache.example.com:6379 token=ghp_Z9x8Y7w6V5u4T3s2R1q0P9o8N7m6]"
        ),
    )
    with stubber, pytest.raises(AddonApiError) as caught:
        EksAddonApi(client).create_addon(
            cluster="igw",
            name="igw",
            version="v1.0.0-eksbuild.1",
            configuration_values="{}",
            resolve_conflicts="NONE",
        )
    assert caught.value.code == "InvalidParameterException"
    assert "$.gateway.emfEndpoint" in str(caught.value)
    _assert_no_secret(str(caught.value))


def test_a_refused_value_is_named_by_its_rule() -> None:
    """``image.tag: latest`` read "does not satisfy the schema's not rule", leaving the reader to find
    the rule in the schema."""
    (line,) = [p for p in configuration.problems({"image": {"tag": "latest"}}) if p.startswith("image.tag:")]
    assert line == 'image.tag: must not be "latest"; got "latest" (rule schema.not)', line


@pytest.mark.parametrize(
    ("values", "line"),
    [
        (
            {"operator": {"awsRegion": "US-East-1"}},
            "operator.awsRegion: must be empty, or an AWS region name in lower case, such as "
            'us-west-2; got "US-East-1" (rule schema.pattern)',
        ),
        (
            {"certManager": {"duration": "90 days"}},
            "certManager.duration: must be a duration: one or more numbers, each with a unit ns, "
            "us, µs, ms, s, m or h, such as 2160h, 1h30m or 500ms (no days, no spaces); "
            'got "90 days" (rule schema.pattern)',
        ),
        (
            {"podLabels": {"team name": "a"}},
            'podLabels["team name"]: key must be a label key: an optional DNS subdomain prefix '
            "and '/', then a name of 1 to 63 letters, digits, '-', '_' and '.', starting and "
            "ending with a letter or digit, such as app.kubernetes.io/name; "
            'got "team name" (rule schema.propertyNames)',
        ),
        (
            {
                "gateway": {
                    "config": {
                        "name": "x",
                        "spec": {"extensions": {"rateLimits": {"redis": {"url": "http://cache:6379"}}}},
                    }
                }
            },
            "gateway.config.spec.extensions.rateLimits.redis.url: must be a redis://, rediss:// or "
            'unix:// URL; got "http://cache:6379" (rule schema.pattern)',
        ),
    ],
    ids=["region", "duration-definition", "label-key", "gateway-config-spec"],
)
def test_a_pattern_is_refused_in_words(values: dict[str, Any], line: str) -> None:
    """A value a chart-values pattern refuses is described in words, not as the regular expression
    (``must be a string matching ^([a-z]{2}(-[a-z]+)+-[0-9]+)?$``)."""
    path = line.split(": ", 1)[0]
    assert [p for p in configuration.problems(values) if p.startswith(f"{path}:")] == [line]
