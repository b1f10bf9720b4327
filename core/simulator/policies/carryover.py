"""Samples that outlive a rollout (partial and streaming policies): where each one's
request chain resumes, the request arrays of resumed chains, and the stream of fresh
prompt groups a policy launches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.simulator.requests import step_request_arrays
from core.simulator.workload import StepWorkload

_CHAIN_KEYS = ("prefill", "context", "decode", "gap")


@dataclass(slots=True)  # slots: millions of these are read per replay
class Pending:
    """A sample of a launched group: where its request chain resumes, or done."""

    step_idx: int
    sample: int
    req: int  # index into the step's request arrays of the turn to resume
    generated: int  # tokens of that turn already generated
    done: bool = False


class ChainPool:
    """Builds request chains for pending samples (fresh or resumed)."""

    def __init__(self, workload: list[StepWorkload]):
        self.workload = workload
        self.arrays: dict[int, dict[str, np.ndarray]] = {}
        self.per_sample: dict[int, dict[str, np.ndarray]] = {}

    def arrays_of(self, i: int) -> dict:
        if i not in self.arrays:
            self.arrays[i] = step_request_arrays(self.workload[i])
        return self.arrays[i]

    def samples_of(self, i: int) -> dict[str, np.ndarray]:
        """Per sample of step i: prompt, total (prompt + response) and generated tokens,
        and the group boundaries (`slices`)."""
        if i not in self.per_sample:
            w = self.workload[i]
            a = self.arrays_of(i)
            gen = w.response_len if not w.is_multiturn else np.add.reduceat(a["decode"], a["first"])
            self.per_sample[i] = {
                "prompt": w.prompt_len,
                "total": w.total_len,
                "generated": np.asarray(gen, dtype=np.int64),
                "slices": w.group_slices(),
            }
        return self.per_sample[i]

    def lookup(self, items: list[Pending], *keys: str) -> list[np.ndarray]:
        """`samples_of(...)[key]` of each item, for each key."""
        step, sample = _fields(items)[:2]
        out = [np.zeros(len(items), np.int64) for _ in keys]
        for s in np.unique(step).tolist():
            m = step == s
            per = self.samples_of(s)
            for o, key in zip(out, keys):
                o[m] = per[key][sample[m]]
        return out

    def chain_end(self, it: Pending) -> int:
        a = self.arrays_of(it.step_idx)
        return int(a["first"][it.sample + 1]) if it.sample + 1 < a["first"].size else int(a["sample"].size)

    def chains(self, items: list[Pending]) -> dict[str, np.ndarray]:
        """The requests of `items`' remaining turns, item by item, as arrays: prefill,
        context, decode, gap, next (index into these arrays, -1 at a chain's end), owner
        (item index), src (index into the step's request arrays); per item: first, last
        (its first and last request) and recompute (tokens re-prefilled on resuming: the
        context plus the partial response of a turn resumed mid-way, else 0)."""
        n = len(items)
        step, sample, req, gen = _fields(items)
        stop = np.empty(n, np.int64)
        for s in np.unique(step).tolist():
            m = step == s
            a = self.arrays_of(s)
            stop[m] = np.r_[a["first"][1:], a["sample"].size][sample[m]]
        length = np.maximum(stop - req, 0)
        first = np.cumsum(length) - length
        owner = np.repeat(np.arange(n), length)
        src = np.repeat(req, length) + (np.arange(int(length.sum())) - np.repeat(first, length))
        out = _gather(self, np.repeat(step, length), src)
        resumed = first[gen > 0]
        g = gen[gen > 0]
        out["context"][resumed] += g
        out["prefill"][resumed] = out["context"][resumed]  # recompute prompt + partial response
        out["decode"][resumed] = np.maximum(1, out["decode"][resumed] - g)
        nxt = np.arange(1, src.size + 1)
        last = first + length - 1
        nxt[last] = -1
        recompute = np.zeros(n, np.int64)
        recompute[gen > 0] = out["prefill"][resumed]
        out.update(next=nxt, owner=owner, src=src, first=first, last=last, recompute=recompute)
        return out


def _fields(items: list[Pending]) -> np.ndarray:
    """step_idx, sample, req, generated of each item: a (4, n) array (one list per
    field: faster than converting a list of tuples)."""
    out = np.empty((4, len(items)), np.int64)
    out[0] = [it.step_idx for it in items]
    out[1] = [it.sample for it in items]
    out[2] = [it.req for it in items]
    out[3] = [it.generated for it in items]
    return out


def _gather(pool: ChainPool, step_of_req: np.ndarray, src: np.ndarray) -> dict[str, np.ndarray]:
    out = {k: np.zeros(src.size, np.float64 if k == "gap" else np.int64) for k in _CHAIN_KEYS}
    for s in np.unique(step_of_req).tolist():
        m = step_of_req == s
        a = pool.arrays_of(s)
        for k in _CHAIN_KEYS:
            out[k][m] = a[k][src[m]]
    return out


class FreshStream:
    """The prompt groups a policy launches fresh, in trace order; past the trace's end
    they cycle through it again (a stand-in for the dataset's further prompts)."""

    def __init__(self, workload: list[StepWorkload], pool: ChainPool):
        self.pool = pool
        self.order = [(i, g) for i, w in enumerate(workload) for g in range(w.n_groups)]
        self.next = 0

    def __len__(self) -> int:
        return len(self.order)

    def take(self, k: int) -> list[list[Pending]]:
        """The next `k` groups, each a list of fresh pending samples."""
        out = []
        for _ in range(k if self.order else 0):
            si, g = self.order[self.next % len(self.order)]
            self.next += 1
            sl = self.pool.samples_of(si)["slices"]
            first = self.pool.arrays_of(si)["first"]
            lo, hi = int(sl[g]), int(sl[g + 1])
            out.append([Pending(si, s, f, 0) for s, f in zip(range(lo, hi), first[lo:hi].tolist())])
        return out


def group_tokens(pool: ChainPool, groups: list[list[Pending]]) -> tuple[np.ndarray, int, int]:
    """Training sequence lengths (prompt + response) of the samples of `groups`, their
    generated tokens, and their count."""
    items = [it for grp in groups for it in grp]
    if not items:
        return np.zeros(0, np.int64), 0, 0
    total, generated = pool.lookup(items, "total", "generated")
    return total, int(generated.sum()), len(items)
