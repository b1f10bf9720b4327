"""What one upload may expand to, checked while it is read, so a process ingesting it
stays under a stated memory ceiling whatever the upload.

INGEST_MEMORY_CEILING_MB is that ceiling for the default bounds (resident memory of the
ingesting process, measured on the worst cases in tests/backend/api/test_service_bounds.py):

- a file may expand (once decompressed) to `max_file_bytes` (384 MiB): Kineto traces
  are decoded whole (about 2x their size in memory);
- a JSON record — one line of a JSON-lines file, or a whole compact PolyTrace document —
  may hold `jsonl.MAX_RECORD_BYTES` (16 MiB, so at most ~8M samples in one batch);
- a step may hold `max_samples_per_step` samples (8M): per-step summaries read a step's
  samples back at once;
- and a file `max_samples_per_file` samples (20M), which bounds what one file adds to
  the database and how long it takes.

Raising a bound raises the ceiling with it. Each refusal is an InputError naming the
file, so the upload is refused whole (a 4xx inline, a failed job with the reason). The
bytes read also count against what is left of the team's storage quota, when given (an
archive's declared sizes may lie): past it, a QuotaExceeded (a 413).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
from typing import IO, cast

import numpy as np

from backend.formats.base import InputError, Source
from backend.ingest.uploads import Room
from backend.settings import Settings

INGEST_MEMORY_CEILING_MB = 1024


class MeteredStream:
    """A source's binary stream that counts the bytes read (into `counter`, shared with
    the processes Kineto files are read ahead in: backend/formats/kineto_ahead.py) and
    refuses a file expanding past `limit` bytes — before holding them: a read of
    everything reads at most limit + 1 bytes."""

    def __init__(self, raw: IO[bytes], counter, name: str, limit: int, quota: Room | None = None):
        self._raw, self._counter, self._name, self._limit = raw, counter, name, limit
        self._read = 0
        self._quota, self._room = quota, (quota.remaining if quota is not None else None)

    def _take(self, data: bytes) -> bytes:
        self._read += len(data)
        self._counter.value += len(data)
        if self._room is not None and self._counter.value > self._room:
            assert self._quota is not None
            raise self._quota.refusal(self._counter.value)  # the upload expands past the quota
        if self._read > self._limit:
            raise InputError(
                self._name,
                f"the file expands to more than {self._limit:,} bytes (RLVR_MAX_FILE_BYTES): split it into smaller files",
            )
        return data

    def _size(self, n: int) -> int:
        room = self._limit - self._read + 1
        return room if n is None or n < 0 or n > room else n

    def read(self, n: int = -1) -> bytes:
        return self._take(self._raw.read(self._size(n)))

    def readline(self, n: int = -1) -> bytes:
        return self._take(self._raw.readline(self._size(n)))

    def __iter__(self):
        return iter(self.readline, b"")

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._raw.close()


class Bounds:
    """The bounds of one ingestion: bytes read so far (for progress) and the samples of
    the file being read."""

    def __init__(self, settings: Settings, quota: Room | None = None):
        self.quota = quota  # what the team has left: the bytes read count against it
        self.max_file_bytes = settings.max_file_bytes
        self.max_samples_per_file = settings.max_samples_per_file
        self.max_samples_per_step = settings.max_samples_per_step
        self.bytes_read = mp.RawValue("q", 0)
        self._file: str | None = None
        self._file_samples = 0

    @property
    def current_file(self) -> str | None:
        """The file being read (the one the latest batches come from)."""
        return self._file

    def sources(self, sources: list[Source]) -> list[Source]:
        """The sources, each opening as a MeteredStream."""
        return [Source(s.name, functools.partial(self._open, s), s.size) for s in sources]

    def _open(self, source: Source) -> IO[bytes]:
        if source.name != self._file:  # readers open the file they read next (samples come from it)
            self._file, self._file_samples = source.name, 0
        # read/readline/iteration metered; every other IO attribute delegates (__getattr__)
        return cast(
            IO[bytes], MeteredStream(source.open(), self.bytes_read, source.name, self.max_file_bytes, self.quota)
        )

    def count_samples(self, steps: np.ndarray, step_counts: dict[int, int]) -> None:
        """After a samples batch (its rows' `steps`; `step_counts`: samples per step so
        far): refuse the file or the step that went past its bound."""
        self._file_samples += len(steps)
        name = self._file or "upload"
        if self._file_samples > self.max_samples_per_file:
            raise InputError(
                name,
                f"more than {self.max_samples_per_file:,} samples in one file (RLVR_MAX_SAMPLES_PER_FILE): "
                "split it into smaller files",
            )
        over = [s for s in np.unique(steps).tolist() if step_counts.get(s, 0) > self.max_samples_per_step]
        if over:
            raise InputError(
                name,
                f"step {over[0]} has more than {self.max_samples_per_step:,} samples (RLVR_MAX_SAMPLES_PER_STEP)",
                field="step",
            )
