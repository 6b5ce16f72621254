"""Admission refuses a ``redis.passwordEnv`` the operator's gateway pods would not have: their only
environment is ``spec.podDefaults.env``/``envFrom``, and without the variable every pod exits at start
(``igw serve``: exit 2 naming the field), a crash loop the status did not explain."""

from __future__ import annotations

from typing import Any

import pytest

from igw.operator.admission import admit
from tests.operator.dataplane_support import igwc_object

SECRET_ENV = {
    "name": "IGW_REDIS_PASSWORD",
    "valueFrom": {"secretKeyRef": {"name": "redis", "key": "password"}},
}
LIMITS = {
    "backend": "redis",
    "redis": {"url": "rediss://cache:6379/0", "passwordEnv": "IGW_REDIS_PASSWORD"},
    "default": {"requestsPerSecond": 10},
}
HEARTBEAT = {
    "cluster": "a",
    "region": "r",
    "redis": {"url": "rediss://hb:6380/0", "passwordEnv": "IGW_HB_PASSWORD"},
}


@pytest.mark.parametrize(
    ("spec", "refused"),
    [
        (
            {"extensions": {"rateLimits": LIMITS}},
            ["spec.extensions.rateLimits.redis.passwordEnv: IGW_REDIS_PASSWORD"],
        ),
        ({"extensions": {"rateLimits": LIMITS}, "podDefaults": {"env": [SECRET_ENV]}}, []),
        (
            {
                "extensions": {"rateLimits": LIMITS, "globalHeartbeat": HEARTBEAT},
                "podDefaults": {"env": [SECRET_ENV]},
            },
            ["spec.extensions.globalHeartbeat.redis.passwordEnv: IGW_HB_PASSWORD"],
        ),
        (
            {
                "extensions": {"globalHeartbeat": HEARTBEAT},
                "podDefaults": {"envFrom": [{"secretRef": {"name": "r"}}]},
            },
            [],
        ),
        ({"extensions": {"rateLimits": {**LIMITS, "redis": {"url": "redis://cache:6379/0"}}}}, []),
    ],
    ids=["missing", "from-a-secret", "one-of-two-missing", "env-from-may-hold-it", "no-password-env"],
)
def test_a_password_variable_the_pods_would_not_have_is_refused(
    spec: dict[str, Any], refused: list[str]
) -> None:
    refusal = admit(igwc_object(**spec), [])
    if not refused:
        assert refusal is None
        return
    assert refusal is not None
    assert refusal.reason == "InvalidSpec"
    assert [m.split(" is set by")[0] for m in refusal.messages] == refused
    assert "valueFrom.secretKeyRef" in refusal.message
