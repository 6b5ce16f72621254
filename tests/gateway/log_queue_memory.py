"""``python -m tests.gateway.log_queue_memory``: memory that access records queued behind a stalled
log stream hold, at the default bound (``DEFAULT_MAX_QUEUED_BYTES``), one line per score-table size.

The stream's write blocks; 50,000 records (``tests.gateway.test_log_buffer``'s, as the observer
leaves them) are emitted; ``tracemalloc`` measures what the queue kept."""

from __future__ import annotations

import gc
import tracemalloc

from igw.gateway.log_buffer import DEFAULT_MAX_QUEUED_BYTES, BatchedLineHandler
from igw.gateway.redaction import RedactingFormatter
from tests.gateway.log_streams import StalledStream
from tests.gateway.test_log_buffer import _access_record

EMITTED = 50_000


def main() -> None:
    for rows in (1, 4, 16):
        stream = StalledStream()
        handler = BatchedLineHandler(stream, interval_s=0.01)
        handler.setFormatter(RedactingFormatter("%(message)s"))
        try:
            handler.emit_line("first")
            assert stream.entered.wait(30)
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(EMITTED):
                handler.emit_deferred(_access_record(i, rows))
            held = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            print(
                f"scored endpoints {rows:2d}: kept {EMITTED - handler.dropped:6d}, "
                f"dropped {handler.dropped:6d}, "
                f"traced {held / 2**20:.1f} MiB (bound {DEFAULT_MAX_QUEUED_BYTES / 2**20:.0f} MiB, "
                f"estimate {handler.queued_bytes() / 2**20:.1f} MiB)"
            )
        finally:
            stream.release.set()
            handler.close()


if __name__ == "__main__":
    main()
