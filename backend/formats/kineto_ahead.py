"""An upload's Kineto files read ahead, several at once, in forked processes.

A Kineto file is one JSON document, decoded whole: reading one rank's file is CPU work
from the first byte to the last (decode, columns, the kept events), and the files of a
job are independent. So where forking is safe (`core.forking`) and the files are big
enough to pay for it, each file is read by `read_kineto` in a pool of processes, one
file per task, while this process stores the batches of the files before it. The
upload's reader loop (`backend.formats.read_sources`) takes each file's batches in its
own turn, so rows, kept-event files and metadata are the same as reading them in order
(`tests/test_kineto_ahead.py`), and a bad file fails the upload with the same error.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor

from backend.formats.base import ReadResult, Source, TableBatch
from backend.formats.kineto import merge_kineto_metadata, read_kineto
from backend.formats.kineto_events import EVENTS_DIR_STATE
from core.forking import fork_workers

MIN_BYTES = 64 * 1024**2  # below this, a file reads in well under a second: not worth a fork
MAX_WORKERS = 2  # each holds one decoded file (~4x its size) in memory

_FILES: list[Source] = []  # set in the parent before the fork, inherited by the children


def _read_file(index: int, kept_index: int, events_dir: str | None) -> tuple[list[TableBatch], dict, list[str]]:
    local = ReadResult()
    if events_dir is not None:
        local.state[EVENTS_DIR_STATE] = events_dir
        local.state["kineto_files_kept"] = kept_index  # so it writes events-<kept_index>
    batches = list(read_kineto(_FILES[index], local))
    return batches, local.info.metadata.get("kineto", {}), local.skipped


class KinetoReadAhead:
    """The pool reading `sources` (an upload's Kineto files, in the order the reader loop
    takes them); `reader` stands in for `read_kineto` for those sources."""

    def __init__(self, sources: list[Source], result: ReadResult, workers: int):
        global _FILES
        self._result = result
        _FILES = list(sources)
        first_kept = result.state.get("kineto_files_kept", 0)
        events_dir = result.state.get(EVENTS_DIR_STATE)
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork"))
        self._futures: dict[int, Future] = {
            id(source): self._pool.submit(_read_file, i, first_kept + i, events_dir) for i, source in enumerate(sources)
        }
        _FILES = []  # the children have their copy

    def reader(self, source: Source, result: ReadResult) -> Iterator[TableBatch]:
        future = self._futures.pop(id(source), None)
        if future is None:  # not one of ours (cannot happen from read_sources): read it here
            yield from read_kineto(source, result)
            return
        batches, kineto, skipped = future.result()  # a reader's InputError is raised here
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
    """A read-ahead pool for these Kineto files, or None where reading them in turn is as
    good (one file, small files, or forking not safe here)."""
    workers = min(fork_workers(MAX_WORKERS), len(sources))
    if workers < 2 or sum(s.size or 0 for s in sources) < MIN_BYTES:
        return None
    return KinetoReadAhead(sources, result, workers)
