"""Progress of a fetch: bytes, rate and ETA, as a log line every few seconds and as a JSON file
the caller may read (the operator puts it in the job's status)."""
import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from . import metrics


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def human_seconds(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def directory_bytes(path: Path) -> int:
    """Bytes under `path`, partial files included: how far a download into it has come."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass  # renamed while we looked
    return total


class Progress:
    """Reports `done()` bytes of `total` every `every` seconds until stopped (a context manager)."""

    def __init__(self, source: str, total: int, done: Callable[[], int], log: Callable[[str], None],
                 progress_file: Optional[Path] = None, every: float = 2.0):
        self.source, self.total, self.done, self.log = source, total, done, log
        self.progress_file, self.every = progress_file, every
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._first = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._first = self.done()  # a resumed download: what was there is not this run's rate
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.report(final=exc[0] is None)

    def _run(self):
        while not self._stop.wait(self.every):
            self.report()

    def report(self, final: bool = False):
        done = min(self.done(), self.total) if not final else self.total
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = max(done - (self._first or 0), 0) / elapsed
        eta = (self.total - done) / rate if rate > 0 else None
        pct = 100.0 * done / self.total if self.total else 100.0
        line = f"{self.source}: {human_bytes(done)} of {human_bytes(self.total)} ({pct:.0f}%)"
        line += f", {human_bytes(rate)}/s"
        line += ", done" if final else (f", ETA {human_seconds(eta)}" if eta is not None else "")
        self.log(line)
        state = {"source": self.source, "bytes": done, "totalBytes": self.total,
                 "bytesPerSecond": round(rate), "etaSeconds": None if eta is None else round(eta),
                 "done": final}
        metrics.update(self.source, state)
        if self.progress_file:
            tmp = self.progress_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.progress_file)
