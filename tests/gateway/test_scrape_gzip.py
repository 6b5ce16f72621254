"""A pod that compresses its ``/metrics`` answer with gzip although the scraper did not ask for it
(no ``Accept-Encoding``): the page is read as what it holds, within the page size limit, and a
stream that cannot be read fails the scrape with its reason (:mod:`igw.gateway.page_encoding`)."""

from __future__ import annotations

import gzip
import logging
import zlib

import pytest

from igw.gateway.page_encoding import plain_body
from igw.gateway.scrape_client import ScrapeRequestError
from igw.gateway.scraper import MAX_PAGE_BYTES, FilteredPage
from tests.gateway.scrape_support import MetricsPod, scrape_rig


async def test_a_gzip_compressed_page_is_read_as_its_text(caplog: pytest.LogCaptureFixture) -> None:
    """Read as text, the compressed page held none of the routing families: the endpoint stayed in
    scheduling with every signal imputed, four warnings said it did not publish them (one advising
    an upgrade to vLLM >= 0.9.2), and the filter check logged compressed bytes as a sample name."""
    caplog.set_level(logging.INFO, logger="igw.gateway.scraper")
    pod = MetricsPod()
    pod.encoder = gzip.compress
    async with pod.running(), scrape_rig(pod.key) as rig:
        for _ in range(3):
            await rig.scrape()
        m = rig.state.metrics
        assert m is not None
        assert None not in (m.waiting, m.running, m.kv_usage)
        assert rig.state.missing == frozenset()
        assert not rig.state.scrape_failing
        assert isinstance(rig.mode, FilteredPage)  # the filtered answer was checked, and honoured
    logged = [r.getMessage() for r in caplog.records]
    assert not [m for m in logged if "does not publish" in m or "ignores" in m]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (gzip.compress(b"0" * (MAX_PAGE_BYTES + 1)), "larger than"),
        (gzip.compress(b"vllm:num_requests_waiting 1\n")[:-12], "cut short"),
        (b"\x1f\x8b" + b"not a gzip stream", "does not decompress"),
    ],
    ids=["bomb", "truncated", "corrupt"],
)
async def test_a_gzip_stream_that_cannot_be_read_fails_the_scrape(body: bytes, reason: str) -> None:
    """A 16 KB answer that decompresses past the 16 MiB page limit is refused before it is held."""
    pod = MetricsPod("ignore")
    pod.encoder = lambda _: body
    async with pod.running(), scrape_rig(pod.key) as rig:
        await rig.scrape()
        assert rig.state.scrape_failing
        assert rig.state.last_error is not None
        assert reason in rig.state.last_error


def test_a_plain_page_is_returned_as_it_is() -> None:
    page = b"# HELP x y\nvllm:num_requests_waiting 1\n"
    assert plain_body(page, max_bytes=100) is page
    assert plain_body(gzip.compress(page), max_bytes=len(page)) == page
    with pytest.raises(ScrapeRequestError, match="larger than"):
        plain_body(gzip.compress(page), max_bytes=len(page) - 1)
    raw_deflate = zlib.compress(page)  # zlib, not gzip: not recognised, read as it is
    assert plain_body(raw_deflate, max_bytes=100) is raw_deflate
