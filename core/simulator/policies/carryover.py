"""Samples that outlive a rollout (partial and streaming policies): where each one's
request chain resumes, the request arrays of resumed chains, and the stream of fresh
prompt groups a policy launches.

A pending sample is an id into `ChainPool`'s columns (struct of arrays: millions are
taken per replay); a group is an array of its samples' ids, and groups are held as one
array of ids with each group's bounds in it (`Groups`: a launch holds thousands)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from core.simulator.requests import request_starts, step_request_arrays
from core.simulator.workload import StepWorkload

_CHAIN_KEYS = ("prefill", "context", "decode", "gap")

Group = np.ndarray  # the sample ids of one launched prompt group
_TRAITS = ("prompt", "total", "generated")  # of the trace's sample, kept per id (`lookup`)
_COLS = ("step", "req", "generated", "done", "stop") + tuple("trait_" + k for k in _TRAITS)


class Groups:
    """Prompt groups as one array of sample ids and each group's bounds in it: group g
    is `ids[bounds[g]:bounds[g + 1]]`. `extend` appends in place into spare capacity,
    never over ids already handed out, so a group taken earlier stays valid."""

    __slots__ = ("_ids", "_bounds", "n")

    def __init__(self, ids: np.ndarray | None = None, bounds: np.ndarray | None = None) -> None:
        self._ids = np.zeros(0, np.int64) if ids is None else ids
        self._bounds = np.zeros(1, np.int64) if bounds is None else bounds
        self.n = self._bounds.size - 1

    @classmethod
    def of(cls, groups: list[Group]) -> Groups:
        """From separate arrays, in their order."""
        if not groups:
            return cls()
        sizes = np.fromiter((g.size for g in groups), np.int64, len(groups))
        return cls(np.concatenate(groups).astype(np.int64, copy=False), _bounds(sizes))

    @property
    def ids(self) -> np.ndarray:
        """The ids of every group, group after group."""
        return self._ids[: self._bounds[self.n]]

    @property
    def bounds(self) -> np.ndarray:
        return self._bounds[: self.n + 1]

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, g: int) -> Group:
        return self._ids[self._bounds[g] : self._bounds[g + 1]]

    def __iter__(self) -> Iterator[Group]:
        cut = self.bounds.tolist()
        return (self._ids[a:b] for a, b in zip(cut[:-1], cut[1:]))

    def pick(self, idx: np.ndarray) -> Groups:
        """Groups `idx`, in that order (a new array of ids)."""
        lo, hi = self._bounds[idx], self._bounds[np.asarray(idx) + 1]
        size = hi - lo
        bounds = _bounds(size)
        at = np.arange(int(bounds[-1])) + np.repeat(lo - bounds[:-1], size)
        return Groups(self._ids[at], bounds)

    def extend(self, other: Groups) -> None:
        """Append `other`'s groups (capacity doubled when short: amortised)."""
        n, m = self.n, other.n
        end, add = int(self._bounds[n]), int(other._bounds[m])
        if end + add > self._ids.size:
            self._ids = _grown(self._ids, end, end + add)
        if n + m + 1 > self._bounds.size:
            self._bounds = _grown(self._bounds, n + 1, n + m + 1)
        self._ids[end : end + add] = other.ids
        self._bounds[n + 1 : n + m + 1] = other.bounds[1:] + end
        self.n = n + m

    def __add__(self, other: Groups) -> Groups:
        return Groups(
            np.concatenate([self.ids, other.ids]), np.concatenate([self.bounds, other.bounds[1:] + self.n_ids])
        )

    @property
    def n_ids(self) -> int:
        return int(self._bounds[self.n])


def _bounds(sizes: np.ndarray) -> np.ndarray:
    """Bounds of groups of `sizes`: 0, then their running total."""
    out = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _grown(a: np.ndarray, used: int, need: int) -> np.ndarray:
    """A new array of at least `need` (twice `a`'s size) holding `a[:used]`."""
    new = np.zeros(max(need, 2 * a.size), a.dtype)
    new[:used] = a[:used]
    return new


