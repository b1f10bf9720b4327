"""GPU timeline analyses of Kineto traces, compatible with Holistic Trace Analysis 0.5.0.

Input everywhere: `events`, the columns of the `gpu_events` table (see
backend/formats/base.py) for one or more ranks — a mapping with numpy arrays rank,
stream, step, kind, start_us, dur_us, launch_us and either `name` (list of str) or
`name_id` (int array; pass the `names` lookup then). Each analysis is one pure function
returning a plain table: a dict of equal-length numpy columns (documented per function).

HTA compatibility (on by default, `hta_compat=True`), following its source:

- Window (`Trace._filter_irrelevant_gpu_kernels`): when a rank has two or more
  ProfilerStep annotations, only GPU events whose launching runtime call starts before the
  start of the last ProfilerStep are kept (so the last, usually partial, step is dropped,
  and kernels launched before the first step are kept); events with no known launch are
  dropped. With fewer than two steps everything is kept.
- Rounding (`round_down_time_stamps`, pytorch#122425): sub-microsecond timestamps are
  rounded inward — start and launch up (ceil), end (start + dur) down (floor). Traces with
  integer microseconds are unchanged; on nanosecond traces this moves idle % by ~1 pp.
- Kernel types (`get_kernel_type`): "compute" means HTA's COMPUTATION, which besides
  NCCL / Memcpy / Memset also excludes names containing "Memcpy" or "Sync"; when names
  are available they are checked, else `kind == GpuKind.COMPUTE` is used.

The step windows that make the HTA window exact come from the reader's metadata
(`metadata["kineto"]["steps"]`: {rank: [[step, start_us, end_us], ...]}). Without them the
cut is the earliest launch of the rank's highest step, which is the same cut whenever the
last step launched anything on the GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from core.analysis.gpu_intervals import dense_codes, group_order, merge_by_group, union_by_group
from core.analysis.gpu_kinds import GpuKind, kernel_kind

Events = Mapping[str, "np.ndarray | list"]
StepWindows = Mapping  # {rank (int or str): [[step, start_us, end_us], ...]}

KIND_NAMES = {int(k): k.name.lower() for k in GpuKind}
# HTA's NCCL_COMPUTE_KERNEL_RE: what is *not* a computation kernel.
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
# HTA's default consecutive_kernel_delay (trace timestamps are in microseconds).
CONSECUTIVE_KERNEL_DELAY_US = 30.0


# --- shared helpers --------------------------------------------------------------------


def event_names(events: Events, names: Sequence[str] | Mapping[int, str] | None = None) -> list[str]:
    """The kernel name of every event: `events["name"]`, or `names[events["name_id"]]`."""
    if "name" in events:
        return list(events["name"])
    if "name_id" not in events or names is None:
        raise KeyError("events need a 'name' column, or 'name_id' plus the names lookup")
    ids = np.asarray(events["name_id"], dtype=np.int64)
    if isinstance(names, Mapping):
        return [names.get(i, "") for i in ids.tolist()]
    return np.asarray(list(names), dtype=object)[ids].tolist()


def intern(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(codes, distinct values in first-seen order) for a list of strings."""
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    return codes, list(index)


def hta_compute_mask(kind: np.ndarray, names: Sequence[str] | None = None) -> np.ndarray:
    """True where an event is a computation kernel in HTA's sense (see module docstring)."""
    compute = np.asarray(kind) == GpuKind.COMPUTE
    if names is None or not compute.any():
        return compute
    # Names the reader already classed as communication / memory need no second look;
    # only "compute" names HTA would not call compute (…Sync…, …Memcpy… inside) matter.
    not_compute = {n for n in dict.fromkeys(names) if _HTA_NOT_COMPUTE.match(n) and kernel_kind(n) == GpuKind.COMPUTE}
    if not_compute:
        compute &= ~np.fromiter(map(not_compute.__contains__, names), dtype=bool, count=len(names))
    return compute


def _col(events: Events, key: str, dtype: npt.DTypeLike) -> np.ndarray:
    return np.asarray(events[key], dtype=dtype)


