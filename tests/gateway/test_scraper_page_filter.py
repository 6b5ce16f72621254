"""The scraper asks for the routing families alone where the server honours ``name[]`` (real loopback).

A server that honours the filter is scraped with it every time; one that ignores it (whole page), or
answers it with an empty page or an error, is recognised on the first scrape and read whole from
then on; a failed scrape, or a filtered page whose missing families change, makes the scraper check
again. Engines without the filter (TGI, generic) are never asked with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from urllib.parse import parse_qs, urlsplit

import pytest

from igw import engines
from igw.engines import MetricFamilies
from igw.gateway.metrics_parser import VLLM, FamilyStarts, ParsedPage, parse_page
from igw.gateway.page_filter import FILTER_PARAM, filter_names, filter_path, unrequested_sample
from igw.gateway.page_template import PageReader
from igw.gateway.scraper import PAGE_ABSENT, WHOLE_PAGE, FilteredPage
from igw.sim.metrics_page import restrict_page
from tests.compiled.tree import skip_compiled
from tests.gateway.scrape_support import PAGES, MetricsPod, scrape_rig

ROUTING = dataclasses.replace(VLLM, lora=None)


def _filtered(target: str) -> bool:
    return FILTER_PARAM in parse_qs(urlsplit(target).query)


def _whole_page_metrics() -> object:
    return parse_page(PAGES[0], ROUTING).metrics


async def test_a_pod_that_honours_the_filter_is_always_asked_with_it() -> None:
    async with MetricsPod("honour").running() as pod, scrape_rig(pod.key) as r:
        for _ in range(3):
            await r.scrape()
        assert [_filtered(t) for t in pod.targets] == [True, True, True]
        assert r.mode == FilteredPage(frozenset())
        assert r.state.metrics == _whole_page_metrics()
        assert r.state.missing == frozenset()
        names = parse_qs(urlsplit(pod.targets[0]).query)[FILTER_PARAM]
        assert names == list(filter_names(ROUTING))
        assert "vllm:lora_requests_info" not in names  # no adapter can reach this scheduler


@pytest.mark.parametrize(
    ("behaviour", "targets"),
    [
        ("ignore", [True, False, False]),  # the whole page came back: used as it is, then asked for
        ("empty", [True, False, False, False]),  # nothing came back: the whole page, once more
        ("reject", [True, False, False, False]),
    ],
)
async def test_a_pod_that_does_not_honour_the_filter_is_read_whole_after_one_check(
    behaviour: str, targets: list[bool], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.gateway.scraper")
    async with MetricsPod(behaviour).running() as pod, scrape_rig(pod.key) as r:
        key = pod.key
        for _ in range(3):
            await r.scrape()
        assert [_filtered(t) for t in pod.targets] == targets
        assert r.mode == WHOLE_PAGE
        assert not r.state.scrape_failing
        assert r.state.metrics == _whole_page_metrics()
        assert r.state.missing == frozenset()
    notes = [rec.getMessage() for rec in caplog.records if "scraping the whole page" in rec.getMessage()]
    assert len(notes) == 1
    assert key in notes[0]


async def test_a_filtered_pod_that_changes_is_checked_again() -> None:
    async with MetricsPod("honour").running() as pod, scrape_rig(pod.key) as r:
        await r.scrape()
        assert r.mode == FilteredPage(frozenset())
        pod.behaviour = "empty"  # e.g. restarted behind a proxy that drops the query
        await r.scrape()  # the empty page misses every family: the filter is no longer trusted
        assert r.mode is None
        await r.scrape()
        assert r.mode == WHOLE_PAGE
        assert r.state.metrics == _whole_page_metrics()
        assert not r.state.scrape_failing


async def test_a_failed_scrape_makes_the_next_one_check_the_filter_again() -> None:
    async with MetricsPod("ignore").running() as pod, scrape_rig(pod.key) as r:
        await r.scrape()
        assert r.mode == WHOLE_PAGE
        pod.down = True
        pod.drop_connections()
        await r.scrape()
        assert r.state.scrape_failing
        assert r.mode is None
        pod.down, pod.behaviour = False, "honour"
        await r.scrape()
        assert r.mode == FilteredPage(frozenset())
        assert not r.state.scrape_failing


async def test_frozen_detection_works_on_filtered_pages() -> None:
    async with (
        MetricsPod("honour").running() as pod,
        scrape_rig(pod.key, routing={"staleThreshold": "200ms"}) as r,
    ):
        pod.pages = PAGES[:1]  # one page forever: a wedged metrics thread
        await r.scrape()
        r.state.picks += 1  # a request the page never reflects
        await r.scrape()
        await asyncio.sleep(0.25)
        await r.scrape()
        assert r.state.page.frozen
        assert all(_filtered(t) for t in pod.targets)


def test_only_engines_with_the_filter_are_asked_with_it() -> None:
    assert filter_path(engines.TGI.families) is None
    assert filter_path(engines.generic_engine(queue="q", running="r").families) is None
    for engine in (engines.VLLM, engines.SGLANG):
        path = filter_path(engine.families)
        assert path is not None
        names = parse_qs(urlsplit(path).query)[FILTER_PARAM]
        assert set(engine.families.activity) <= set(names)  # frozen pages stay detectable


def test_unrequested_samples_reveal_a_server_that_ignored_the_filter() -> None:
    names = frozenset(filter_names(ROUTING))
    assert unrequested_sample(restrict_page(PAGES[0], names), names) is None
    assert unrequested_sample(PAGES[0], names) is not None
    assert unrequested_sample("", names) is None


@skip_compiled(
    "igw.gateway.page_template",
    "the test counts readings by replacing PageReader.read; compiled callers call the native method directly",
)
async def test_an_unchanged_page_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    read = PageReader.read

    def counting(
        self: PageReader, text: str, families: MetricFamilies, starts: FamilyStarts | None = None
    ) -> ParsedPage:
        calls.append(len(text))
        return read(self, text, families, starts)

    monkeypatch.setattr(PageReader, "read", counting)  # counts each reading of a page, then reads it
    async with MetricsPod("honour").running() as pod, scrape_rig(pod.key) as r:
        pod.pages = PAGES[:1]  # an idle pod: the same page every time
        await r.scrape()
        first_scraped_at = r.state.scraped_at
        parses = len(calls)
        await r.scrape()
        await r.scrape()
        assert len(calls) == parses  # the same bytes: not parsed again
        assert r.state.scraped_at is not None
        assert first_scraped_at is not None
        assert r.state.scraped_at > first_scraped_at  # but the scrape counts as fresh
        pod.pages = PAGES
        await r.scrape()  # a moved counter: parsed again
        assert len(calls) == parses + 1
        assert r.state.metrics == _whole_page_metrics()


async def test_a_pod_without_a_metrics_page_gets_one_request_per_scrape_until_it_has_one() -> None:
    async with MetricsPod("absent").running() as pod, scrape_rig(pod.key) as r:
        for _ in range(3):
            await r.scrape()
        # The first scrape tries both forms; after that only the whole page is asked for.
        assert [_filtered(t) for t in pod.targets] == [True, False, False, False]
        assert r.mode == PAGE_ABSENT
        assert r.state.scrape_failing
        assert r.state.last_error == "GET /metrics answered 404"
        pod.behaviour = "honour"  # e.g. SGLang restarted with --enable-metrics
        await r.scrape()
        assert not r.state.scrape_failing
        assert r.mode is None  # the page appeared: the next scrape checks the filter
        await r.scrape()
        assert r.mode == FilteredPage(frozenset())
        assert [_filtered(t) for t in pod.targets][4:] == [False, True]