class ChainPool:
    """Builds request chains for pending samples (fresh or resumed), and holds them:
    per sample id, `step` (its trace step), `req` (index into the
    step's request arrays of the turn to resume), `generated` (tokens of that turn
    already generated), `done`, `stop` (the end of its chain in the step's request
    arrays) and its trace sample's `samples_of` values (`lookup`)."""

    step: np.ndarray
    req: np.ndarray
    generated: np.ndarray
    done: np.ndarray
    stop: np.ndarray

    def __init__(self, workload: list[StepWorkload]):
        self.workload = workload
        self.arrays: dict[int, dict[str, np.ndarray]] = {}
        self.per_sample: dict[int, dict[str, np.ndarray]] = {}
        self.n = 0  # samples taken so far
        self._alloc(1024)

    def _alloc(self, cap: int) -> None:
        old = getattr(self, "step", None)
        for name in _COLS:
            new = np.zeros(cap, bool if name == "done" else np.int32)
            if old is not None:
                new[: self.n] = getattr(self, name)[: self.n]
            setattr(self, name, new)

    def new(self, step: int, s0: int, s1: int) -> np.ndarray:
        """Ids of fresh pending samples s0..s1-1 of step `step` (from their first turn)."""
        samples = slice(s0, s1)  # a range: slices, not gathers
        lo, hi = self.n, self.n + s1 - s0
        if hi > self.step.size:
            self._alloc(max(hi, 2 * self.step.size))
        a, per = self.arrays_of(step), self.samples_of(step)
        self.step[lo:hi] = step
        self.req[lo:hi] = a["first"][samples]
        self.stop[lo:hi] = per["stop"][samples]
        for key in _TRAITS:
            getattr(self, "trait_" + key)[lo:hi] = per[key][samples]
        self.n = hi
        return np.arange(lo, hi)

    def arrays_of(self, i: int) -> dict:
        if i not in self.arrays:
            self.arrays[i] = step_request_arrays(self.workload[i])
        return self.arrays[i]

    def samples_of(self, i: int) -> dict[str, np.ndarray]:
        """Per sample of step i: prompt, total (prompt + response) and generated tokens,
        the end of its requests (`stop`), and the group boundaries (`slices`)."""
        if i not in self.per_sample:
            w = self.workload[i]
            a = self.arrays_of(i)
            gen = w.response_len if not w.is_multiturn else np.add.reduceat(a["decode"], a["first"])
            self.per_sample[i] = {
                "prompt": w.prompt_len,
                "total": w.total_len,
                "generated": np.asarray(gen, dtype=np.int64),
                "slices": w.group_slices(),
                "stop": request_starts(a)[1:],  # where its requests end
            }
        return self.per_sample[i]

    def lookup(self, ids: np.ndarray, *keys: str) -> list[np.ndarray]:
        """`samples_of(...)[key]` of each sample id, for each key."""
        return [getattr(self, "trait_" + key)[ids].astype(np.int64) for key in keys]

    def chains(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The requests of samples `ids`' remaining turns, sample by sample, as arrays:
        prefill, context, decode, gap, next (index into these arrays, -1 at a chain's
        end), owner (position in `ids`), src (index into the step's request arrays); per
        sample: first, last (its first and last request) and recompute (tokens
        re-prefilled on resuming: the context plus the partial response of a turn
        resumed mid-way, else 0)."""
        n = ids.size
        step, stop = self.step[ids], self.stop[ids].astype(np.int64)
        req, gen = self.req[ids].astype(np.int64), self.generated[ids].astype(np.int64)
        length = np.maximum(stop - req, 0)
        if (length == 1).all():  # one request each (single-turn): nothing to expand
            first = last = owner = np.arange(n)
            src, nxt = req, np.full(n, -1, np.int64)
            out = _gather(self, step, src)
        else:
            first = np.cumsum(length) - length
            owner = np.repeat(np.arange(n), length)
            src = np.repeat(req, length) + (np.arange(int(length.sum())) - np.repeat(first, length))
            out = _gather(self, np.repeat(step, length), src)
            nxt = np.arange(1, src.size + 1)
            last = first + length - 1
            nxt[last] = -1
        mid = gen > 0  # resumed mid-turn
        resumed, g = first[mid], gen[mid]
        out["context"][resumed] += g
        out["prefill"][resumed] = out["context"][resumed]  # recompute prompt + partial response
        out["decode"][resumed] = np.maximum(1, out["decode"][resumed] - g)
        recompute = np.zeros(n, np.int64)
        recompute[mid] = out["prefill"][resumed]
        out.update(next=nxt, owner=owner, src=src, first=first, last=last, recompute=recompute)
        return out


def _gather(pool: ChainPool, step_of_req: np.ndarray, src: np.ndarray) -> dict[str, np.ndarray]:
    dtypes = {k: np.float64 if k == "gap" else np.int64 for k in _CHAIN_KEYS}
    steps = np.flatnonzero(np.bincount(step_of_req)).tolist() if src.size else []
    if len(steps) == 1:  # one step's samples (a launch of fresh groups, mostly): no masks
        a = pool.arrays_of(steps[0])
        return {k: a[k][src].astype(dtypes[k]) for k in _CHAIN_KEYS}
    out = {k: np.zeros(src.size, dtypes[k]) for k in _CHAIN_KEYS}
    for s in steps:
        at = np.flatnonzero(step_of_req == s)
        a, from_ = pool.arrays_of(s), src[at]
        for k in _CHAIN_KEYS:
            out[k][at] = a[k][from_]
    return out


class FreshStream:
    """The prompt groups a policy launches fresh, in trace order; past the trace's end
    they cycle through it again (a stand-in for the dataset's further prompts)."""

    def __init__(self, workload: list[StepWorkload], pool: ChainPool):
        self.pool = pool
        sizes = np.array([w.n_groups for w in workload], np.int64)
        self.steps = np.repeat(np.arange(len(workload)), sizes)  # per group in trace order: its step
        self.groups = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # ... its index
        self.next = 0

    def __len__(self) -> int:
        return self.steps.size

    def take(self, k: int) -> Groups:
        """The next `k` groups, each of fresh pending samples."""
        parts: list[Groups] = []
        n = len(self)
        while k > 0 and n:
            lo = self.next % n
            si = int(self.steps[lo])
            hi = min(lo + k, int(np.searchsorted(self.steps, si, side="right")))  # this step's run
            sl = self.pool.samples_of(si)["slices"]
            g0, g1 = int(self.groups[lo]), int(self.groups[hi - 1]) + 1
            ids = self.pool.new(si, int(sl[g0]), int(sl[g1]))
            parts.append(Groups(ids, np.asarray(sl[g0 : g1 + 1], np.int64) - int(sl[g0])))
            self.next += hi - lo
            k -= hi - lo
        out = parts[0] if parts else Groups()
        for p in parts[1:]:
            out = out + p
        return out


def group_tokens(pool: ChainPool, groups: Groups) -> tuple[np.ndarray, int, int]:
    """Training sequence lengths (prompt + response) of the samples of `groups`, their
    generated tokens, and their count."""
    ids = groups.ids
    if not ids.size:
        return np.zeros(0, np.int64), 0, 0
    total, generated = pool.lookup(ids, "total", "generated")
    return total, int(generated.sum()), ids.size
