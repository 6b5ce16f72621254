"""IGW-AU308: a Redis password written into an InferenceGatewayConfig or GlobalRouterConfig is a
finding that names the field and never the password; ``passwordEnv`` and variable references pass."""

from __future__ import annotations

from typing import Any

import pytest

from igw.checks.model import Command, Status
from tests.checks.helpers import of, router_doc, run
from tests.gateway.support import config_doc, scheduler

PASSWORD = "hunter2-redis-password-0123456789"


def _gateway(**extensions: Any) -> dict[str, Any]:
    doc = config_doc([scheduler("llama", "llama")])
    doc["spec"]["extensions"].update(extensions)
    return doc


@pytest.mark.parametrize(
    ("doc", "status", "field"),
    [
        (
            _gateway(rateLimits={"backend": "redis", "redis": {"url": f"rediss://:{PASSWORD}@cache:6380/0"}}),
            Status.FAIL,
            "spec.extensions.rateLimits.redis.url",
        ),
        (
            _gateway(
                globalHeartbeat={
                    "cluster": "a",
                    "region": "r",
                    "redis": {"url": f"redis://igw:{PASSWORD}@cache:6379/0"},
                }
            ),
            Status.FAIL,
            "spec.extensions.globalHeartbeat.redis.url",
        ),
        (
            router_doc(f"rediss://:{PASSWORD}@cache:6380/0"),
            Status.FAIL,
            "spec.heartbeats.redis.url",
        ),
        (
            _gateway(
                rateLimits={
                    "backend": "redis",
                    "redis": {"url": "rediss://igw@cache:6380/0", "passwordEnv": "REDIS_PASSWORD"},
                }
            ),
            Status.PASS,
            None,
        ),
        (
            router_doc("rediss://:$IGW_REDIS_TOKEN@cache:6380/0"),
            Status.PASS,
            None,
        ),  # the global router stack's
        (router_doc("rediss://:${IGW_REDIS_TOKEN}@cache:6380/0"), Status.PASS, None),
        (_gateway(), Status.PASS, None),
        (  # redis-py reads ?password= as it reads the user-info (s38: it passed)
            _gateway(
                rateLimits={
                    "backend": "redis",
                    "redis": {"url": f"rediss://cache:6380/0?password={PASSWORD}"},
                }
            ),
            Status.FAIL,
            "spec.extensions.rateLimits.redis.url",
        ),
        (router_doc("rediss://cache:6380/0?password=$IGW_REDIS_TOKEN"), Status.PASS, None),
    ],
    ids=[
        "rate-limits",
        "heartbeat-user-and-password",
        "router",
        "password-env",
        "env-reference",
        "braced-reference",
        "no-redis",
        "password-in-query",
        "reference-in-query",
    ],
)
def test_a_password_in_a_redis_url_is_named_by_field(
    doc: dict[str, Any], status: Status, field: str | None
) -> None:
    [result] = of(run([doc], Command.AUDIT), "IGW-AU308")
    assert result.status is status, result.message
    assert PASSWORD not in result.message
    if field is not None:
        # the whole message, advice included: "password: use …" lost its "use" to the redaction (s38)
        assert result.message == f"{field} holds the Redis password (use redis.passwordEnv with a Secret)"


def test_without_either_kind_of_object_the_check_has_nothing_in_scope() -> None:
    [result] = of(run([], Command.AUDIT), "IGW-AU308")
    assert result.status is Status.SKIP