def hta_window_mask(events: Events, step_windows: StepWindows | None = None) -> np.ndarray:
    """Events HTA keeps after loading a trace (see the module docstring)."""
    rank = _col(events, "rank", np.int64)
    launch = _col(events, "launch_us", np.float64)
    step = _col(events, "step", np.int64)
    keep = np.ones(len(rank), dtype=bool)
    windows = {int(r): w for r, w in (step_windows or {}).items()}
    for r in np.unique(rank).tolist():
        in_rank = rank == r
        if r in windows:
            if len(windows[r]) < 2:
                continue
            cut = max(float(w[1]) for w in windows[r])
        else:
            steps = np.unique(step[in_rank & (step >= 0)])
            if len(steps) < 2:
                continue
            cut = float(np.nanmin(launch[in_rank & (step == steps[-1])]))
        with np.errstate(invalid="ignore"):
            keep[in_rank] = np.ceil(launch[in_rank]) < np.ceil(cut)
    return keep


def subset_events(events: Events, mask: np.ndarray) -> dict:
    """The numeric columns of the events under `mask` (names are not needed after)."""
    return {k: np.asarray(v)[mask] for k, v in events.items() if k not in ("name", "name_id")}


def event_times(events: Events, hta_compat: bool) -> tuple[np.ndarray, np.ndarray]:
    start = _col(events, "start_us", np.float64)
    end = start + _col(events, "dur_us", np.float64)
    if hta_compat:
        return np.ceil(start), np.floor(end)
    return start, end


def _names_or_none(events: Events, names: Sequence[str] | Mapping[int, str] | None) -> list[str] | None:
    if "name" in events or ("name_id" in events and names is not None):
        return event_names(events, names)
    return None


# --- temporal breakdown ----------------------------------------------------------------


def temporal_breakdown(
    events: Events,
    step_windows: StepWindows | None = None,
    *,
    names: Sequence[str] | Mapping[int, str] | None = None,
    hta_compat: bool = True,
) -> dict[str, np.ndarray]:
    """Per rank, how the GPU's time splits into idle, compute and other activity
    (HTA `get_temporal_breakdown`).

    Columns: rank; kernel_time_us (first GPU event start to last GPU event end);
    idle_us (kernel_time minus the union of all GPU activity); compute_us (union of
    computation kernels); non_compute_us (the rest of the union: communication, memory,
    and overlap not covered by compute); idle_pct, compute_pct, non_compute_pct (of
    kernel_time, unrounded); n_events (GPU events considered).
    """
    compute = hta_compute_mask(_col(events, "kind", np.int8), _names_or_none(events, names))
    if hta_compat:
        keep = hta_window_mask(events, step_windows)
        events, compute = subset_events(events, keep), compute[keep]
    rank = _col(events, "rank", np.int64)
    codes, (ranks,) = dense_codes(rank)
    start, end = event_times(events, hta_compat)
    everything = union_by_group(codes, start, end, len(ranks))
    comp = union_by_group(codes[compute], start[compute], end[compute], len(ranks))

    kernel_time = everything.span
    idle = kernel_time - everything.busy
    compute_us = comp.busy
    non_compute = kernel_time - compute_us - idle
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = 100.0 / kernel_time
    return {
        "rank": ranks.astype(np.int64),
        "kernel_time_us": kernel_time,
        "idle_us": idle,
        "compute_us": compute_us,
        "non_compute_us": non_compute,
        "idle_pct": idle * pct,
        "compute_pct": compute_us * pct,
        "non_compute_pct": non_compute * pct,
        "n_events": everything.n_events.astype(np.int64),
    }


# --- idle time breakdown ---------------------------------------------------------------


