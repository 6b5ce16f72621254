"""The ``igw top`` screen: pools, pods, models (and, with the debug token, the last scheduling
decisions) of one gateway, refreshed every interval.

Drawn with textual (tables that resize with the terminal, a headless test pilot, SVG screenshots).
Every refresh takes one :class:`~igw.top.view.Scrape` and compares it with the previous one
(:func:`~igw.top.view.build_view`); a failed scrape keeps the last rows on screen and says what
failed in the status line, so a port-forward that drops for a second does not blank the view.
While the gateway does not answer at all (refused, reset, timed out) the next attempt waits twice
as long as the last, up to :data:`MAX_BACKOFF_S`, and the status line says when it comes; the first
answer brings the interval back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import ClassVar, Final, Protocol

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.widgets import DataTable, Footer, Header, Static

from igw.top.view import (
    DecisionRow,
    GatewayFailing,
    GatewayUnreachable,
    ModelRow,
    PodRow,
    PoolRow,
    Scrape,
    ScrapeError,
    TopView,
    build_view,
)

POOL_COLUMNS: Final = ("pool", "model", "ready", "pods", "stale", "avg KV", "queue", "picks/s", "retries/s")
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
DECISION_COLUMNS: Final = (
    "time",
    "pool",
    "model",
    "outcome",
    "chosen",
    "candidates",
    "removed",
    "leading scorer",
    "decision",
)
DASH: Final = "-"
ASKED_ALONE_MARK: Final = "(asked alone)"
"""Beside a decision's pod in the ``chosen`` column when the entry is an ``asked_alone`` pick: a
canary continuation's search sent the request to that pod of another version's pool, which picked
among it alone (:meth:`igw.gateway.decision_log.DecisionLog.record`)."""
MAX_CELL_CHARS: Final = 96
"""The most characters a cell shows (room for a model id such as ``org/name``, an endpoint, a pod
label value); a longer one is cut with an ellipsis, so one hostile name cannot widen its column by
kilobytes."""
MAX_ERROR_CHARS: Final = 400
"""The most characters of one error the status line (and ``--screenshot``'s message) shows."""
MAX_BACKOFF_S: Final = 10.0
"""Longest wait between two attempts to reach a gateway that does not answer (or the interval, if
longer)."""


class ScrapeSource(Protocol):
    """Where the screen's snapshots come from (:class:`~igw.top.source.GatewaySource` over HTTP)."""

    base_url: str

    async def scrape(self) -> Scrape: ...

    async def close(self) -> None: ...


def shown(text: str, limit: int = MAX_CELL_CHARS) -> str:
    """``text`` as the terminal may draw it: every character Python does not call printable (C0 and
    C1 controls such as ESC, CR, backspace, NUL; bidi overrides such as U+202E and other format
    characters; line and paragraph separators) written as its visible escape (``\\x1b``,
    ``\\u202e``), and the result cut to ``limit`` characters with an ellipsis.

    Every cell and the status line pass through here: they quote what the gateway's pages say (pod,
    model, adapter and pool names, label values, decision fields, errors naming them), and a pod or
    caller can put anything there. Until session s49 such names reached the terminal unchanged: an
    OSC 52 sequence in an endpoint label (a clipboard write, on a terminal that honours it),
    ``ESC[2J``, U+202E. (Markup is not the concern here: cells are :class:`~rich.text.Text` and the
    status line has markup off.)"""
    if len(text) <= limit and text.isprintable():
        return text
    head = text[: limit + 1]  # the part that can be drawn: escaping a 10 KiB name whole is waste
    visible = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in head)
    if len(text) > limit or len(visible) > limit:
        return visible[: limit - 1] + "…"
    return visible


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
        number(row.stale_endpoints),
        percent(row.kv_average),
        number(row.queue_total),
        number(row.picks_per_s, 1),
        number(row.retries_per_s, 1),
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


def decision_cells(row: DecisionRow) -> tuple[str, ...]:
    return (
        time.strftime("%H:%M:%S", time.localtime(row.at)),
        row.pool,
        row.model or DASH,
        row.outcome,
        # the pod a continuation asked alone is where the request went, whatever was chosen
        f"{row.asked_alone} {ASKED_ALONE_MARK}" if row.asked_alone is not None else row.chosen or DASH,
        str(row.candidates),
        str(row.removed),
        row.leading_scorer or DASH,
        DASH if row.decision_us is None else f"{row.decision_us:.0f} µs",
    )


