from __future__ import annotations

import pytest
import xxhash

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.plugins import prefix_cache_scorer
from igw.scheduling.plugins.prefix_cache_scorer import STATE_ANY_HIT, PrefixCacheScorer
from igw.scheduling.plugins.prefix_index import PrefixIndex, prefix_hashes
from tests.scheduling.helpers import ctx, ep, req

A = "a" * 64
B = "b" * 64
C = "c" * 64


def test_hash_chain_matches_the_documented_construction() -> None:
    h0 = xxhash.xxh64_intdigest(b"m")
    h1 = xxhash.xxh64_intdigest(A.encode() + h0.to_bytes(8, "little"))
    h2 = xxhash.xxh64_intdigest(B.encode() + h1.to_bytes(8, "little"))
    assert prefix_hashes("m", A + B + "tail", block_chars=64, max_blocks=256) == [h1, h2]


@pytest.mark.parametrize(
    ("text", "block", "max_blocks", "count"),
    [
        pytest.param("x" * 63, 64, 256, 0, id="shorter-than-a-block"),
        pytest.param("x" * 130, 64, 256, 2, id="partial-block-ignored"),
        pytest.param("x" * 6400, 64, 10, 10, id="truncated-to-max-blocks"),
        pytest.param("x" * 128, 16, 256, 8, id="block-size"),
    ],
)
def test_block_counting(text: str, block: int, max_blocks: int, count: int) -> None:
    assert len(prefix_hashes("m", text, block_chars=block, max_blocks=max_blocks)) == count


def test_prefixes_differ_by_model() -> None:
    assert prefix_hashes("m1", A, block_chars=64, max_blocks=9) != prefix_hashes(
        "m2", A, block_chars=64, max_blocks=9
    )


@pytest.mark.parametrize(
    ("sent", "query", "expected"),
    [
        pytest.param({"e1": A + B + C}, A + B + C, [1.0, 0.0], id="full-hit"),
        pytest.param({"e1": A + B}, A + B + C, [2 / 3, 0.0], id="partial-hit"),
        pytest.param({"e1": A, "e2": A + B}, A + B + C, [1 / 3, 2 / 3], id="longest-prefix-wins"),
        pytest.param({"e1": B + C}, A + B + C, [0.0, 0.0], id="chain-breaks-on-first-block"),
        pytest.param({}, "short", [0.0, 0.0], id="short-prompt-scores-0"),
    ],
)
def test_prefix_scores(sent: dict[str, str], query: str, expected: list[float]) -> None:
    scorer = PrefixCacheScorer(auto_tune=False)
    eps = {k: ep(k) for k in ("e1", "e2")}
    for key, text in sent.items():
        scorer.on_picked(ctx(req(text)), eps[key])
    c = ctx(req(query))
    assert scorer.score(c, [eps["e1"], eps["e2"]]) == pytest.approx(expected)
    assert c.state[STATE_ANY_HIT] == any(expected)


def test_blocks_cached_under_one_salt_are_no_hit_under_another() -> None:
    """The engine keeps blocks of different ``cache_salt`` apart (a tenant's, under
    ``prefixCacheIsolation``, or a client's own): so does the index."""
    scorer = PrefixCacheScorer(auto_tune=False)
    eps = {k: ep(k) for k in ("e1", "e2")}
    scorer.on_picked(ctx(req(A + B, cache_salt="tenant-a")), eps["e1"])
    scorer.on_picked(ctx(req(A + B)), eps["e2"])
    for salt, expected in (("tenant-a", [1.0, 0.0]), ("tenant-b", [0.0, 0.0]), (None, [0.0, 1.0])):
        c = ctx(req(A + B, cache_salt=salt))
        assert scorer.score(c, [eps["e1"], eps["e2"]]) == pytest.approx(expected), salt


def test_block_size_auto_tuned_from_cache_config_info() -> None:
    scorer = PrefixCacheScorer(auto_tune=True)
    e = ep("e1", block_size=4)  # 4 tokens x 4 chars = 16-char blocks
    c = ctx(req("y" * 64))
    scorer.score(c, [e])
    assert len(c.state["prefix.hashes"]) == 4


def test_lru_sized_from_num_gpu_blocks_evicts_oldest() -> None:
    scorer = PrefixCacheScorer(auto_tune=True)
    e = ep("e1", block_size=16, num_gpu_blocks=2)  # 64-char blocks, room for 2
    scorer.on_picked(ctx(req(A + B)), e)
    scorer.on_picked(ctx(req(C)), e)  # C evicts A
    assert scorer.index.size("e1") == 2
    assert scorer.score(ctx(req(A + B)), [e]) == [0.0]


