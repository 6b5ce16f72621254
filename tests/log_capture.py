"""A logger whose records are kept in a list, apart from every other logger's (not propagated), for
tests of logging filters such as :class:`igw.gateway.log_throttle.RepeatThrottle`; and the one line
a record writes through the access logs' batched handler (both tiers' access-log tests)."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterator

from igw.gateway.log_buffer import BatchedLineHandler


@contextlib.contextmanager
def captured_records(name: str) -> Iterator[tuple[logging.Logger, list[logging.LogRecord]]]:
    """The logger ``name`` and the list its records land in while the block runs."""
    logger = logging.getLogger(name)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield logger, records
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def written_line(handler: BatchedLineHandler, stream: io.StringIO, emit: Callable[[], None]) -> str:
    """The one line ``emit`` wrote to ``stream`` through ``handler`` (flushed: its lines are built on
    the writer thread), ``stream`` emptied for the next."""
    emit()
    handler.flush()
    [line] = stream.getvalue().splitlines()
    stream.seek(0)
    stream.truncate()
    return line
