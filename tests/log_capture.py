"""A logger whose records are kept in a list, apart from every other logger's (not propagated), for
tests of logging filters such as :class:`igw.gateway.log_throttle.RepeatThrottle`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


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