TABLES: Final = (
    ("pools", "Pools", POOL_COLUMNS),
    ("pods", "Pods", POD_COLUMNS),
    ("models", "Models", MODEL_COLUMNS),
    ("decisions", "Recent decisions (why this pod)", DECISION_COLUMNS),
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
        show_decisions: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.source = source
        self.interval_s = interval_s
        self.show_decisions = show_decisions
        self._clock = clock
        self._previous: Scrape | None = None
        self.unreachable = 0
        """Attempts in a row that got no answer (the backoff's exponent)."""
        self.refreshes = 0
        """Successful scrapes drawn so far (tests and ``--screenshot`` wait on it)."""
        self.view: TopView | None = None
        self.last_error: str | None = None
        """The last failed scrape's error, or after a good one why its decisions could not be read."""
        self.refused = False
        """The last scrape failed with an answer that asking again will not change (a 4xx status, a
        page that is not the gateway's): ``--screenshot`` ends at once instead of retrying it."""

    def compose(self) -> ComposeResult:
        yield Header()
        # markup off: the status quotes URLs and errors, whose brackets are not styles ([REDACTED])
        yield Static(f"{self.source.base_url}: connecting", id="status", markup=False)
        for table_id, title, _ in self._tables():
            yield Static(title, classes="title")
            yield DataTable(id=table_id, cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        for table_id, _, columns in self._tables():
            self.query_one(f"#{table_id}", DataTable).add_columns(*columns)
        self.call_later(self._refresh_and_schedule)

    def _tables(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        return TABLES if self.show_decisions else TABLES[:-1]

    def next_delay_s(self) -> float:
        """Seconds until the next scrape: the interval, doubled for each unanswered attempt in a row
        up to :data:`MAX_BACKOFF_S`."""
        if not self.unreachable:
            return self.interval_s
        backoff: float = self.interval_s * 2.0**self.unreachable
        return max(self.interval_s, min(backoff, MAX_BACKOFF_S))

    async def _refresh_and_schedule(self) -> None:
        """One refresh, then the next one timed from its end (one timer at a time: a scrape that
        takes longer than the interval delays the next instead of overlapping it)."""
        try:
            await self.refresh_view()
        finally:
            with contextlib.suppress(NoMatches):
                if self.is_running:
                    self.set_timer(self.next_delay_s(), self._refresh_and_schedule)

    async def refresh_view(self) -> None:
        """Scrape once and redraw."""
        try:
            scrape = await self.source.scrape()
            view = build_view(self._previous, scrape)
        except ScrapeError as exc:
            self.last_error = shown(str(exc), MAX_ERROR_CHARS)
            self.unreachable = self.unreachable + 1 if isinstance(exc, GatewayUnreachable) else 0
            self.refused = not isinstance(exc, GatewayUnreachable | GatewayFailing)
            retry = f"; retrying in {self.next_delay_s():.1f} s" if self.unreachable else ""
            with contextlib.suppress(NoMatches):  # the screen may have closed meanwhile
                kept = "no view yet" if self.view is None else "showing the last good view"
                self._status(f"scrape failed: {self.last_error} ({kept}{retry})")
            return
        self.unreachable = 0
        self.refused = False
        # the decisions asked for but not read: the rest is drawn, the status line says why
        decisions_error = (
            None if scrape.decisions_error is None else shown(scrape.decisions_error, MAX_ERROR_CHARS)
        )
        self._previous, self.view, self.last_error = scrape, view, decisions_error
        stamp = time.strftime("%H:%M:%S", time.localtime(self._clock()))
        interval = DASH if view.interval_s is None else f"{view.interval_s:.1f} s"
        missing = "" if decisions_error is None else f"  decisions not shown: {decisions_error}"
        try:
            self._draw(view)
            self._status(f"{stamp}  rates over {interval}{missing}")
        except NoMatches:  # the screen closed while the scrape was out: nothing left to draw on
            return
        self.refreshes += 1

    def _status(self, text: str) -> None:
        self.query_one("#status", Static).update(f"{self.source.base_url}  {text}")

    def _draw(self, view: TopView) -> None:
        self._fill("pools", [pool_cells(r) for r in view.pools])
        self._fill("pods", [pod_cells(r) for r in view.pods])
        self._fill("models", [model_cells(r) for r in view.models])
        if self.show_decisions:
            self._fill("decisions", [decision_cells(r) for r in view.decisions])

    def _fill(self, table_id: str, rows: Sequence[tuple[str, ...]]) -> None:
        table = self.query_one(f"#{table_id}", DataTable)
        cursor = table.cursor_row  # keep the operator's place across refreshes
        table.clear()
        # Each cell as plain text: a string cell is read as markup, and what the cells show comes
        # from the gateway's pages (pod and model names, label values, decision reasons): a value
        # such as ``[link=...]`` or ``[b]`` was drawn as a link or a style instead of as itself; and
        # each made drawable first (:func:`shown`: no escape sequence reaches the terminal).
        table.add_rows([tuple([Text(shown(cell)) for cell in row]) for row in rows])
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1), animate=False)

    async def on_unmount(self) -> None:
        await self.source.close()
