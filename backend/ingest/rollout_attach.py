"""A rollout dump attached to a trace of the same job that already has its samples (a
packed-lengths run: lengths, ranks, groups, no text): the dump's samples are matched to
the trace's, so each sample is counted once and gets its text.

Matching, per step: a dumped sample takes an unmatched sample of the trace with the same
validation flag, prompt_len and response_len (token counts from the run's tokenizer);
among equal candidates the first in (group, sample) order. Samples with the same lengths
are interchangeable for every length figure, so the choice among them changes none. A
matched sample keeps its key, ranks and group and gets the dump's reward and repetition
flag; its text and extras are stored under its key. A dumped sample that matches none
fails the attach, naming the step and lengths (a dump of another run, or another
tokenizer). Steps the trace has no samples of take the dump's samples as they are.

Length units are never mixed: a dump read without a tokenizer (characters) cannot join
a trace with token lengths, nor the reverse.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from backend.formats.base import InputError, ReadResult, TableBatch
from backend.store.models import Sample

KEY = ("step", "group_idx", "sample_idx")


def trace_length_unit(meta: dict, n_samples: int) -> str | None:
    """The unit of a trace's sample lengths (None: it has no samples)."""
    unit = ((meta or {}).get("rollouts") or {}).get("length_unit")
    return unit or ("tokens" if n_samples else None)


def check_units(trace_unit: str | None, result: ReadResult) -> None:
    new = (
        ((result.info.metadata.get("rollouts") or {}).get("length_unit"))
        if "rollouts" in result.info.metadata
        else None
    )
    if trace_unit is not None and new is not None and new != trace_unit:
        hint = " (give the run's tokenizer.json with the dump)" if new == "characters" else ""
        raise InputError(
            "upload",
            f"the dump's lengths are {new}, the trace's are {trace_unit}: they cannot be mixed{hint}",
            field="tokenizer",
        )


class DumpMatcher:
    """Rewrites a dump's batches onto the trace's existing samples (see the module doc)."""

    def __init__(self, conn: Connection, trace_id: int, result: ReadResult, trace_unit: str | None):
        self.conn, self.trace_id, self.result, self.trace_unit = conn, trace_id, result, trace_unit
        self.pool: dict[int, dict] = {}  # step -> {(validate, prompt_len, response_len): [keys]}
        self.moved: dict[tuple, tuple] = {}  # dump key -> the trace's key
        self.matched = 0

    def batches(self, batches: Iterator[TableBatch]) -> Iterator[TableBatch]:
        for batch in batches:
            if batch.table == "samples" and "repeat_period" in batch.columns:
                check_units(self.trace_unit, self.result)
                rest = self._match(batch)
                if rest is not None:
                    yield rest
            elif batch.table in ("sample_texts", "sample_extras") and self.moved:
                yield self._rekey(batch)
            else:
                yield batch

    def _existing(self, step: int) -> dict | None:
        """The trace's unmatched samples of a step by (validate, lengths); None: no samples."""
        if step not in self.pool:
            rows = self.conn.execute(
                select(
                    Sample.group_idx,
                    Sample.sample_idx,
                    Sample.validate,
                    Sample.prompt_len,
                    Sample.response_len,
                    Sample.repeat_period,
                )
                .where(Sample.trace_id == self.trace_id, Sample.step == step)
                .order_by(Sample.group_idx, Sample.sample_idx)
            ).all()
            pool: dict = defaultdict(list)
            for g, s, v, p, r, repeat in rows:
                if repeat is None:  # not matched to a dumped sample yet
                    pool[(bool(v), int(p), int(r))].append((step, int(g), int(s)))
            self.pool[step] = dict(pool) if rows else None  # type: ignore[assignment]
        return self.pool[step]

    def _match(self, batch: TableBatch) -> TableBatch | None:
        cols = batch.columns
        steps = np.asarray(cols["step"])
        keep = np.ones(len(steps), dtype=bool)
        updates = []
        for i, step in enumerate(steps.tolist()):
            pool = self._existing(step)
            if pool is None:
                continue  # a step the trace has no samples of: the dump's samples go in
            if self.result.info.length_unit != "tokens":
                raise InputError(
                    "upload",
                    f"step {step}: matching dumped samples to the trace's needs token lengths: give the run's tokenizer.json",
                    field="tokenizer",
                )
            wanted = (bool(cols["validate"][i]), int(cols["prompt_len"][i]), int(cols["response_len"][i]))
            if not pool.get(wanted):
                raise InputError(
                    "upload",
                    f"step {step}: a dumped sample (prompt_len {wanted[1]}, response_len {wanted[2]}) matches no sample of "
                    "the trace (another run, or another tokenizer?)",
                    field="response_len",
                )
            target = pool[wanted].pop(0)
            self.moved[(step, int(cols["group_idx"][i]), int(cols["sample_idx"][i]))] = target
            reward = float(cols["reward"][i])
            updates.append(
                {"k": target, "reward": None if reward != reward else reward, "repeat": int(cols["repeat_period"][i])}
            )
            keep[i] = False
        for u in updates:
            step, g, s = u["k"]
            self.conn.execute(
                update(Sample)
                .where(
                    Sample.trace_id == self.trace_id, Sample.step == step, Sample.group_idx == g, Sample.sample_idx == s
                )
                .values(reward=u["reward"], repeat_period=u["repeat"])
            )
        self.matched += len(updates)
        if keep.all():
            return batch
        if not keep.any():
            return None
        return TableBatch(
            batch.table,
            {
                k: (np.asarray(v)[keep] if isinstance(v, np.ndarray) else [x for x, f in zip(v, keep) if f])
                for k, v in cols.items()
            },
        )

    def _rekey(self, batch: TableBatch) -> TableBatch:
        cols = dict(batch.columns)
        keys = [self.moved.get(k, k) for k in zip(*(np.asarray(cols[c]).tolist() for c in KEY))]
        for j, c in enumerate(KEY):
            cols[c] = np.asarray([k[j] for k in keys], dtype=np.int32)
        return TableBatch(batch.table, cols)


def merge_rollouts(old: dict | None, new: dict | None) -> dict | None:
    """metadata.rollouts after an attach: files and counts added up, extra keys merged;
    the index is rebuilt after (`indexed` dropped)."""
    if not new:
        return old
    if not old:
        return {k: v for k, v in new.items() if k != "indexed"}
    out = {**old, **{k: v for k, v in new.items() if k not in ("files", "validation_files", "samples", "extra_keys")}}
    for key in ("files", "validation_files"):
        out[key] = list(old.get(key) or []) + list(new.get(key) or [])
    out["samples"] = int(old.get("samples") or 0) + int(new.get("samples") or 0)
    out["extra_keys"] = {**(new.get("extra_keys") or {}), **(old.get("extra_keys") or {})}
    out.pop("indexed", None)
    return out
