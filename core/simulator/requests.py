"""Generation requests: the entities the rollout engine schedules.

A single-turn sample is one request; a multi-turn trajectory is one request per turn,
chained by `next` (the next turn arrives `gap` seconds — the tool latency — after the
previous one finished). Fields are plain Python lists: the event loop reads and writes
single elements, which is faster on lists than on numpy arrays.

Per request:
  prefill   uncached prompt tokens to prefill (cached prefix tokens skip prefill)
  context   prompt tokens held in the KV cache on admission
  left      completion tokens still to generate (>= 1)
  gap, next the tool latency and the next turn's request id (-1 at the last turn)
  owner     an opaque int (the caller's trajectory key)
  cont      True for a turn after the first (it arrives when a tool call returns)
  prefix    the key of a prompt its group shares (-1: none): a replica that already
            prefilled that prompt skips this request's prefill (`prefill` is then 0)
Results (written by the engine): ``arrive``, ``admit`` (first admission), ``end``
(finish time, NaN until finished), ``generated`` (tokens generated so far, for carry-over).
"""

from __future__ import annotations

import numpy as np

from core.simulator.workload import StepWorkload


class RequestStore:
    """Growable table of requests shared by the replicas of one rollout."""

    def __init__(self) -> None:
        self.prefill: list[int] = []
        self.context: list[int] = []
        self.left: list[int] = []
        self.gap: list[float] = []
        self.next: list[int] = []
        self.owner: list[int] = []
        self.cont: list[bool] = []  # has a previous turn (arrives after a tool call)
        self.prefix: list[int] = []  # shared-prompt key, -1 for none
        self.arrive: list[float] = []
        self.admit: list[float] = []
        self.end: list[float] = []
        self.generated: list[int] = []
        # engine state per request
        self.g0: list[int] = []
        self.seq: list[int] = []
        self.kv0: list[int] = []

    def __len__(self) -> int:
        return len(self.prefill)

    def add(
        self,
        prefill: np.ndarray,
        context: np.ndarray,
        decode: np.ndarray,
        gap: np.ndarray,
        nxt: np.ndarray,
        owner: np.ndarray,
        prefix: np.ndarray | None = None,
    ) -> int:
        """Append requests (arrays of equal length; `nxt` relative to the first added,
        -1 for none; `prefix` shared-prompt keys, default none). Returns the id of the
        first added request."""
        base = len(self.prefill)
        n = len(prefill)
        self.prefix += [-1] * n if prefix is None else np.asarray(prefix, dtype=np.int64).tolist()
        nxt = np.asarray(nxt, dtype=np.int64)
        self.prefill += np.asarray(prefill, dtype=np.int64).tolist()
        self.context += np.asarray(context, dtype=np.int64).tolist()
        self.left += np.maximum(np.asarray(decode, dtype=np.int64), 1).tolist()
        self.gap += np.asarray(gap, dtype=np.float64).tolist()
        self.next += np.where(nxt >= 0, nxt + base, -1).tolist()
        self.owner += np.asarray(owner, dtype=np.int64).tolist()
        cont = np.zeros(n, dtype=bool)
        cont[nxt[nxt >= 0]] = True
        self.cont += cont.tolist()
        nan = float("nan")
        self.arrive += [nan] * n
        self.admit += [nan] * n
        self.end += [nan] * n
        self.generated += [0] * n
        self.g0 += [0] * n
        self.seq += [-1] * n
        self.kv0 += [0] * n
        return base