def test_removed_endpoint_is_forgotten() -> None:
    scorer = PrefixCacheScorer(auto_tune=False)
    e = ep("e1")
    scorer.on_picked(ctx(req(A)), e)
    scorer.on_endpoints_removed(["e1"])
    assert scorer.score(ctx(req(A)), [e]) == [0.0]


def test_index_eviction_keeps_other_holders() -> None:
    index = PrefixIndex()
    index.insert("e1", [1, 2], capacity=10)
    index.insert("e2", [1], capacity=10)
    index.remove_endpoint("e1")
    assert index.match([1, 2]) == {"e2": 1}


def _blocks(n: int, tag: str) -> str:
    """``n`` distinct 64-character blocks (unique per ``tag``)."""
    return "".join(f"{tag}{i:08d}".ljust(64, ".") for i in range(n))


def test_a_block_budget_is_shared_equally_by_the_endpoints_the_index_holds() -> None:
    scorer = PrefixCacheScorer(auto_tune=False, lru_capacity=100)
    e1, e2 = ep("e1"), ep("e2")
    scorer.on_picked(ctx(req(_blocks(50, "a"))), e1)
    assert scorer.index.size("e1") == 50  # no budget: the endpoint's own capacity
    scorer.bound_index(40)
    scorer.on_picked(ctx(req(_blocks(10, "b"))), e1)
    assert scorer.index.size("e1") == 40  # alone in the index: all of the budget
    scorer.on_picked(ctx(req(_blocks(30, "c"))), e2)
    assert scorer.index.size("e2") == 20  # two endpoints: 20 blocks each
    scorer.on_picked(ctx(req(_blocks(1, "d"))), e1)
    assert scorer.index.size("e1") == 20
    assert scorer.index.entries() == 40
    # the newest prefixes are kept: e1's last pick and the tail of e2's
    assert scorer.score(ctx(req(_blocks(1, "d"))), [e1, e2]) == [1.0, 0.0]
    scorer.bound_index(None)
    scorer.on_picked(ctx(req(_blocks(30, "e"))), e1)
    assert scorer.index.size("e1") == 50  # unbounded again: back to the capacity


def test_the_index_keeps_to_the_budget_between_picks() -> None:
    """A tighter budget, and an endpoint joining the index, cut the others' shares at once: an
    endpoint picked rarely used to keep its larger share until its own next pick."""
    scorer = PrefixCacheScorer(auto_tune=False, lru_capacity=100)
    e1, e2 = ep("e1"), ep("e2")
    scorer.on_picked(ctx(req(_blocks(60, "a"))), e1)
    scorer.bound_index(40)
    assert scorer.index.size("e1") == 40  # the budget set: cut now, the oldest blocks first
    assert scorer.score(ctx(req(_blocks(60, "a"))), [e1]) == [0.0]  # the chain's first block went
    scorer.on_picked(ctx(req(_blocks(30, "b"))), e2)
    assert (scorer.index.size("e1"), scorer.index.size("e2")) == (20, 20)  # e2 joined: e1 cut too
    scorer.learn_pick("e3", {"h": list(range(1, 30)), "c": 1000})
    assert [scorer.index.size(k) for k in ("e1", "e2", "e3")] == [13, 13, 13]
    assert scorer.index.entries() <= 40
    scorer.bound_index(None)  # lifting the bound evicts nothing
    assert [scorer.index.size(k) for k in ("e1", "e2", "e3")] == [13, 13, 13]


def test_a_learned_pick_keeps_to_the_budget_too() -> None:
    scorer = PrefixCacheScorer(auto_tune=False)
    scorer.bound_index(8)
    scorer.learn_pick("e1", {"h": list(range(1, 30)), "c": 1000})
    assert scorer.index.size("e1") == 8
    scorer.bound_index(1)
    scorer.learn_pick("e2", {"h": [100, 101], "c": 1000})
    assert scorer.index.size("e2") == 1  # never below one block


def test_factory_reports_bad_parameters_with_path() -> None:
    with pytest.raises(SchedulerConfigError) as err:
        prefix_cache_scorer.factory("p", {"blockSize": 0, "autoTune": "yes"}, "plugins[1].parameters")
    assert err.value.problems == (
        "plugins[1].parameters.blockSize: must be >= 1, got 0",
        "plugins[1].parameters.autoTune: must be true or false, got 'yes'",
    )


