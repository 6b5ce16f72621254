"""The ``igw top`` screen: pools, pods and models of one gateway, refreshed every interval.

Drawn with textual (tables that resize with the terminal, a headless test pilot, SVG screenshots).
Every refresh takes one :class:`~igw.top.view.Scrape` and compares it with the previous one
(:func:`~igw.top.view.build_view`); a failed scrape keeps the last rows on screen and says what
failed in the status line, so a port-forward that drops for a second does not blank the view.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import ClassVar, Final, Protocol

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Header, Static

from igw.top.view import ModelRow, PodRow, PoolRow, Scrape, ScrapeError, TopView, build_view

POOL_COLUMNS: Final = ("pool", "model", "ready", "pods", "avg KV", "queue", "picks/s")
POD_COLUMNS: Final = (
    "pool",
    "pod",
    "KV",
    "queue",
    "running",
    "in flight",
    "adapters",
    "pick share",
    "scrape age",
    "flags",
)
MODEL_COLUMNS: Final = (
    "model",
    "req/s",
    "5xx",
    "out tok/s",
    "TTFT p50",
    "TTFT p90",
    "TTFT p99",
    "latency p99",
)
DASH: Final = "-"


class ScrapeSource(Protocol):
    """Where the screen's snapshots come from (:class:`~igw.top.source.GatewaySource` over HTTP)."""

    base_url: str

    async def scrape(self) -> Scrape: ...

    async def close(self) -> None: ...


def percent(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.1f}%"


def number(value: float | None, digits: int = 0) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def milliseconds(seconds: float | None) -> str:
    return DASH if seconds is None else f"{1000 * seconds:.0f} ms"


def pool_cells(row: PoolRow) -> tuple[str, ...]:
    return (
        row.pool,
        row.model or DASH,
        str(row.ready_pods),
        str(row.pods),
        percent(row.kv_average),
        number(row.queue_total),
        number(row.picks_per_s, 1),
    )


def pod_cells(row: PodRow) -> tuple[str, ...]:
    return (
        row.pool,
        row.endpoint,
        percent(row.kv),
        number(row.queue),
        number(row.running),
        number(row.inflight),
        DASH if row.adapters is None else (",".join(row.adapters) or "none"),
        percent(row.pick_share),
        DASH if row.scrape_age_s is None else f"{row.scrape_age_s:.2f} s",
        " ".join(row.flags) or "ok",
    )


def model_cells(row: ModelRow) -> tuple[str, ...]:
    return (
        row.model,
        number(row.requests_per_s, 1),
        percent(row.error_ratio),
        number(row.output_tokens_per_s, 1),
        milliseconds(row.ttft_p50_s),
        milliseconds(row.ttft_p90_s),
        milliseconds(row.ttft_p99_s),
        milliseconds(row.latency_p99_s),
    )


class TopApp(App[None]):
    """The live view; ``source`` is scraped every ``interval_s`` seconds."""

    TITLE = "igw top"
    CSS = """
    .title { text-style: bold; padding: 1 0 0 1; }
    #status { padding: 0 1; }
    DataTable { height: auto; max-height: 16; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def __init__(
        self,
        source: ScrapeSource,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.source = source
        self.interval_s = interval_s
        self._clock = clock
        self._previous: Scrape | None = None
        self._busy = False
        self.refreshes = 0
        """Successful scrapes drawn so far (tests and ``--screenshot`` wait on it)."""
        self.view: TopView | None = None
        self.last_error: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"{self.source.base_url}: connecting", id="status")
        for table_id, title in (("pools", "Pools"), ("pods", "Pods"), ("models", "Models")):
            yield Static(title, classes="title")
            yield DataTable(id=table_id, cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        for table_id, columns in (("pools", POOL_COLUMNS), ("pods", POD_COLUMNS), ("models", MODEL_COLUMNS)):
            self.query_one(f"#{table_id}", DataTable).add_columns(*columns)
        self.set_interval(self.interval_s, self.refresh_view)
        self.call_later(self.refresh_view)

    async def refresh_view(self) -> None:
        """Scrape once and redraw; skipped while the previous scrape is still out."""
        if self._busy:
            return
        self._busy = True
        try:
            scrape = await self.source.scrape()
            view = build_view(self._previous, scrape)
        except ScrapeError as exc:
            self.last_error = str(exc)
            self._status(f"scrape failed: {exc} (showing the last good view)")
            return
        finally:
            self._busy = False
        self._previous, self.view, self.last_error = scrape, view, None
        self.refreshes += 1
        self._draw(view)
        stamp = time.strftime("%H:%M:%S", time.localtime(self._clock()))
        interval = DASH if view.interval_s is None else f"{view.interval_s:.1f} s"
        self._status(f"{stamp}  rates over {interval}")

    def _status(self, text: str) -> None:
        self.query_one("#status", Static).update(f"{self.source.base_url}  {text}")

    def _draw(self, view: TopView) -> None:
        self._fill("pools", [pool_cells(r) for r in view.pools])
        self._fill("pods", [pod_cells(r) for r in view.pods])
        self._fill("models", [model_cells(r) for r in view.models])

    def _fill(self, table_id: str, rows: Sequence[tuple[str, ...]]) -> None:
        table = self.query_one(f"#{table_id}", DataTable)
        table.clear()
        table.add_rows(rows)

    async def on_unmount(self) -> None:
        await self.source.close()