def idle_breakdown(
    events: Events,
    step_windows: StepWindows | None = None,
    *,
    consecutive_kernel_delay_us: float = CONSECUTIVE_KERNEL_DELAY_US,
    hta_compat: bool = True,
) -> dict[str, np.ndarray]:
    """Per rank and stream, the gaps between consecutive GPU events split by cause
    (HTA `get_idle_time_breakdown`).

    On each stream, events are ordered by start; the gap before an event is its start
    minus the previous event's end. A gap is
      host wait   when the event's runtime launch started after the previous event ended
                  (the CPU was not enqueuing work fast enough);
      kernel wait when it is not host wait and shorter than `consecutive_kernel_delay_us`
                  (launch overhead between back-to-back kernels);
      other       otherwise (e.g. waiting on an event from another stream).
    Columns: rank, stream, host_wait_us, kernel_wait_us, other_us, idle_us (their sum),
    host_wait_ratio, kernel_wait_ratio, other_ratio (of idle_us), n_gaps. As in HTA, a
    negative gap (overlap on one stream) is summed as is.
    """
    if hta_compat:
        events = subset_events(events, hta_window_mask(events, step_windows))
    rank = _col(events, "rank", np.int64)
    stream = _col(events, "stream", np.int64)
    codes, (ranks, streams) = dense_codes(rank, stream)
    n_groups = len(ranks)
    start, end = event_times(events, hta_compat)
    launch = _col(events, "launch_us", np.float64)
    if hta_compat:
        launch = np.ceil(launch)

    order = group_order(codes, start)
    g, s, e, lch = codes[order], start[order], end[order], launch[order]
    has_prev = np.zeros(len(g), dtype=bool)
    has_prev[1:] = g[1:] == g[:-1]
    prev_end = np.full(len(g), np.nan)
    prev_end[1:] = e[:-1]
    gap = s - prev_end
    with np.errstate(invalid="ignore"):
        host = has_prev & (lch > prev_end)
        kernel = has_prev & ~host & (gap < consecutive_kernel_delay_us)
    other = has_prev & ~host & ~kernel
    gap0 = np.where(has_prev, gap, 0.0)

    def total(mask: np.ndarray) -> np.ndarray:
        return np.bincount(g[mask], weights=gap0[mask], minlength=n_groups).astype(np.float64)

    host_us, kernel_us, other_us = total(host), total(kernel), total(other)
    idle = host_us + kernel_us + other_us

    def share(part: np.ndarray) -> np.ndarray:
        return np.divide(part, idle, out=np.full(n_groups, np.nan), where=idle != 0)

    return {
        "rank": ranks.astype(np.int64),
        "stream": streams.astype(np.int64),
        "host_wait_us": host_us,
        "kernel_wait_us": kernel_us,
        "other_us": other_us,
        "idle_us": idle,
        "host_wait_ratio": share(host_us),
        "kernel_wait_ratio": share(kernel_us),
        "other_ratio": share(other_us),
        "n_gaps": np.bincount(g[has_prev], minlength=n_groups).astype(np.int64),
    }


# --- kernel type breakdown -------------------------------------------------------------


def kernel_type_breakdown(
    events: Events,
    *,
    names: Sequence[str] | Mapping[int, str] | None = None,
    top_n: int = 10,
) -> dict[str, dict[str, np.ndarray | list]]:
    """Where GPU time goes by kernel kind, with the top kernels of each kind (HTA
    `get_gpu_kernel_breakdown`, on the events given — no window filter).

    Returns three tables:
    ``by_kind``   rank, kind (compute / communication / memory), count, sum_us (summed
                  durations), busy_us (union of that kind's intervals), busy_pct (of the
                  rank's union of all GPU activity).
    ``overlap``   rank, kinds (e.g. "compute", "compute+communication"), time_us: time
                  during which exactly that set of kinds was running (HTA's
                  "COMPUTATION overlapping COMMUNICATION"); time_pct of the rank's busy time.
    ``top_kernels`` over all ranks given: kind, name, count, sum_us, mean_us, min_us,
                  max_us, pct_of_kind; the `top_n` kernels of each kind by sum_us, the rest
                  folded into one row named "others".
    """
    rank = _col(events, "rank", np.int64)
    kind = _col(events, "kind", np.int64)
    start = _col(events, "start_us", np.float64)
    dur = _col(events, "dur_us", np.float64)
    end = start + dur
    rank_codes, (ranks,) = dense_codes(rank)
    n_ranks = len(ranks)
    kinds = np.array(sorted(KIND_NAMES), dtype=np.int64)
    n_kinds = len(kinds)

    # by kind: union per (rank, kind)
    rk = rank_codes * n_kinds + kind
    per = union_by_group(rk, start, end, n_ranks * n_kinds)
    total = union_by_group(rank_codes, start, end, n_ranks)
    sums = np.bincount(rk, weights=dur, minlength=n_ranks * n_kinds).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        busy_pct = 100.0 * per.busy / np.repeat(total.busy, n_kinds)
    by_kind = {
        "rank": np.repeat(ranks, n_kinds).astype(np.int64),
        "kind": [KIND_NAMES[int(k)] for k in np.tile(kinds, n_ranks)],
        "count": per.n_events.astype(np.int64),
        "sum_us": sums,
        "busy_us": per.busy,
        "busy_pct": busy_pct,
    }
    return {
        "by_kind": by_kind,
        "overlap": _kind_overlap(rank_codes, ranks, kind, start, end, total.busy),
        "top_kernels": _top_kernels(kind, dur, event_names(events, names), top_n),
    }