@pytest.mark.parametrize(
    ("parameters", "block_chars"),
    [
        pytest.param({"blockSizeTokens": 5}, 20, id="gie-v1.4-tokens"),
        pytest.param({"blockSize": 20}, 20, id="gie-v1.1-characters"),
        pytest.param({"hashBlockSize": 20}, 20, id="gie-v1.0-characters"),
        pytest.param({"blockSizeTokens": 5, "blockSize": 64, "hashBlockSize": 128}, 20, id="newest-wins"),
        pytest.param({"blockSize": 20, "hashBlockSize": 128}, 20, id="blockSize-over-hashBlockSize"),
        pytest.param({}, 64, id="default"),
    ],
)
def test_block_size_is_read_under_each_name_gie_has_used(
    parameters: dict[str, int], block_chars: int
) -> None:
    """GIE v1.4+ documents ``blockSizeTokens`` (its config-text guide: ``blockSizeTokens: 5``), v1.1-v1.3
    ``blockSize`` (characters), v1.0 ``hashBlockSize``: a file written for any of them cuts prompts
    into the same blocks here, with no warning."""
    plugin = prefix_cache_scorer.factory("p", {"autoTune": False, **parameters}, "plugins[0].parameters")
    assert plugin.block_chars == block_chars
    c = ctx(req("y" * 200))
    plugin.score(c, [ep("e1")])
    assert len(c.state["prefix.hashes"]) == 200 // block_chars


def test_max_prefix_tokens_to_match_bounds_the_blocks_by_the_block_size_in_use() -> None:
    """GIE v1.5's ``maxPrefixTokensToMatch``: when set it wins over ``maxPrefixBlocksToMatch``, as
    ``tokens / blockSizeTokens`` blocks of the block size in use, auto-tuned included."""
    params = {"maxPrefixTokensToMatch": 40, "maxPrefixBlocksToMatch": 2, "blockSizeTokens": 5}
    plugin = prefix_cache_scorer.factory("p", params, "plugins[0].parameters")
    c = ctx(req("y" * 400))
    plugin.score(c, [ep("e1")])  # no cache_config_info: 5-token (20-char) blocks, 40 / 5 = 8 blocks
    assert len(c.state["prefix.hashes"]) == 8
    c = ctx(req("y" * 400))
    plugin.score(c, [ep("e1", block_size=10)])  # auto-tuned to 10-token blocks: 40 / 10 = 4 blocks
    assert len(c.state["prefix.hashes"]) == 4


def test_a_pick_given_back_takes_back_only_the_blocks_it_placed() -> None:
    """A pick whose request never reached its pod (flow control left it queued, its client went
    away): the pod keeps what earlier requests brought it and loses what only this pick placed, so
    the next request with that prompt is not sent to a pod that never saw it."""
    scorer = PrefixCacheScorer(auto_tune=False)
    e1, e2 = ep("e1"), ep("e2")
    scorer.on_picked(ctx(req(A + B, request_id="sent")), e1)
    scorer.on_picked(ctx(req(A + B + C, request_id="unsent")), e1)
    assert scorer.on_not_sent("unsent", "e1", sent_to=None)
    assert scorer.score(ctx(req(A + B + C)), [e1, e2]) == pytest.approx([2 / 3, 0.0])
    assert not scorer.on_not_sent("unsent", "e1", sent_to=None)  # once only
    assert not scorer.on_not_sent("sent", "e2", sent_to=None)  # not the pod it was picked for


def test_a_pick_given_back_after_another_insert_at_its_pod_is_kept() -> None:
    """A later request sent to the same pod may have brought the same blocks: they stay."""
    scorer = PrefixCacheScorer(auto_tune=False)
    e1, e2 = ep("e1"), ep("e2")
    scorer.on_picked(ctx(req(A + B, request_id="unsent")), e1)
    scorer.learn_pick("e1", {"h": prefix_hashes("base", A + B, block_chars=64, max_blocks=256), "c": 100})
    assert not scorer.on_not_sent("unsent", "e1", sent_to=None)
    assert scorer.score(ctx(req(A + B)), [e1, e2]) == pytest.approx([1.0, 0.0])


def test_a_steered_pick_is_placed_on_the_pod_it_was_sent_to() -> None:
    scorer = PrefixCacheScorer(auto_tune=False)
    e1, e2 = ep("e1"), ep("e2")
    scorer.on_picked(ctx(req(A, request_id="early")), e1)
    scorer.on_picked(ctx(req(A + B, request_id="steered")), e1)
    assert scorer.on_not_sent("steered", "e1", sent_to=e2)
    assert scorer.score(ctx(req(A + B)), [e1, e2]) == pytest.approx([0.5, 1.0])
    assert scorer.on_not_sent("steered", "e2", sent_to=None)  # and given back from there later
    assert scorer.score(ctx(req(A + B)), [e1, e2]) == pytest.approx([0.5, 0.0])
    assert scorer.index.endpoint_count() == 1  # e2 held nothing else: it left the index
