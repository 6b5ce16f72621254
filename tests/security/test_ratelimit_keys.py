"""Rate-limit keys are one to one in their parts: no tenant, (tenant, model) pair or reservation
shares a bucket or a hold with another (properties, and the collisions of before session s44 on a
real Redis)."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from igw.security.ratelimit.keys import (
    escape,
    join,
    model_key,
    model_key_parts,
    reservation_key,
    split,
    tenant_key,
    unescape,
)
from igw.security.ratelimit.limiter import RateLimiter
from igw.security.ratelimit.registry import BACKENDS
from igw.security.settings import RateLimitSettings
from tests.security.helpers import ManualClock, RedisServer

# printable ASCII (what a tenant claim may hold) with the separator and escape characters likelier
PARTS = st.lists(
    st.sampled_from([chr(c) for c in range(0x20, 0x7F)] + ["|", "%", "%7C", "%25", "|model="])
).map("".join)
SCOPES = st.sampled_from([(), ("tier2",), ("tier2", "model=")])


def bucket_key(spec: tuple[str, ...]) -> str:
    """A tenant's own buckets (one part) or a (tenant, model) pair's (two)."""
    return tenant_key(spec[0]) if len(spec) == 1 else model_key(spec[0], spec[1])


@example(("team-a|model=llama",), ("team-a", "llama"))  # the tier-2 finding
@example(("a|model=b", "c"), ("a", "b|model=c"))
@given(
    st.one_of(st.tuples(PARTS), st.tuples(PARTS, PARTS)), st.one_of(st.tuples(PARTS), st.tuples(PARTS, PARTS))
)
def test_distinct_tenants_and_pairs_never_share_a_bucket(a: tuple[str, ...], b: tuple[str, ...]) -> None:
    assert (bucket_key(a) == bucket_key(b)) == (a == b)


@given(PARTS, PARTS)
def test_a_pairs_key_reads_back_and_a_tenants_is_no_pair(tenant: str, model: str) -> None:
    assert model_key_parts(model_key(tenant, model)) == (tenant, model)
    assert model_key_parts(tenant_key(tenant)) is None
    assert unescape(escape(tenant)) == tenant
    assert "|" not in tenant_key(tenant)


@example("r|tier2", (), "r", ("tier2",))  # a gateway's id naming the router's hold
@example("r|tier2", ("tier2",), "r", ("tier2", "model="))
@given(PARTS, SCOPES, PARTS, SCOPES)
def test_distinct_reservations_never_share_a_hold(
    a: str, scope_a: tuple[str, ...], b: str, scope_b: tuple[str, ...]
) -> None:
    same = reservation_key(a, *scope_a) == reservation_key(b, *scope_b)
    assert same == ((a, scope_a) == (b, scope_b))


@given(st.lists(PARTS, min_size=1, max_size=4))
def test_joined_parts_split_back(parts: list[str]) -> None:
    assert split(join(*parts)) == parts


def test_plain_names_keep_the_keys_they_had() -> None:
    """A tenant, model or id without ``%`` or ``|`` keeps its key across the upgrade (in-flight
    buckets and reservations carry on); only those holding one moved."""
    assert tenant_key("team-a") == "team-a"
    assert model_key("team-a", "llama") == "team-a|model=llama"
    assert reservation_key("resp_1") == "resp_1"
    assert reservation_key("resp_1", "tier2", "model=") == "resp_1|tier2|model="
    assert tenant_key("team-a|model=llama") == "team-a%7Cmodel=llama"


async def test_a_gateways_reservation_never_meets_the_routers_on_one_redis(redis_server: RedisServer) -> None:
    """A cluster gateway and the global router sharing a Redis key prefix: a response the gateway
    holds under id ``r|tier2`` (an id an engine may let its client choose) and the router's hold for
    response ``r`` are two holds, each settled to its own tenant. Before session s44 both were
    ``held:r|tier2:hold``: the router's hold was refused (the first holder keeps a key) and its
    settlement credited the gateway's tenant."""
    clock = ManualClock()
    settings = RateLimitSettings.from_mapping(
        {"backend": "redis", "redis": {"url": redis_server.url}, "default": {"tokensPerMinute": 600}}
    )
    gateway = RateLimiter(settings=settings, backend=BACKENDS["redis"](settings, clock), clock=clock)
    router = RateLimiter(
        settings=settings,
        backend=BACKENDS["redis"](settings, clock),
        clock=clock,
        reservation_scope=("tier2",),
    )
    try:
        await gateway.account(
            tenant="mallory", prompt_tokens=0, completion_tokens=0, reserved_tokens=500, reservation="r|tier2"
        )
        await router.account(
            tenant="alice", prompt_tokens=0, completion_tokens=0, reserved_tokens=400, reservation="r"
        )
        assert await router.release("r") == ("alice", 400)
        assert await gateway.release("r|tier2") == ("mallory", 500)
    finally:
        await gateway.close()
        await router.close()