def _kind_overlap(
    rank_codes: np.ndarray,
    ranks: np.ndarray,
    kind: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    busy_per_rank: np.ndarray,
) -> dict:
    n_kinds = len(KIND_NAMES)
    rk = rank_codes * n_kinds + kind
    c, s, e = merge_by_group(rk, start, end)
    r = c // n_kinds
    bit = (1 << (c % n_kinds)).astype(np.int64)
    # Sweep: +bit at each block start, -bit at its end; within one rank and kind the blocks
    # do not overlap, so the running sum is the bitmask of kinds currently running.
    t = np.r_[s, e]
    delta = np.r_[bit, -bit]
    rr = np.r_[r, r]
    order = np.lexsort((delta, t, rr))  # ends before starts at equal times
    t, delta, rr = t[order], delta[order], rr[order]
    running = np.cumsum(delta)
    same_rank_next = np.r_[rr[1:] == rr[:-1], False]
    length = np.where(same_rank_next, np.r_[t[1:], 0.0] - t, 0.0)
    active = running > 0
    key = rr[active] * (1 << n_kinds) + running[active]
    uniq, inv = np.unique(key, return_inverse=True)
    time_us = np.bincount(inv, weights=length[active], minlength=len(uniq)).astype(np.float64)
    keep = time_us > 0
    uniq, time_us = uniq[keep], time_us[keep]
    out_rank = uniq >> n_kinds
    mask = uniq & ((1 << n_kinds) - 1)
    labels = ["+".join(KIND_NAMES[k] for k in sorted(KIND_NAMES) if m & (1 << k)) for m in mask.tolist()]
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = 100.0 * time_us / busy_per_rank[out_rank]
    return {"rank": ranks[out_rank].astype(np.int64), "kinds": labels, "time_us": time_us, "time_pct": pct}


def _top_kernels(kind: np.ndarray, dur: np.ndarray, names: list[str], top_n: int) -> dict:
    codes, distinct = intern(names)
    key = codes * len(KIND_NAMES) + kind
    uniq, inv = np.unique(key, return_inverse=True)
    count = np.bincount(inv, minlength=len(uniq))
    sums = np.bincount(inv, weights=dur, minlength=len(uniq))
    by_key = np.argsort(inv, kind="stable")
    heads = np.r_[0, np.cumsum(count)[:-1]]
    mins = np.minimum.reduceat(dur[by_key], heads) if len(dur) else np.zeros(0)
    maxs = np.maximum.reduceat(dur[by_key], heads) if len(dur) else np.zeros(0)
    row_kind = uniq % len(KIND_NAMES)
    row_name = uniq // len(KIND_NAMES)
    kind_total = np.bincount(row_kind, weights=sums, minlength=len(KIND_NAMES))

    out: dict[str, list] = {
        k: [] for k in ("kind", "name", "count", "sum_us", "mean_us", "min_us", "max_us", "pct_of_kind")
    }

    def add(k: int, name: str, n: int, total: float, lo: float, hi: float) -> None:
        out["kind"].append(KIND_NAMES[k])
        out["name"].append(name)
        out["count"].append(n)
        out["sum_us"].append(total)
        out["mean_us"].append(total / n if n else np.nan)
        out["min_us"].append(lo)
        out["max_us"].append(hi)
        out["pct_of_kind"].append(100.0 * total / kind_total[k] if kind_total[k] else np.nan)

    for k in sorted(KIND_NAMES):
        rows = np.flatnonzero(row_kind == k)
        rows = rows[np.argsort(-sums[rows], kind="stable")]
        for i in rows[:top_n]:
            add(k, distinct[row_name[i]], int(count[i]), float(sums[i]), float(mins[i]), float(maxs[i]))
        rest = rows[top_n:]
        if len(rest):
            add(
                k,
                "others",
                int(count[rest].sum()),
                float(sums[rest].sum()),
                float(mins[rest].min()),
                float(maxs[rest].max()),
            )
    return {
        "kind": out["kind"],
        "name": out["name"],
        **{
            k: np.asarray(v, dtype=np.int64 if k == "count" else np.float64)
            for k, v in out.items()
            if k not in ("kind", "name")
        },
    }