def step_request_arrays(w: StepWorkload, shared_prompt: bool = False) -> dict[str, np.ndarray]:
    """The requests of one step, in sample order (turns in order within a sample).

    Returns arrays: sample (owning sample index), prefill, context, decode, gap,
    next (index into these arrays or -1), first (first request of each sample),
    prefix (shared-prompt key per request: the group, or -1).
    Single-turn: the group's samples share their prompt (vLLM/SGLang fork n samples
    from one prefill). With the group on one replica, only the group's first sample
    prefills it; with `shared_prompt` (a group's samples may be spread over replicas)
    every sample carries the prompt under its group's key and the replica that admits
    it prefills the prompt only if it has not already (`engine.PooledEngine`).
    Multi-turn: each trajectory's turns prefill their uncached tokens.
    """
    if w.turn_sample is not None:  # is_multiturn
        sample = w.turn_sample
        n = sample.size
        prompt = w.turn_prompt_tokens
        decode = w.turn_completion_tokens
        gap = w.turn_tool_latency_s
        assert prompt is not None and w.turn_cached_tokens is not None and decode is not None and gap is not None
        cached = np.minimum(w.turn_cached_tokens, prompt)
        last = np.ones(n, dtype=bool)
        last[:-1] = sample[1:] != sample[:-1]
        nxt = np.where(last, -1, np.arange(n) + 1)
        first = np.searchsorted(sample, np.arange(w.n_samples))
        return {
            "sample": sample,
            "prefill": prompt - cached,
            "context": prompt,
            "decode": decode,
            "gap": gap,
            "next": nxt,
            "first": first,
            "prefix": np.full(n, -1, dtype=np.int64),
        }
    n = w.n_samples
    first_of_group = np.ones(n, dtype=bool)
    first_of_group[1:] = w.group[1:] != w.group[:-1]
    return {
        "sample": np.arange(n),
        "prefill": w.prompt_len if shared_prompt else np.where(first_of_group, w.prompt_len, 0),
        "context": w.prompt_len,
        "decode": w.response_len,
        "gap": np.zeros(n),
        "next": np.full(n, -1),
        "first": np.arange(n),
        "prefix": w.group if shared_prompt else np.full(n, -1, dtype=np.int64),
    }


def sample_tokens(arr: dict[str, np.ndarray], n_samples: int) -> np.ndarray:
    """Tokens each sample generates (over all its turns), from `step_request_arrays`."""
    return np.bincount(arr["sample"], weights=arr["decode"], minlength=n_samples).astype(np.int64)


def select_samples(
    arr: dict[str, np.ndarray], samples: np.ndarray, starts: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """The requests of some samples of a step (their turns in order), re-indexed:
    `sample` keeps the step's sample index, `first`/`last` index the selection's
    requests per selected sample, `next` points within the selection. `starts`:
    `request_starts(arr)`, given when selecting from the same `arr` many times."""
    samples = np.asarray(samples, dtype=np.int64)
    if starts is None:
        starts = request_starts(arr)
    lo, hi = starts[samples], starts[samples + 1]
    sizes = hi - lo
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    idx = np.repeat(lo - offsets[:-1], sizes) + np.arange(offsets[-1])
    nxt = arr["next"][idx]
    out = {k: arr[k][idx] for k in ("sample", "prefill", "context", "decode", "gap", "prefix")}
    out["next"] = np.where(nxt >= 0, np.arange(idx.size) + 1, -1)
    out["first"] = offsets[:-1]
    out["last"] = offsets[1:] - 1
    return out


def request_starts(arr: dict[str, np.ndarray]) -> np.ndarray:
    """Per sample of `arr`, its first request, then the number of requests."""
    return np.concatenate([arr["first"], [arr["sample"].size]])


def chunk_requests(arr: dict[str, np.ndarray], chunk_tokens: int) -> dict[str, np.ndarray]:
    """Seer's chunked requests: each request of `arr` (`step_request_arrays`) split into
    chained requests of at most `chunk_tokens` completion tokens. A later chunk prefills
    nothing (its KV is read from the global pool), holds the prompt and the tokens of the
    chunks before it as context, follows the previous chunk at once (gap 0) and is
    marked `migrate`: it goes back to the cluster, which may continue it on any replica.
    The last chunk keeps the request's gap and next; `first` points at first chunks."""
    d = np.maximum(np.asarray(arr["decode"], dtype=np.int64), 1)  # as `RequestStore.add`
    n_chunks = -(-d // chunk_tokens)
    start = np.cumsum(n_chunks) - n_chunks  # each request's first chunk
    idx = np.repeat(np.arange(d.size), n_chunks)
    k = np.arange(idx.size) - start[idx]  # chunk index within its request
    last = k == n_chunks[idx] - 1
    nxt = arr["next"][idx]
    out = {key: arr[key][idx] for key in ("sample", "gap", "prefix", "prefill", "context")}
    out["decode"] = np.where(last, d[idx] - k * chunk_tokens, chunk_tokens)
    out["context"] = out["context"] + k * chunk_tokens
    out["prefill"] = np.where(k == 0, out["prefill"], 0)
    out["prefix"] = np.where(k == 0, out["prefix"], -1)
    out["gap"] = np.where(last, out["gap"], 0.0)
    out["next"] = np.where(last, np.where(nxt >= 0, start[np.maximum(nxt, 0)], -1), np.arange(idx.size) + 1)
    out["first"] = start[arr["first"]]
    out["migrate"] = k > 0
    return out
