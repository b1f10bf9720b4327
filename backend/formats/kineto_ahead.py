"""An upload's Kineto files read ahead in forked processes while this one stores them.

Reading one rank's Kineto file is CPU work from the first byte to the last (decode,
columns, the kept events), and the files of a job are independent. So where forking is
safe (`core.forking`), on two CPUs or more, reader processes (one per CPU, at most
`MAX_READERS`) read the files by `read_kineto` while this process stores the batches of
the files before them. The upload's reader loop
(`backend.formats.read_sources`) takes each file's batches in its own turn, so rows,
kept-event files and metadata are the same as reading them in turn
(`tests/backend/formats/test_kineto_ahead.py`), and a bad file fails the upload with the same error.

At most two readers: a file being read takes about twice its size (the reader decodes
it a chunk of events at a time), and an upload's memory should stay under 1 GB for
the generated 8-rank trace of bench/kineto.py (8 x 137 MB). `rlvr-explorer ingest` of
it, measured on one day: one reader decoding whole files 48.2 s, 0.74 GB; two readers
decoding in chunks 36.4 s, 0.76 GB (two readers decoding whole files took 1.2 GB).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future

from backend.formats.base import ReadResult, Source, TableBatch
from backend.formats.kineto import merge_kineto_metadata, read_kineto
from backend.formats.kineto_events import EVENTS_DIR_STATE
from core.forking import fork_workers, forked_pool

MAX_READERS = 2
MIN_BYTES = 64 * 1024**2  # below this the files read in well under a second: not worth a fork

_FILES: list[Source] = []  # set in the parent before the fork, inherited by the readers


def _read_file(index: int, kept_index: int, events_dir: str | None) -> tuple[list[TableBatch], dict, list[str]]:
    local = ReadResult()
    if events_dir is not None:
        local.state[EVENTS_DIR_STATE] = events_dir
        local.state["kineto_files_kept"] = kept_index  # so it writes events-<kept_index>
    batches = list(read_kineto(_FILES[index], local))
    return batches, local.info.metadata.get("kineto", {}), local.skipped


class KinetoReadAhead:
    """`readers` processes reading `sources` (an upload's Kineto files, in the order the
    reader loop takes them) up to `readers` + 1 files ahead of it; `reader` stands in for
    `read_kineto` for those sources, taken in that order."""

    def __init__(self, sources: list[Source], result: ReadResult, readers: int):
        global _FILES
        _FILES = list(sources)
        first_kept = result.state.get("kineto_files_kept", 0)
        events_dir = result.state.get(EVENTS_DIR_STATE)
        self._pool = forked_pool(readers)  # the readers stop when this process dies
        self._todo = [(i, first_kept + i, events_dir) for i in range(len(sources))]
        self._ids = [id(s) for s in sources]
        self._futures: dict[int, Future] = {}
        # files handed to the readers at most: one being read by each, one read and waiting here
        self._window = readers + 1
        self._submit()  # the first submit forks the readers (fork pools start theirs at once)
        _FILES = []  # the readers have their copy

    def _submit(self) -> None:
        while self._todo and len(self._futures) < self._window:
            args = self._todo.pop(0)
            self._futures[self._ids[args[0]]] = self._pool.submit(_read_file, *args)

    def reader(self, source: Source, result: ReadResult) -> Iterator[TableBatch]:
        future = self._futures.pop(id(source))  # taken in order: always read ahead by now
        batches, kineto, skipped = future.result()  # a reader's InputError is raised here
        self._submit()
        if EVENTS_DIR_STATE in result.state:
            result.state["kineto_files_kept"] = result.state.get("kineto_files_kept", 0) + 1
        merge_kineto_metadata(result, kineto)
        result.skipped.extend(skipped)
        yield from batches

    def close(self) -> None:
        """Stop reading; waits for the files being read, so no kept-event file is written
        after the upload's clean-up."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def kineto_read_ahead(sources: list[Source], result: ReadResult) -> KinetoReadAhead | None:
    """Reader processes for these Kineto files, or None where reading them in turn is as
    good: one file, files known to be small (a source of unknown size, such as a .gz
    inside an archive, counts as big), one CPU, or forking not safe here."""
    readers = fork_workers(MAX_READERS)
    if len(sources) < 2 or readers < 2:
        return None
    if all(s.size is not None for s in sources) and sum(s.size or 0 for s in sources) < MIN_BYTES:
        return None
    return KinetoReadAhead(sources, result, readers)
