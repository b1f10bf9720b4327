"""Truth audit: every figure the Overview, Distributions, Imbalance and Multi-turn &
reward pages show, on every shared real fixture, recomputed here from the raw files with
json/numpy only (never through product code) and compared with what the API returns
after a real ingest and real worker jobs.

Table-driven: `PAGES` lists, per page, the figures (cards, per-step series, histograms,
tables) and, for each, the check that recomputes it -- or None with the reason when no
independent recomputation exists yet: such a figure is *listed as missing*, never passed
silently. A figure a fixture cannot show (no dp_rank, no turns, ...) is "n/a" for it.
`test_zz_audit_counts` (last in the file) prints the audited / missing counts; the
session summary (conftest `pytest_terminal_summary`) prints them again with `-q`.

Runs on SQLite only, on a worker of its own with the default part size: the figures are
computed by the same worker code on both
databases (storage round trips are covered by the API tests on both), and one pass over
the four PolyTrace runs plus a Kineto pair keeps the audit well under a minute.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT as ROOT_DIR
from tests.conftest import SHARED_FIXTURES, start_worker, stop_worker, wait_for_job

SQLITE = pytest.mark.parametrize("backend_env", ["sqlite"], indirect=True)


@pytest.fixture(scope="module")
def audit_worker(backend_env, tmp_path_factory):
    """A real worker with the deployment's default part size (these traces are then
    analysed whole, as in production; chunked = whole is tested in
    test_analysis_fixtures / test_worker_fixtures): keeps the audit short."""
    proc = start_worker(backend_env, tmp_path_factory.mktemp("audit-worker") / "worker.log", concurrency=2)
    yield proc
    stop_worker(proc)


# (fixture, page, figure) -> "audited" | "missing: why" | "n/a"; failures separately
AUDIT: dict[tuple[str, str, str], str] = {}
FAILURES: list[str] = []

PACKED = ("verl_video_qwen2_5_vl_7b", "verl_dapo_qwen2_5_32b", "rllm_deepcoder_14b_16k")
MULTI = "search_r1_qwen2_5_7b"
KINETO = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")
PCTS = (10, 25, 50, 75, 90, 99)
REL = 1e-6


# --------------------------------------------------------------------------- raw files


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_files(folder: Path, prefix: str) -> list[Path]:
    return sorted(folder.glob(f"{prefix}_step_*.jsonl"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))


class Raw:
    """The fixture's rows as plain per-sample lists (group = line order within a step)."""

    def __init__(self, folder: Path):
        self.samples: list[dict] = []  # step, group, dp_rank, prompt, response, truncated, time
        self.trajectories: list[dict] = []
        self.rewards: list[dict] = []
        self.max_response_len = None
        for path in step_files(folder, "packed_lengths"):
            for g, r in enumerate(read_jsonl(path)):
                for out in r["output"]:
                    self.samples.append(
                        {"step": r["step"], "group": g, "dp_rank": r["dp_rank"], "prompt": r["input"], "response": out}
                    )
        for path in step_files(folder, "reward_timings"):
            self.rewards += read_jsonl(path)
        for path in sorted(folder.glob("*.csv")):  # native samples (step, group_idx, sample_idx, ...)
            for r in csv.DictReader(path.open()):
                flag = r.get("truncated", "")
                self.samples.append(
                    {
                        "step": int(r["step"]),
                        "group": int(r["group_idx"]),
                        "dp_rank": int(r["dp_rank"]) if r.get("dp_rank") not in (None, "") else None,
                        "prompt": int(r["prompt_len"]),
                        "response": int(r["response_len"]),
                        "task": r.get("task") or None,
                        **({"truncated": flag.lower() == "true"} if flag != "" else {}),
                    }
                )
        self.log = {}  # verl file logger: step -> data
        for path in sorted(folder.glob("metrics*.jsonl")):
            for line in read_jsonl(path):
                self.log.setdefault(line["step"], {}).update(line["data"])
        for path in step_files(folder, "multiturn_workload"):
            for t in read_jsonl(path):
                self.trajectories.append(t)
                self.max_response_len = max(self.max_response_len or 0, t["max_response_len"])
                self.samples.append(
                    {
                        "step": t["step"],
                        "group": t["prompt_group_id"],
                        "dp_rank": None,
                        "prompt": t["prompt_len"],
                        "response": t["final_response_len"],
                        "truncated": t["finish_reason"] == "length",
                        "time": sum(x["engine_latency_s"] for x in t["turns"])
                        + sum(c["latency_s"] for c in t["tool_calls"]),
                    }
                )
        self.steps = sorted({s["step"] for s in self.samples})

    def by_step(self, key: str) -> dict[int, np.ndarray]:
        out = defaultdict(list)
        for s in self.samples:
            out[s["step"]].append(s[key])
        return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


# --------------------------------------------------------------------------- comparing


def close(got, want, what: str, rel: float = REL, abs_: float = 1e-9) -> None:
    if want is None or (isinstance(want, float) and math.isnan(want)):
        assert got is None, f"{what}: API {got!r}, expected none"
        return
    assert got is not None, f"{what}: API has no value, expected {want!r}"
    assert math.isclose(float(got), float(want), rel_tol=rel, abs_tol=abs_), f"{what}: API {got!r} != raw {want!r}"


def log_hist(values: np.ndarray, edges: np.ndarray) -> list[int]:
    """Counts per [edge_i, edge_i+1) with values below 1 in the first bin (the API's
    stated binning), by a plain loop over the sorted values."""
    counts = [0] * (len(edges) - 1)
    for v in values:
        v = max(v, 1)
        i = int(np.searchsorted(edges, v, side="right")) - 1
        counts[min(max(i, 0), len(counts) - 1)] += 1
    return counts


def lpt_loads(items: list[float], k: int) -> list[float]:
    """Longest processing time first: each item to the least-loaded rank."""
    loads = [0.0] * k
    for w in sorted(items, reverse=True):
        i = min(range(k), key=lambda r: loads[r])
        loads[i] += w
    return sorted(loads)


def kk_loads(items: list[float], k: int) -> list[float]:
    """Karmarkar-Karp largest differencing with equal-size partitions, as verl's
    seqlen_balancing describes it, in plain Python: items ascending (ties by index),
    padded in front with zero-weight dummies to a multiple of k, cut into chunks of k
    (one item per set); repeatedly merge the two states with the largest spread (then
    the largest top set, then the earliest chunk), pairing the largest set of one with
    the smallest of the other. Returns the final set sums, descending."""
    order = sorted(range(len(items)), key=lambda i: (items[i], i))
    vals = [0.0] * ((-len(items)) % k) + [float(items[i]) for i in order]
    states = []
    for c in range(0, len(vals), k):
        states.append((sorted(vals[c : c + k], reverse=True), c))
    while len(states) > 1:
        states.sort(key=lambda st: (-(st[0][0] - st[0][-1]), -st[0][0], st[1]))
        (a, ta), (b, tb) = states[0], states[1]
        merged = sorted((a[j] + b[k - 1 - j] for j in range(k)), reverse=True)
        states = [*states[2:], (merged, min(ta, tb))]
    return states[0][0]


# --------------------------------------------------------------------------- the figures


class Ctx:
    def __init__(self, name: str, raw, trace: dict, api, results: dict, folder: Path):
        self.name, self.raw, self.trace, self.api, self.results = name, raw, trace, api, results
        self.folder = folder
        self._summ: dict = {}

    def get(self, path: str):
        r = self.api.get(f"/api/v1/traces/{self.trace['id']}{path}")
        assert r.status_code == 200, r.text
        return r.json()

    def summaries(self, field: str) -> dict:
        if field not in self._summ:
            self._summ[field] = self.get(f"/summaries?field={field}")
        return self._summ[field]

    def memo(self, fn):
        """fn(self), computed once per fixture (raw recomputations several checks share)."""
        if fn.__name__ not in self._summ:
            self._summ[fn.__name__] = fn(self)
        return self._summ[fn.__name__]

    def result(self, kind: str) -> dict:
        assert kind in self.results, f"no {kind} result (analyses: {sorted(self.results)})"
        return self.results[kind]


def values_of(c: Ctx, field: str) -> dict[int, np.ndarray]:
    if field == "total":
        p, r = c.raw.by_step("prompt"), c.raw.by_step("response")
        return {k: p[k] + r[k] for k in p}
    return c.raw.by_step("prompt" if field == "prompt" else "response")


# overview ---------------------------------------------------------------


def ov_steps(c: Ctx):
    assert c.trace["n_steps"] == len(c.raw.steps), f"n_steps {c.trace['n_steps']} != {len(c.raw.steps)}"
    assert [s["step"] for s in c.get("/steps")["items"]] == c.raw.steps


def ov_samples(c: Ctx):
    assert c.trace["n_samples"] == len(c.raw.samples)
    if c.raw.trajectories:
        assert c.trace["n_turns"] == sum(len(t["turns"]) for t in c.raw.trajectories)
        assert c.trace["n_tool_calls"] == sum(len(t["tool_calls"]) for t in c.raw.trajectories)


def ov_tokens(c: Ctx):
    steps = {s["step"]: s for s in c.get("/steps")["items"]}
    p, r = c.raw.by_step("prompt"), c.raw.by_step("response")
    for st in c.raw.steps:
        assert steps[st]["prompt_tokens"] == int(p[st].sum()), f"step {st} prompt tokens"
        assert steps[st]["response_tokens"] == int(r[st].sum()), f"step {st} response tokens"


def ov_tail(c: Ctx):
    r = c.raw.by_step("response")
    want = float(np.median([r[s].max() / r[s].mean() for s in c.raw.steps]))
    rows = [x for x in c.summaries("response")["steps"] if x["count"]]
    close(float(np.median([x["tail_ratio"] for x in rows])), want, "median tail ratio")


def imbalance_raw(c: Ctx) -> dict:
    return c.memo(imbalance_raw_)


def imbalance_raw_(c: Ctx) -> dict:
    """Per step: recorded token / cost load per dp rank, group items, k."""
    k = max(s["dp_rank"] for s in c.raw.samples) + 1
    out = {}
    for st in c.raw.steps:
        rows = [s for s in c.raw.samples if s["step"] == st]
        tok, cost = [0] * k, [0] * k
        items_t, items_c = defaultdict(int), defaultdict(int)
        for s in rows:
            seq = s["prompt"] + s["response"]
            tok[s["dp_rank"]] += seq
            cost[s["dp_rank"]] += 24576 * seq + seq * seq
            items_t[s["group"]] += seq
            items_c[s["group"]] += 24576 * seq + seq * seq
        out[st] = {"tokens": (tok, list(items_t.values())), "cost": (cost, list(items_c.values())), "k": k}
    return out


def ov_imbalance(c: Ctx):
    raw = imbalance_raw(c)
    want = np.mean([max(v["tokens"][0]) / np.mean(v["tokens"][0]) for v in raw.values()])
    close(c.result("imbalance")["summary"]["tokens"]["max_over_mean"]["mean"], want, "mean max/mean token load")


def longtail_raw(c: Ctx) -> dict:
    return c.memo(longtail_raw_)


def longtail_raw_(c: Ctx) -> dict:
    """Per step: the slot model on response lengths (or measured times for multi-turn)."""
    basis = "time" if c.raw.trajectories else "response"
    out = {}
    for st in c.raw.steps:
        rows = [s for s in c.raw.samples if s["step"] == st]
        engines = defaultdict(list)
        for s in rows:
            engines[s["dp_rank"] if s["dp_rank"] is not None else 0].append(float(s[basis]))
        every = sorted(float(s[basis]) for s in rows)
        T = every[-1]
        n = len(every)
        k = max(math.ceil(0.9 * n - 1e-9), 1)
        within = sum(max(v) - np.mean(v) for v in engines.values())
        waiting = sum(T - max(v) for v in engines.values())
        out[st] = {
            "idle_fraction": (within + waiting) / (len(engines) * T),
            "within": within / (len(engines) * T),
            "waiting": waiting / (len(engines) * T),
            "tail_time_share": (T - every[k - 1]) / T,
            "tail_sample_share": sum(1 for v in every if v > 0.9 * T) / n,
            "tail_tied": every[k - 1] >= T and n > 1,
            "engine_idle": {e: 1 - sum(v) / (len(v) * max(v)) for e, v in engines.items()},
        }
    return out


def ov_idle(c: Ctx):
    raw = longtail_raw(c)
    res = c.result("longtail")
    assert res["basis"] == ("time" if c.raw.trajectories else "tokens")
    close(res["summary"]["idle_fraction"]["mean"], np.mean([v["idle_fraction"] for v in raw.values()]), "idle share")


def ov_lengths(c: Ctx):
    dist_percentiles(c, "response", keys=(50, 90, 99))


# distributions -----------------------------------------------------------


def dist_percentiles(c: Ctx, field: str, keys=PCTS):
    vals = values_of(c, field)
    for x in c.summaries(field)["steps"]:
        v = vals[x["step"]]
        assert x["count"] == len(v)
        for q in keys:
            close(x[f"p{q}"], float(np.percentile(v, q)), f"{field} step {x['step']} p{q}")
        close(x["max"], float(v.max()), f"{field} step {x['step']} max")
        close(x["mean"], float(v.mean()), f"{field} step {x['step']} mean")


def dist_hist(c: Ctx, field: str):
    payload = c.summaries(field)
    edges = np.asarray(payload["bin_edges"], dtype=np.float64)
    vals = values_of(c, field)
    for x in payload["steps"]:
        assert x["hist"] == log_hist(vals[x["step"]], edges), f"{field} step {x['step']} histogram"


def truncated_raw(c: Ctx) -> dict[int, np.ndarray] | None:
    """Per step, which samples are truncated by the one definition, from the raw rows:
    the recorded stop reason where a row has one; else at the cap (recorded in the files,
    else the longest response when at least two samples reach it); None when unknown."""
    rows = c.raw.samples
    recorded = [s for s in rows if "truncated" in s]
    cap = c.raw.max_response_len
    if cap is None and not recorded:
        top = max(s["response"] for s in rows)
        cap = top if sum(s["response"] == top for s in rows) >= 2 else None
    if cap is None and not recorded:
        return None
    out = defaultdict(list)
    for s in rows:
        out[s["step"]].append(s["truncated"] if "truncated" in s else (cap is not None and s["response"] >= cap))
    return {k: np.asarray(v, dtype=bool) for k, v in out.items()}


def dist_tail(c: Ctx):
    r = c.raw.by_step("response")
    flags = truncated_raw(c)
    payload = c.summaries("response")
    assert (payload["truncation"]["basis"] is None) == (flags is None), payload["truncation"]
    for x in payload["steps"]:
        v = r[x["step"]]
        close(x["tail_ratio"], v.max() / v.mean(), f"step {x['step']} tail ratio")
        want = None if flags is None else float(flags[x["step"]].mean())
        close(x["truncation_rate"], want, f"step {x['step']} truncated share")


def length_cap_raw(c: Ctx) -> int | None:
    """The cap "at the length cap" counts against, from the raw rows: recorded in the
    files, else the longest response when at least two samples reach it (whatever the
    stop reasons say); None when neither."""
    if c.raw.max_response_len is not None:
        return c.raw.max_response_len
    top = max(s["response"] for s in c.raw.samples)
    return top if sum(s["response"] == top for s in c.raw.samples) >= 2 else None


def dist_at_cap(c: Ctx):
    """Per step, the share of samples whose response reached the length cap, beside the
    truncated share (Search-R1: 3 of 2,048 truncated by stop reason, 37 at the cap)."""
    r = c.raw.by_step("response")
    cap = length_cap_raw(c)
    payload = c.summaries("response")
    assert payload["truncation"]["length_cap"] == cap, payload["truncation"]
    assert payload["truncation"]["at_cap_definition"].startswith("at the length cap")
    for x in payload["steps"]:
        want = None if cap is None else float((r[x["step"]] >= cap).mean())
        close(x["at_cap_rate"], want, f"step {x['step']} share at the length cap")


def ov_truncation(c: Ctx):
    """The Overview's card: truncated and at-cap shares over the training steps' samples."""
    flags, cap = truncated_raw(c), length_cap_raw(c)
    summary = {x["step"]: x for x in c.summaries("response")["steps"] if x["count"] and not x["validate"]}

    def pooled(key: str) -> float | None:
        rates = [(x[key], x["count"]) for x in summary.values()]
        return None if any(v is None for v, _ in rates) else sum(v * n for v, n in rates) / sum(n for _, n in rates)

    if flags is not None:
        close(pooled("truncation_rate"), float(np.concatenate([flags[s] for s in summary]).mean()), "truncated share")
    want = (
        None if cap is None else float(np.mean([s["response"] >= cap for s in c.raw.samples if s["step"] in summary]))
    )
    close(pooled("at_cap_rate"), want, "share at the length cap")


def task_percentiles(c: Ctx):
    """Per task and step: percentiles and truncated share of that task's samples."""
    flags = truncated_raw(c)
    for task in c.trace["tasks"]:
        payload = c.get(f"/summaries?field=response&task={task}")
        rows = [(i, s) for i, s in enumerate(c.raw.samples) if s.get("task") == task]
        for x in payload["steps"]:
            v = np.asarray([s["response"] for _i, s in rows if s["step"] == x["step"]], dtype=np.float64)
            assert x["count"] == len(v), f"{task} step {x['step']} count"
            for q in (50, 90, 99):
                close(x[f"p{q}"], float(np.percentile(v, q)), f"{task} step {x['step']} p{q}")
            if flags is not None:
                step_rows = [s for s in c.raw.samples if s["step"] == x["step"]]
                mine = [f for f, s in zip(flags[x["step"]], step_rows) if s.get("task") == task]
                close(x["truncation_rate"], float(np.mean(mine)), f"{task} step {x['step']} truncated share")


STAGE_KEYS = {"t_gen": "timing_s/gen", "t_update_actor": "timing_s/update_actor", "t_step": "timing_s/step"}


def stage_seconds(c: Ctx):
    steps = {s["step"]: s for s in c.get("/steps")["items"]}
    for step, data in c.raw.log.items():
        for col, key in STAGE_KEYS.items():
            if key in data:
                close(steps[step][col], data[key], f"step {step} {col}")


# samples -----------------------------------------------------------------


def samples_total(c: Ctx):
    counts = {k: len(v) for k, v in c.raw.by_step("response").items()}
    for step, n in counts.items():
        page = c.get(f"/samples?step={step}&limit=1")
        assert page["total"] == n and not page["total_is_lower_bound"], f"step {step}: {page['total']} != {n}"


def samples_truncated(c: Ctx):
    """The truncated filter and column count what the summaries count, by the definition."""
    flags = truncated_raw(c)
    for step, f in (flags or {}).items():
        got = c.get(f"/samples?step={step}&truncated=true&limit=1")["total"]
        assert got == int(f.sum()), f"step {step}: filter {got}, raw {int(f.sum())}"
        rest = c.get(f"/samples?step={step}&truncated=false&limit=1")
        n = int((~f).sum())  # counted up to SAMPLE_COUNT_CAP (2,000), then a lower bound
        assert (rest["total"], rest["total_is_lower_bound"]) == (min(n, 2000), n > 2000), f"step {step}: {rest}, {n}"
        shown = c.get(f"/samples?step={step}&sort=response_len&order=desc&limit=50")["items"]
        assert all(isinstance(x["truncated"], bool) for x in shown), "the column says yes or no"
    if flags is None:
        step = c.raw.steps[0]
        assert c.get(f"/samples?step={step}&limit=1")["items"][0]["truncated"] is None


def samples_sorted(c: Ctx):
    """A step's first page, longest first: the raw top lengths in order, with their ranks."""
    step = c.raw.steps[-1]
    rows = sorted((s for s in c.raw.samples if s["step"] == step), key=lambda s: -s["response"])[:50]
    page = c.get(f"/samples?step={step}&sort=response_len&order=desc&limit=50")["items"]
    assert [x["response_len"] for x in page] == [s["response"] for s in rows]
    if rows[0]["dp_rank"] is not None:
        by_len = defaultdict(set)
        for s in c.raw.samples:
            if s["step"] == step:
                by_len[s["response"]].add(s["dp_rank"])
        assert all(x["dp_rank"] in by_len[x["response_len"]] for x in page)


def req_timeline(c: Ctx):
    """Per trajectory: engine seconds then tool seconds, back to back (end = the sum)."""
    step = c.raw.steps[0]
    want = sorted(
        sum(t["engine_latency_s"] for t in tr["turns"]) + sum(x["latency_s"] for x in tr["tool_calls"])
        for tr in c.raw.trajectories
        if tr["step"] == step
    )
    got = [x["end_s"] for x in c.get(f"/steps/{step}/trajectories")["items"]]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w, f"step {step} trajectory end", rel=1e-9)


def turns_of(c: Ctx):
    """One trajectory's turns: engine latency, tool seconds after the turn, cached / new prompt tokens."""
    tr = max((t for t in c.raw.trajectories if t["step"] == c.raw.steps[0]), key=lambda t: len(t["turns"]))
    got = c.get(f"/samples/{tr['step']}/{tr['prompt_group_id']}/{tr['sample_id']}/turns")["items"]
    assert [x["turn"] for x in got] == [t["turn"] for t in tr["turns"]]
    for x, t in zip(got, tr["turns"]):
        close(x["engine_latency_s"], t["engine_latency_s"], f"turn {t['turn']} engine")
        tools = [cl["latency_s"] for cl in tr["tool_calls"] if cl["turn"] == t["turn"]]
        close(x["tool_latency_s"], sum(tools) if tools else None, f"turn {t['turn']} tools")
        assert (x["cached_tokens"], x["new_prompt_tokens"]) == (
            t["cached_tokens"],
            t["prompt_tokens"] - t["cached_tokens"],
        )


def lt_idle(c: Ctx):
    raw = longtail_raw(c)
    for e in c.result("longtail")["steps"]:
        w = raw[e["step"]]
        close(e["idle_fraction"], w["idle_fraction"], f"step {e['step']} idle share")
        close(e["idle_within_engines"] / e["engine_time"], w["within"], f"step {e['step']} own-tail idle")
        close(e["idle_waiting"] / e["engine_time"], w["waiting"], f"step {e['step']} waiting idle")


def lt_finish(c: Ctx):
    raw = longtail_raw(c)
    for e in c.result("longtail")["steps"]:
        w = raw[e["step"]]
        close(e["tail_time_share"], w["tail_time_share"], f"step {e['step']} tail time share")
        close(e["tail_sample_share"], w["tail_sample_share"], f"step {e['step']} tail sample share")
        assert e["tail_tied"] == w["tail_tied"], f"step {e['step']} tie flag"


def lt_tail_seconds(c: Ctx):
    """Measured times (multi-turn): the tail in seconds; token traces without a measured
    t_gen: no seconds at all (the fixtures have none)."""
    for e in c.result("longtail")["steps"]:
        t_gen = c.raw.log.get(e["step"], {}).get("timing_s/gen")
        if c.raw.trajectories:
            ts = sorted(s["time"] for s in c.raw.samples if s["step"] == e["step"])
            k = max(math.ceil(0.9 * len(ts) - 1e-9), 1)
            close(e["tail_seconds"], ts[-1] - ts[k - 1], f"step {e['step']} tail seconds")
        elif t_gen is not None:  # the logged rollout seconds spread over the token model
            close(e["tail_seconds"], longtail_raw(c)[e["step"]]["tail_time_share"] * t_gen, f"step {e['step']} tail s")
        else:
            assert e["tail_seconds"] is None and e["t_gen"] is None


def lt_engines(c: Ctx):
    raw = longtail_raw(c)
    for e in c.result("longtail")["steps"]:
        got = dict(zip(e["engine"]["engine"], e["engine"]["idle_fraction"]))
        want = raw[e["step"]]["engine_idle"]
        assert set(got) == set(want)
        for k, v in want.items():
            close(got[k], v, f"step {e['step']} engine {k} idle")


# imbalance ---------------------------------------------------------------


def imb_heatmap(c: Ctx):
    raw = imbalance_raw(c)
    res = c.result("imbalance")
    assert res["dp_size"] == next(iter(raw.values()))["k"]
    for e in res["steps"]:
        for load in ("tokens", "cost"):
            rec = raw[e["step"]][load][0]
            assert e[load]["recorded"] == rec, f"step {e['step']} {load} per rank"
            close(e[load]["mean"], float(np.mean(rec)), f"step {e['step']} {load} mean")


def imb_ratio_recorded(c: Ctx):
    raw = imbalance_raw(c)
    res = c.result("imbalance")
    for e in res["steps"]:
        for load in ("tokens", "cost"):
            rec = raw[e["step"]][load][0]
            close(e[load]["max_over_mean"], max(rec) / np.mean(rec), f"step {e['step']} {load} max/mean")
            close(e[load]["max_over_min"], max(rec) / min(rec), f"step {e['step']} {load} max/min")
    for load in ("tokens", "cost"):
        per = [max(v[load][0]) / min(v[load][0]) for v in raw.values()]
        close(res["summary"][load]["max_over_min"]["mean"], float(np.mean(per)), f"{load} max/min card")


def imb_ratio_lpt(c: Ctx):
    raw = imbalance_raw(c)
    res = c.result("imbalance")
    for e in res["steps"]:
        for load in ("tokens", "cost"):
            _rec, items = raw[e["step"]][load]
            loads = lpt_loads(items, raw[e["step"]]["k"])
            close(e[load]["lpt_max"], max(loads), f"step {e['step']} {load} LPT max")
            close(e[load]["lpt_max_over_mean"], max(loads) / np.mean(loads), f"step {e['step']} {load} LPT max/mean")
            close(e[load]["lpt_max_over_min"], max(loads) / min(loads), f"step {e['step']} {load} LPT max/min")


def imb_lpt_card(c: Ctx):
    raw = imbalance_raw(c)
    lpt_sum = sum(max(lpt_loads(v["tokens"][1], v["k"])) for v in raw.values())
    rec_sum = sum(max(v["tokens"][0]) for v in raw.values())
    close(c.result("imbalance")["summary"]["tokens"]["lpt_time_saved"], 1 - lpt_sum / rec_sum, "LPT whole-run saving")


def imb_ratio_kk(c: Ctx):
    raw = imbalance_raw(c)
    for e in c.result("imbalance")["steps"]:
        for load in ("tokens", "cost"):
            _rec, items = raw[e["step"]][load]
            loads = kk_loads(items, raw[e["step"]]["k"])
            close(e[load]["kk_max"], max(loads), f"step {e['step']} {load} KK max")
            close(e[load]["kk_max_over_mean"], max(loads) / np.mean(loads), f"step {e['step']} {load} KK max/mean")
            close(e[load]["kk_max_over_min"], max(loads) / min(loads), f"step {e['step']} {load} KK max/min")


def imb_kk_card(c: Ctx):
    raw = imbalance_raw(c)
    kk_sum = sum(max(kk_loads(v["tokens"][1], v["k"])) for v in raw.values())
    rec_sum = sum(max(v["tokens"][0]) for v in raw.values())
    close(c.result("imbalance")["summary"]["tokens"]["kk_time_saved"], 1 - kk_sum / rec_sum, "KK whole-run saving")


def best_split_raw(c: Ctx) -> dict:
    return c.memo(best_split_raw_)


def best_split_raw_(c: Ctx) -> dict:
    out = {}
    for st, v in imbalance_raw(c).items():
        rec = max(v["tokens"][0])
        cands = {
            "recorded": rec,
            "kk": max(kk_loads(v["tokens"][1], v["k"])),
            "lpt": max(lpt_loads(v["tokens"][1], v["k"])),
        }
        best = min(cands.values())
        out[st] = {"recorded": rec, "best": best, "saving": max(0.0, 1 - best / rec), "cands": cands}
    return out


def imb_saving(c: Ctx):
    raw = best_split_raw(c)
    for e in c.result("imbalance")["steps"]:
        w = raw[e["step"]]
        close(e["tokens"]["saving"], w["saving"], f"step {e['step']} best-split saving")
        assert w["cands"][e["tokens"]["best_split"]] == w["best"], f"step {e['step']} best split"
    want = 1 - sum(w["best"] for w in raw.values()) / sum(w["recorded"] for w in raw.values())
    close(c.result("imbalance")["summary"]["tokens"]["time_saved"], want, "balancing saves card")


def ov_best_saved(c: Ctx):
    raw = best_split_raw(c)
    want = 1 - sum(w["best"] for w in raw.values()) / sum(w["recorded"] for w in raw.values())
    close(c.result("imbalance")["summary"]["tokens"]["time_saved"], want, "overview best-split saving")


def imb_saving_bounds(c: Ctx):
    """Not a recomputation (KK is not reimplemented here): the best-split saving is never
    negative and never below LPT's, never above what the lower bound allows."""
    raw = imbalance_raw(c)
    for e in c.result("imbalance")["steps"]:
        f = e["tokens"]
        rec, items = raw[e["step"]]["tokens"]
        lpt = max(lpt_loads(items, raw[e["step"]]["k"]))
        bound = max(np.mean(rec), max(items))
        assert f["saving"] >= 0 and f["saving"] >= 1 - lpt / max(rec) - 1e-12
        assert f["saving"] <= 1 - bound / max(rec) + 1e-12


# multi-turn & reward -------------------------------------------------------


def traj_by_step(c: Ctx) -> dict[int, list[dict]]:
    out = defaultdict(list)
    for t in c.raw.trajectories:
        out[t["step"]].append(t)
    return out


def hist_of(values) -> list[int]:
    h = [0] * (max(values) + 1)
    for v in values:
        h[v] += 1
    return h


def mt_counts(c: Ctx):
    s = c.result("multiturn")["summary"]
    assert s["turns_hist"] == hist_of([len(t["turns"]) for t in c.raw.trajectories])
    assert s["tool_calls_hist"] == hist_of([len(t["tool_calls"]) for t in c.raw.trajectories])
    close(s["tool_calls_mean"], np.mean([len(t["tool_calls"]) for t in c.raw.trajectories]), "tool calls mean")


def mt_steps(c: Ctx):
    by = traj_by_step(c)
    for e in c.result("multiturn")["steps"]:
        ts = by[e["step"]]
        close(e["turns_mean"], np.mean([len(t["turns"]) for t in ts]), f"step {e['step']} turns mean")
        assert e["turns_max"] == max(len(t["turns"]) for t in ts)
        close(e["tool_calls_mean"], np.mean([len(t["tool_calls"]) for t in ts]), f"step {e['step']} tool calls mean")
        assert e["tool_calls_max"] == max(len(t["tool_calls"]) for t in ts), f"step {e['step']} tool calls max"


def mt_cache(c: Ctx):
    by = traj_by_step(c)
    for e in c.result("multiturn")["steps"]:
        turns = [x for t in by[e["step"]] for x in t["turns"]]
        want = sum(x["cached_tokens"] for x in turns) / sum(x["prompt_tokens"] for x in turns)
        close(e["cache_hit_rate"], want, f"step {e['step']} cache hit rate")


def mt_context(c: Ctx):
    bt = c.result("multiturn")["summary"]["by_turn"]
    per = defaultdict(list)
    for t in c.raw.trajectories:
        for x in t["turns"]:
            per[x["turn"]].append(x)
    assert bt["turn"] == list(range(max(per) + 1))
    for i in bt["turn"]:
        xs = per.get(i, [])
        assert bt["count"][i] == len(xs)
        if xs:
            for key, col in (("prompt_mean", "prompt_tokens"), ("cached_mean", "cached_tokens")):
                close(bt[key][i], np.mean([x[col] for x in xs]), f"turn {i} {key}")
            close(bt["completion_mean"][i], np.mean([x["completion_tokens"] for x in xs]), f"turn {i} completion")


def mt_latency_fit(c: Ctx):
    turns = [x for t in c.raw.trajectories for x in t["turns"]]
    X = np.array([[1.0, x["prompt_tokens"], x["completion_tokens"]] for x in turns])
    y = np.array([x["engine_latency_s"] for x in turns])
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    r2 = 1 - ((y - X @ beta) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    fit = c.result("multiturn")["summary"]["latency_fit"]
    assert fit["n"] == len(turns)
    close(fit["a"], beta[0], "fit a", rel=1e-5, abs_=1e-6)
    close(fit["b"], beta[1], "fit b", rel=1e-5, abs_=1e-9)
    close(fit["c"], beta[2], "fit c", rel=1e-5, abs_=1e-9)
    close(fit["r2"], r2, "fit r2", rel=1e-5, abs_=1e-9)


def mt_latency_bins(c: Ctx):
    turns = [x for t in c.raw.trajectories for x in t["turns"]]
    s = c.result("multiturn")["summary"]
    for key, col in (("latency_by_prompt", "prompt_tokens"), ("latency_by_completion", "completion_tokens")):
        b = s[key]
        for lo, hi, n, mean in zip(b["bin_lo"], b["bin_hi"], b["count"], b["latency_mean"]):
            inside = [x["engine_latency_s"] for x in turns if lo <= max(x[col], 1) < hi]
            assert n == len(inside), f"{key} [{lo}, {hi}) count"
            close(mean, np.mean(inside), f"{key} [{lo}, {hi}) mean")
        assert sum(b["count"]) == len(turns)


def lat_tools(c: Ctx):
    by = defaultdict(list)
    for t in c.raw.trajectories:
        by[t["step"]] += [x["latency_s"] for x in t["tool_calls"]]
    for e in c.result("latency")["tools"]:
        v = np.asarray(by[e["step"]])
        assert e["calls"] == len(v)
        for q in (50, 90, 99):
            close(e[f"p{q}"], float(np.percentile(v, q)), f"step {e['step']} tool p{q}")
        close(e["max"], float(v.max()), f"step {e['step']} tool max")
        close(e["mean"], float(v.mean()), f"step {e['step']} tool mean")


def lat_reward(c: Ctx):
    by = defaultdict(dict)
    for r in c.raw.rewards:
        by[r["step"]][r["rank"]] = r["reward_time_s"]
    for e in c.result("latency")["reward"]:
        v = np.asarray([by[e["step"]][k] for k in sorted(by[e["step"]])])
        for q in (50, 90, 99):
            close(e[f"p{q}"], float(np.percentile(v, q)), f"step {e['step']} reward p{q}")
        close(e["max"], float(v.max()), f"step {e['step']} reward max")
        close(e["mean"], float(v.mean()), f"step {e['step']} reward mean")


def lat_ranks(c: Ctx):
    by = defaultdict(dict)
    for r in c.raw.rewards:
        by[r["step"]][r["rank"]] = r["reward_time_s"]
    for e in c.result("latency")["reward"]:
        assert dict(zip(e["rank"], e["seconds"])) == pytest.approx(by[e["step"]])


def dapo_cards(c: Ctx):
    """Per trainer step generated / kept / used groups and the used token share, from
    dapo_filter_indices.jsonl and the packed-length lines (prompt index = line order)."""
    lines = read_jsonl(c.folder / "dapo_filter_indices.jsonl")
    packed = {int(p.stem.rsplit("_", 1)[1]): read_jsonl(p) for p in step_files(c.folder, "packed_lengths")}
    want: dict = {}
    for line in lines:
        rows = packed[line["workload_step"]]
        w = want.setdefault(line["trainer_step"], {"gen": [], "g": 0, "k": 0, "u": 0, "tok": 0, "used": 0})
        w["gen"].append(line["workload_step"])
        w["g"] += len(rows)
        w["k"] += len(line["kept_prompt_indices"])
        w["u"] += len(line["used_prompt_indices"])
        w["tok"] += sum(sum(r["output"]) for r in rows)
        w["used"] += sum(sum(rows[i]["output"]) for i in line["used_prompt_indices"])
    res = c.result("data_efficiency")
    assert [e["trainer_step"] for e in res["steps"]] == sorted(want)
    for e in res["steps"]:
        w = want[e["trainer_step"]]
        assert e["generation_steps"] == w["gen"]
        assert (e["groups_generated"], e["groups_kept"], e["groups_used"]) == (w["g"], w["k"], w["u"])
        close(e["used_token_share"], w["used"] / w["tok"], f"trainer step {e['trainer_step']} used share")
    total_used = sum(w["used"] for w in want.values())
    close(res["summary"]["used_token_share"], total_used / sum(w["tok"] for w in want.values()), "card value")
    assert res["summary"]["groups_used"] == sum(w["u"] for w in want.values())


# --------------------------------------------------------------------------- the table

PACKED_ONLY, MULTI_ONLY, REWARD_ONLY, SAMPLES = "packed", "multi", "reward", "samples"
TASKS, STAGES, DAPO = "tasks", "stages", "dapo"


def applies(c: Ctx, need: str) -> bool:
    return {
        SAMPLES: bool(c.raw.samples),
        PACKED_ONLY: any(s["dp_rank"] is not None for s in c.raw.samples),
        MULTI_ONLY: bool(c.raw.trajectories),
        REWARD_ONLY: bool(c.raw.rewards),
        # the shared fixtures carry none of these (checked, so a new fixture that does
        # turns the row into "missing" until it gets a recomputation)
        TASKS: bool(c.trace.get("tasks")),
        STAGES: any(s.get("t_step") or s.get("t_gen") for s in c.get("/steps")["items"]),
        DAPO: "data_efficiency" in c.trace.get("analyses", []),
    }[need]


# page -> [(figure, the ids it is shown under, needs, check or None, why missing)]
PAGES = {
    "Overview": [
        ("card Steps", ("card-steps",), SAMPLES, ov_steps, ""),
        ("card Samples (turns, tool calls)", ("card-samples",), SAMPLES, ov_samples, ""),
        ("card Tokens", ("card-tokens",), SAMPLES, ov_tokens, ""),
        ("card Tail ratio (median max/mean)", ("card-tail",), SAMPLES, ov_tail, ""),
        ("card DP imbalance (mean max/mean)", ("card-imbalance",), PACKED_ONLY, ov_imbalance, ""),
        ("card DP imbalance hint: best split saves", ("card-imbalance",), PACKED_ONLY, ov_best_saved, ""),
        ("card Idle share (rollout)", ("card-idle", "overview-cards"), SAMPLES, ov_idle, ""),
        ("card Truncated: by the definition and at the length cap", ("card-truncation",), SAMPLES, ov_truncation, ""),
        ("overview-lengths p50/p90/p99/max per step", ("overview-lengths",), SAMPLES, ov_lengths, ""),
        ("overview-stage-time measured stage seconds", ("overview-stage-time",), STAGES, stage_seconds, ""),
        (
            "card Tokens trained on + overview-data-efficiency",
            ("card-data-efficiency", "overview-data-efficiency"),
            DAPO,
            dapo_cards,
            "",
        ),
    ],
    "Distributions": [
        (
            "dist-box / dist-percentiles response percentiles per step",
            ("dist-box", "dist-percentiles"),
            SAMPLES,
            lambda c: dist_percentiles(c, "response"),
            "",
        ),
        ("dist-box prompt percentiles per step", ("dist-box",), SAMPLES, lambda c: dist_percentiles(c, "prompt"), ""),
        ("dist-box total percentiles per step", ("dist-box",), SAMPLES, lambda c: dist_percentiles(c, "total"), ""),
        (
            "dist-heatmap / dist-cdf response histogram",
            ("dist-heatmap", "dist-cdf"),
            SAMPLES,
            lambda c: dist_hist(c, "response"),
            "",
        ),
        ("dist-heatmap / dist-cdf prompt histogram", ("dist-heatmap",), SAMPLES, lambda c: dist_hist(c, "prompt"), ""),
        ("dist-heatmap / dist-cdf total histogram", ("dist-heatmap",), SAMPLES, lambda c: dist_hist(c, "total"), ""),
        ("per-task views (task selector)", ("dist-box", "dist-percentiles"), TASKS, task_percentiles, ""),
        ("dist-tail max/mean and truncated share", ("dist-tail",), SAMPLES, dist_tail, ""),
        ("dist-tail share at the length cap", ("dist-tail",), SAMPLES, dist_at_cap, ""),
        ("longtail-idle per step", ("longtail-idle",), SAMPLES, lt_idle, ""),
        ("longtail-finish per step (+ tie flag)", ("longtail-finish",), SAMPLES, lt_finish, ""),
        ("longtail-engines per engine", ("longtail-engines",), SAMPLES, lt_engines, ""),
        ("longtail-finish tail seconds (hover)", ("longtail-finish",), SAMPLES, lt_tail_seconds, ""),
    ],
    "Imbalance": [
        ("imb-heatmap recorded load per rank", ("imb-heatmap", "card DP ranks"), PACKED_ONLY, imb_heatmap, ""),
        (
            "imb-ratio recorded max/mean, max/min (+ card)",
            ("imb-ratio", "imb-cards", "card Max / mean", "card Max / min"),
            PACKED_ONLY,
            imb_ratio_recorded,
            "",
        ),
        ("imb-ratio LPT", ("imb-ratio",), PACKED_ONLY, imb_ratio_lpt, ""),
        ("card LPT whole-run", ("card LPT",), PACKED_ONLY, imb_lpt_card, ""),
        ("imb-ratio Karmarkar-Karp", ("imb-ratio",), PACKED_ONLY, imb_ratio_kk, ""),
        ("card KK whole-run", ("imb-kk-saved",), PACKED_ONLY, imb_kk_card, ""),
        ("imb-saving / card Balancing saves (best split)", ("imb-saving", "imb-saved"), PACKED_ONLY, imb_saving, ""),
        ("imb-saving bounds (>= 0, >= LPT, <= lower bound)", ("imb-saving",), PACKED_ONLY, imb_saving_bounds, ""),
    ],
    "Multi-turn & reward": [
        ("mt-counts turns / tool calls histograms", ("mt-counts",), MULTI_ONLY, mt_counts, ""),
        ("mt-steps turns / tool calls per step", ("mt-steps",), MULTI_ONLY, mt_steps, ""),
        ("mt-cache prefix-cache hit rate", ("mt-cache",), MULTI_ONLY, mt_cache, ""),
        ("mt-context context growth by turn", ("mt-context",), MULTI_ONLY, mt_context, ""),
        ("mt-latency fit", ("mt-latency",), MULTI_ONLY, mt_latency_fit, ""),
        ("mt-latency binned means", ("mt-latency",), MULTI_ONLY, mt_latency_bins, ""),
        ("lat-tools tool latency per step", ("lat-tools",), MULTI_ONLY, lat_tools, ""),
        ("lat-reward reward seconds per step", ("lat-reward",), REWARD_ONLY, lat_reward, ""),
        ("lat-reward-ranks reward per rank", ("lat-reward-ranks",), REWARD_ONLY, lat_ranks, ""),
    ],
    "Samples": [
        ("samples-total: samples per step", ("samples-total",), SAMPLES, samples_total, ""),
        ("samples-table truncated column and filter, per step", ("samples-table",), SAMPLES, samples_truncated, ""),
        ("samples-table sorted longest first (lengths, ranks)", ("samples-table",), SAMPLES, samples_sorted, ""),
        ("request-timeline: engine + tool seconds per trajectory", ("request-timeline",), MULTI_ONLY, req_timeline, ""),
        ("sample-turns / sample-tokens of a trajectory", ("sample-turns", "sample-tokens"), MULTI_ONLY, turns_of, ""),
    ],
}
# the audited pages, by their name in the dashboard's page registry (the module showing
# each page's figures is found there: `page_modules`; its ids are checked against the rows)
AUDITED_PAGES = (*PAGES, "Compare", "Simulate")
# where an analysis shows (its `shows`, core/analysis/registry.py) that the audit does not
# recompute yet, and why: every other place must be an audited page
UNAUDITED_PLACES = {
    "compare": "Compare many draws the same results its runs' own pages show, side by side",
    "gpu": "the GPU timeline page: its analyses are checked against HTA in tests/core/analysis/test_gpu_hta.py",
}
# cards a page builds from a pure builder: (module, id prefix)
CARD_BUILDERS = {
    "Overview": ("dashboard/views/overview.py", "card-"),
    "Simulate": ("dashboard/figures/simulation.py", "card-sim-"),
}


def run_table(c: Ctx, pages: dict | None = None) -> None:
    for page, rows in (pages or PAGES).items():
        for figure, _ids, need, check, why in rows:
            key = (c.name, page, figure)
            if not applies(c, need):
                AUDIT[key] = "n/a"
            elif check is None:
                AUDIT[key] = f"missing: {why}"
            else:
                try:
                    check(c)
                    AUDIT[key] = "audited"
                except AssertionError as exc:
                    AUDIT[key] = "FAILED"
                    FAILURES.append(f"{c.name} / {page} / {figure}: {str(exc).splitlines()[0]}")


# --------------------------------------------------------------------------- ingest + run


def upload(api, paths: list[Path]) -> dict:
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in paths]
    r = api.post("/api/v1/traces", files=files)
    if r.status_code == 202:  # above the inline limit: a worker ingests it
        job = wait_for_job(api, r.json()["job"]["id"])
        assert job["status"] == "succeeded", job
        return api.get(f"/api/v1/traces/{r.json()['trace']['id']}").json()
    assert r.status_code == 201, r.text
    return r.json()


def results_of(api, trace_id: int) -> dict[str, dict]:
    out = {}
    for j in api.get(f"/api/v1/traces/{trace_id}/analyses").json()["items"]:
        job = wait_for_job(api, j["id"])
        assert job["status"] == "succeeded", (j["kind"], job["error"])
        out[j["kind"]] = job["result"]
    return out


@SQLITE
@pytest.mark.parametrize("run", [*PACKED, MULTI])
def test_every_figure_of_a_polytrace_run(api, audit_worker, shared_fixtures, run):
    folder = shared_fixtures / "polytrace" / run
    trace = upload(api, sorted(p for p in folder.iterdir() if p.is_file()))
    trace = api.get(f"/api/v1/traces/{trace['id']}").json()
    c = Ctx(run, Raw(folder), trace, api, results_of(api, trace["id"]), folder)
    before = len(FAILURES)
    run_table(c)
    assert FAILURES[before:] == []


@SQLITE
def test_every_figure_of_a_synthetic_dapo_run(api, audit_worker, tmp_path):
    """The shared fixtures have no DAPO marks: a run written by tests/helpers.py (the real
    file shape) is audited the same way, data-efficiency card and chart included."""
    from helpers import dapo_run, write_dapo_dir, zip_folder

    folder = write_dapo_dir(tmp_path / "synthetic_dapo", *dapo_run(gen_steps=6, prompts=12, n=4, train_batch_size=8))
    r = api.post("/api/v1/traces", files=[("files", ("run.zip", zip_folder(folder), "application/zip"))])
    assert r.status_code == 201, r.text
    trace = api.get(f"/api/v1/traces/{r.json()['id']}").json()
    c = Ctx("synthetic DAPO run", Raw(folder), trace, api, results_of(api, trace["id"]), folder)
    before = len(FAILURES)
    run_table(c)
    assert FAILURES[before:] == []


def kineto_raw(path: Path) -> dict:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    return {
        "steps": sorted(
            {e["name"] for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")}
        ),
        "gpu_events": sum(
            1 for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        ),
    }


def hta_reference() -> dict[str, float]:
    """idle % per file, from the fixtures README (computed with HTA 0.5.0)."""
    import re

    text = (SHARED_FIXTURES / "README.md").read_text()
    rows = re.findall(r"\|\s*`([^`]+\.json\.gz)`\s*\|\s*\d+\s*\|(?:\s*[\d.]+\s*\|){4}\s*([\d.]+)\s*\|", text)
    return {name: float(idle) for name, idle in rows}


def hta_per_rank(paths: list[Path]) -> dict:
    """{(rank, "idle_pct" | "compute_pct"): value} from the README table for these files."""
    import re

    text = (SHARED_FIXTURES / "README.md").read_text()
    rows = re.findall(
        r"\|\s*`([^`]+\.json\.gz)`\s*\|\s*(\d+)\s*\|(?:\s*[\d.]+\s*\|){4}\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", text
    )
    names = {p.name for p in paths}
    out = {}
    for name, rank, idle, compute in rows:
        if name in names:
            out[(int(rank), "idle_pct")], out[(int(rank), "compute_pct")] = float(idle), float(compute)
    return out


# the Overview's figures of a Kineto trace (checked in test_kineto_overview_figures)
KINETO_ROWS = [
    ("card Steps (= ProfilerStep windows, list and overview)", ("card-steps",)),
    ("card Samples hint: GPU events", ("card-samples",)),
    ("overview-gpu temporal breakdown per rank (HTA reference)", ("overview-gpu",)),
    ("card Idle share (GPU, HTA reference)", ("card-idle",)),
]


@SQLITE
def test_kineto_overview_figures(api, audit_worker, shared_fixtures):
    paths = [shared_fixtures / "kineto" / n for n in KINETO]
    trace = upload(api, paths)
    trace = api.get(f"/api/v1/traces/{trace['id']}").json()
    listed = {t["id"]: t for t in api.get("/api/v1/traces").json()["items"]}[trace["id"]]
    results = results_of(api, trace["id"])
    raws = [kineto_raw(p) for p in paths]
    name = "kineto sampled_rank-0/1"
    checks = {
        "card Steps (= ProfilerStep windows, list and overview)": lambda: (
            trace["n_steps"] == len(set().union(*[set(r["steps"]) for r in raws])) == listed["n_steps"]
            or pytest.fail(
                f"n_steps overview {trace['n_steps']}, list {listed['n_steps']}, "
                f"ProfilerStep windows {len(set().union(*[set(r['steps']) for r in raws]))}"
            )
        ),
        "card Samples hint: GPU events": lambda: (
            trace["n_gpu_events"] == sum(r["gpu_events"] for r in raws)
            or pytest.fail(f"{trace['n_gpu_events']} != {sum(r['gpu_events'] for r in raws)}")
        ),
        "overview-gpu temporal breakdown per rank (HTA reference)": lambda: [
            close(row[key], ref[(row["rank"], key)], f"rank {row['rank']} {key}", rel=0, abs_=0.5)
            for ref in [hta_per_rank(paths)]
            for row in results["gpu_timeline"]["temporal"]
            for key in ("idle_pct", "compute_pct")
        ],
        "card Idle share (GPU, HTA reference)": lambda: close(
            np.mean([r["idle_pct"] for r in results["gpu_timeline"]["temporal"]]),
            np.mean([hta_reference()[p.name] for p in paths]),
            "GPU idle %",
            rel=0,
            abs_=0.5,
        ),
    }
    assert list(checks) == [figure for figure, _ids in KINETO_ROWS]
    before = len(FAILURES)
    for figure, check in checks.items():
        try:
            check()
            AUDIT[(name, "Overview", figure)] = "audited"
        except (AssertionError, pytest.fail.Exception) as exc:
            AUDIT[(name, "Overview", figure)] = "FAILED"
            FAILURES.append(f"{name} / Overview / {figure}: {str(exc).splitlines()[0]}")
    assert FAILURES[before:] == []


def record(name: str, page: str, figure: str, check) -> None:
    """Run one check of a figure outside the per-fixture table and note the outcome."""
    try:
        check()
        AUDIT[(name, page, figure)] = "audited"
    except AssertionError as exc:
        AUDIT[(name, page, figure)] = "FAILED"
        FAILURES.append(f"{name} / {page} / {figure}: {str(exc).splitlines()[0]}")


def native_run(folder: Path) -> Path:
    """A native CSV run with tasks, per-sample stop reasons on some rows and a verl metric
    log (stage timings): the figures the PolyTrace fixtures cannot show."""
    rng = np.random.default_rng(7)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["step,group_idx,sample_idx,prompt_len,response_len,task,truncated,dp_rank"]
    for step in range(4):
        for g in range(12):
            task = ("math", "code")[g % 2]
            for i in range(4):
                length = 2048 if rng.random() < 0.08 else int(rng.lognormal(6, 0.8)) + 1
                # the stop reason: for length at the cap, except where the response ended there
                flag = "true" if length >= 2048 and (g + i) % 3 else "false"
                lines.append(f"{step},{g},{i},{int(rng.integers(50, 400))},{length},{task},{flag},{g % 4}")
    (folder / "samples.csv").write_text("\n".join(lines) + "\n")
    log = [{"step": s, "data": {"timing_s/gen": 30.0 + s, "timing_s/update_actor": 9.5, "timing_s/step": 45.0 + 2 * s}}
           for s in range(4)]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    return folder


@SQLITE
def test_every_figure_of_a_native_run_with_tasks_and_stage_timings(api, audit_worker, tmp_path):
    folder = native_run(tmp_path / "native_tasks")
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in sorted(folder.iterdir())]
    r = api.post("/api/v1/traces", files=files, data={"max_response_len": "2048"})
    assert r.status_code == 201, r.text
    trace = api.get(f"/api/v1/traces/{r.json()['id']}").json()
    raw = Raw(folder)
    raw.max_response_len = 2048  # given at upload
    c = Ctx("synthetic native run (tasks, stage timings)", raw, trace, api, results_of(api, trace["id"]), folder)
    before = len(FAILURES)
    run_table(c)
    assert FAILURES[before:] == []
    assert AUDIT[(c.name, "Distributions", "per-task views (task selector)")] == "audited"
    assert AUDIT[(c.name, "Overview", "overview-stage-time measured stage seconds")] == "audited"


# compare ------------------------------------------------------------------


def pooled_hist(c: Ctx, edges: np.ndarray) -> list[int]:
    return log_hist(np.asarray([s["response"] for s in c.raw.samples], dtype=np.float64), edges)


COMPARE = [
    ("cmp-lengths: each trace's percentiles per step", ("cmp-lengths",), "pair"),
    ("cmp-cdf: each trace's pooled histogram", ("cmp-cdf",), "pair"),
    ("cmp-stages-a / -b: measured stage seconds", ("cmp-stages-a", "cmp-stages-b"), "stages"),
    ("cmp-diff-*: kernel counts and times, ProfilerSteps paired", ("cmp-diff-chart", "cmp-diff-summary", "cmp-diff-table"), "kineto"),
]  # fmt: skip


def kineto_first_step_ops(path: Path) -> dict[str, int]:
    """Op and kernel counts of a raw Kineto file's first ProfilerStep (HTA's default window),
    by name, on the annotation's own rank: events starting inside the step's span."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    steps = sorted((e for e in xs if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    first = steps[0]
    lo, hi = first["ts"], first["ts"] + first["dur"]
    counts: dict[str, int] = defaultdict(int)
    for e in xs:
        if lo <= e["ts"] < hi:
            counts[e["name"]] += 1
    return counts


@SQLITE
def test_compare_page_figures(api, audit_worker, shared_fixtures, tmp_path):
    name = "compare: verl video vs verl DAPO; native run A vs B; Kineto rank 0 vs 1"
    ctxs = []
    for run in PACKED[:2]:
        folder = shared_fixtures / "polytrace" / run
        trace = upload(api, sorted(p for p in folder.iterdir() if p.is_file()))
        ctxs.append(Ctx(run, Raw(folder), api.get(f"/api/v1/traces/{trace['id']}").json(), api, {}, folder))
    a, b = ctxs

    def lengths():
        for c in (a, b):  # the page draws each trace's per-step percentiles from its summaries
            dist_percentiles(c, "response", keys=(50, 90, 99))

    def cdf():
        for c in (a, b):
            payload = c.summaries("response")
            pooled = np.sum([x["hist"] for x in payload["steps"]], axis=0).tolist()
            assert pooled == pooled_hist(c, np.asarray(payload["bin_edges"], dtype=np.float64))

    natives = []
    for i in range(2):
        folder = native_run(tmp_path / f"cmp_native_{i}")
        files = [("files", (p.name, p.read_bytes() + b"\n" * i, "text/plain")) for p in sorted(folder.iterdir())]
        r = api.post("/api/v1/traces", files=files)
        assert r.status_code == 201, r.text
        natives.append(Ctx(f"native {i}", Raw(folder), r.json(), api, {}, folder))

    def stages():
        for c in natives:
            stage_seconds(c)

    kin = [upload(api, [shared_fixtures / "kineto" / n]) for n in KINETO]

    def diff():
        d = api.get(f"/api/v1/traces/{kin[0]['id']}/gpu-diff", params={"test_trace_id": kin[1]["id"]}).json()
        want_a, want_b = (kineto_first_step_ops(shared_fixtures / "kineto" / n) for n in KINETO)
        rows = d["rows"]
        got = {n: (ca, cb) for n, ca, cb in zip(rows["name"], rows["control_counts"], rows["test_counts"])}
        for n in set(want_a) | set(want_b):
            if n.startswith("ProfilerStep#"):
                continue
            assert got.get(n) == (want_a.get(n, 0), want_b.get(n, 0)), f"{n}: {got.get(n)}"
        paired = [n for n in rows["name"] if n.startswith("ProfilerStep#")]
        assert len(paired) == 1 and (" / #" in paired[0] or paired[0] in want_a), paired  # one row, not deleted + added

    before = len(FAILURES)
    for (figure, _ids, _data), check in zip(COMPARE, [lengths, cdf, stages, diff], strict=True):
        record(name, "Compare", figure, check)
    assert FAILURES[before:] == []


# simulate -----------------------------------------------------------------

SIMULATE = [
    ("sim-pred-vs-measured: measured rollout per step (raw trajectories)", ("sim-pred-vs-measured",)),
    ("sim-accuracy-table / card: accuracy per step and mean over non-partial steps",
     ("sim-accuracy-table", "card-sim-accuracy-rollout", "sim-cards")),
    ("partial steps flagged (fewer trajectories than the median step's)", ("sim-pred-vs-measured",)),
    ("card Speedup / sim-speedup: makespan A / B and the saving", ("card-sim-speedup", "sim-speedup")),
    ("cards Time A / B and idle share; sim-idle by cause", ("card-sim-makespan-a", "card-sim-makespan-b", "sim-idle")),
    ("sim-pred-vs-measured / sim-timeline: predicted rollout (token-by-token stepper)",
     ("sim-pred-vs-measured", "sim-timeline")),
]  # fmt: skip


def wait_replay(api, body: dict) -> dict:
    r = api.post("/api/v1/simulations", json=body)
    assert r.status_code in (200, 202), r.text
    job = wait_for_job(api, r.json()["id"], timeout=300)
    assert job["status"] == "succeeded", job["error"]
    return job


@SQLITE
def test_simulate_page_figures(api, audit_worker, shared_fixtures, tmp_path):
    import importlib.util

    name = "simulate: Search-R1 (measured), synthetic packed run (stepper)"
    folder = shared_fixtures / "polytrace" / MULTI
    trace = upload(api, sorted(p for p in folder.iterdir() if p.is_file()))
    raw = Raw(folder)
    body = {"trace_id": trace["id"], "cluster": {"gpu": "H100", "n_gpus": 8}, "model": "Qwen2.5-7B",
            "policy": "sync", "compare_policy": "one_step_off", "uncertainty": False}  # fmt: skip
    job = wait_replay(api, body)
    res = job["result"]
    acc = res["accuracy"]
    by_step = traj_by_step(Ctx(MULTI, raw, trace, api, {}, folder))
    measured = {
        s: max(sum(t["engine_latency_s"] for t in tr["turns"]) + sum(x["latency_s"] for x in tr["tool_calls"])
               for tr in ts)
        for s, ts in by_step.items()
    }  # fmt: skip
    counts = {s: len(ts) for s, ts in by_step.items()}

    def measured_rollout():
        rows = [r for r in acc["steps"] if (r.get("rollout_s") or {}).get("measured") is not None]
        assert rows
        for r in rows:
            close(r["rollout_s"]["measured"], measured[r["step"]], f"step {r['step']} measured rollout")

    def accuracy():
        rows = [r for r in acc["steps"] if (r.get("rollout_s") or {}).get("predicted") is not None]
        for r in rows:
            f = r["rollout_s"]
            close(f["accuracy"], 1 - abs(f["predicted"] - f["measured"]) / f["measured"], f"step {r['step']} accuracy")
        kept = [r["rollout_s"]["accuracy"] for r in rows if not r["partial"]]
        close(acc["mean"]["rollout_s_accuracy"], float(np.mean(kept)) if kept else None, "mean accuracy")

    def partial():
        med = float(np.median(list(counts.values())))
        want = sorted(s for s, n in counts.items() if n < 0.5 * med)
        assert sorted(acc["partial_steps"]) == want == [5], (acc["partial_steps"], want)

    def speedup():
        total = res["compare"]["total"]
        close(total["speedup"], res["a"]["makespan_s"] / res["b"]["makespan_s"], "speedup")
        close(total["saved_s"], res["a"]["makespan_s"] - res["b"]["makespan_s"], "saved seconds")
        for r in res["compare"]["per_step"]:
            close(r["speedup"], r["time_a_s"] / r["time_b_s"], f"step {r['step']} speedup")

    def makespans():
        for key in ("a", "b"):
            sim = res[key]
            idle = sum(sim["idle_gpu_s"].values())
            close(sum(sum(s["idle_gpu_s"].values()) for s in sim["steps"]), idle, f"{key} idle by cause", rel=1e-6)
            close(sim["idle_fraction"], idle / (sim["n_gpus"] * sim["makespan_s"]), f"{key} idle share", rel=1e-6)

    # predicted rollout against the token-by-token reference stepper (bench/simulator.py),
    # on a small synthetic run the stepper replays in well under a second
    spec = importlib.util.spec_from_file_location("bench_simulator", ROOT_DIR / "bench" / "simulator.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    small = tmp_path / "small"
    small.mkdir()
    rows = [{"step": s, "rank": 0, "dp_rank": g % 2, "tp_rank": 0, "local_index": g, "input": 40 + 7 * g,
             "output": [20 + (11 * g + 5 * i + 3 * s) % 90 for i in range(4)], "n_sampling": 4, "validate": False}
            for s in range(2) for g in range(8)]  # fmt: skip
    for s in range(2):
        (small / f"packed_lengths_step_{s}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows if r["step"] == s)
        )
    small_trace = upload(api, sorted(small.iterdir()))
    replay = wait_replay(api, {"trace_id": small_trace["id"], "cluster": {"gpu": "H100", "n_gpus": 2},
                               "model": "Qwen2.5-7B", "policy": "sync", "calibrate": False})  # fmt: skip

    def stepper():
        from core.simulator import ClusterConfig, EngineLimits, ModelConfig, Policy, workload_from_columns
        from core.simulator.policies.base import Env
        from core.simulator.predictor import roofline_coefficients

        # the files' samples in their order: a step's groups by line, a group's samples by position
        flat = [(r["step"], g, i, r["input"], o, r["dp_rank"]) for s in range(2)
                for g, r in enumerate(x for x in rows if x["step"] == s) for i, o in enumerate(r["output"])]  # fmt: skip
        names = ("step", "group_idx", "sample_idx", "prompt_len", "response_len", "dp_rank")
        steps = workload_from_columns({k: np.asarray(v) for k, v in zip(names, zip(*flat))})
        p = replay["params"]  # the configuration the replay resolved (layout from the GPU budget)
        cluster, model = ClusterConfig.from_dict(p["cluster"]), ModelConfig.from_dict(p["model"])
        limits = EngineLimits.from_dict(p["limits"])
        env = Env(cluster, model, limits, Policy(kind="sync"), roofline_coefficients(cluster, model),
                  limits.kv_capacity(cluster, model))  # fmt: skip
        got = {s["step"]: s["stages"]["rollout"] for s in replay["result"]["a"]["steps"]}
        for w in steps:
            close(got[w.step], bench.stepper_rollout(env, w), f"step {w.step} predicted rollout", rel=1e-6)

    before = len(FAILURES)
    checks = [measured_rollout, accuracy, partial, speedup, makespans, stepper]
    for (figure, _ids), check in zip(SIMULATE, checks, strict=True):
        record(name, "Simulate", figure, check)
    assert FAILURES[before:] == []


# live ---------------------------------------------------------------------

LIVE = [
    ("trace-live-steps: steps so far, after each attached step", ("trace-live-steps",)),
    ("overview cards on a live trace: the re-run long-tail idle share after each step", ("card-idle",)),
]


@SQLITE
def test_live_page_figures(api, audit_worker, shared_fixtures):
    """A live trace (POST /traces/live) growing a step at a time: what its pages show after
    each attach is the raw files' so far, once the re-run analyses finish."""
    name = "live: verl DAPO, a step at a time"
    folder = shared_fixtures / "polytrace" / PACKED[1]
    files = step_files(folder, "packed_lengths")[:3]
    live = api.post("/api/v1/traces/live", json={"name": "audit live"}).json()
    assert live["live"] is True

    def grows():
        for i, path in enumerate(files):
            r = api.post(f"/api/v1/traces/{live['id']}/files",
                         files=[("files", (path.name, path.read_bytes(), "text/plain"))])  # fmt: skip
            assert r.status_code == 201, r.text
            t = api.get(f"/api/v1/traces/{live['id']}").json()
            assert t["n_steps"] == i + 1 and t["live"], t
            sofar = Raw.__new__(Raw)
            sofar.__dict__.update(Raw(folder).__dict__)
            steps = {int(p.stem.rsplit("_", 1)[1]) for p in files[: i + 1]}
            sofar.samples = [s for s in sofar.samples if s["step"] in steps]
            sofar.steps = sorted(steps)
            c = Ctx("live", sofar, t, api, {}, folder)
            jobs = [
                j for j in api.get(f"/api/v1/traces/{live['id']}/analyses").json()["items"] if j["kind"] == "longtail"
            ]
            newest = wait_for_job(api, max(j["id"] for j in jobs))
            assert newest["status"] == "succeeded", newest["error"]
            c.results = {"longtail": newest["result"]}
            ov_idle(c)

    record(name, "Live", LIVE[0][0], grows)
    AUDIT[(name, "Live", LIVE[1][0])] = AUDIT[(name, "Live", LIVE[0][0])]  # the same pass checks both
    api.post(f"/api/v1/traces/{live['id']}/close")
    assert not [f for f in FAILURES if f.startswith(name)]


# the list against the pages ----------------------------------------------------


def _calls(tree) -> list:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _name(call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


FIGURE_ID = re.compile(r".*-(table|total|cards|summary)$")


def registered_pages() -> dict[str, tuple[str, str]]:
    """{page name: (module, path)} of the dashboard's page registry, read from each
    dashboard/pages module's `dash.register_page(...)` call."""
    out = {}
    for path in sorted((ROOT_DIR / "dashboard" / "pages").glob("*.py")):
        for call in _calls(ast.parse(path.read_text())):
            if _name(call) == "register_page":
                kw = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
                out[kw["name"]] = (path.stem, kw.get("path") or kw.get("path_template"))
    return out


def page_modules() -> dict[str, str]:
    """{audited page: the module showing its figures}."""
    pages = registered_pages()
    assert set(AUDITED_PAGES) <= set(pages), f"not a page name: {set(AUDITED_PAGES) - set(pages)}"
    return {name: pages[name][0] for name in AUDITED_PAGES}


def place_page(place: str) -> str:
    """The page an analysis' place (`AnalysisSpec.shows`) is: "overview" a trace's Overview,
    "compare" Compare many, else a trace page by its path under /traces/<id>/."""
    path = {"overview": "/traces/<trace_id>", "compare": "/compare/many"}.get(place, f"/traces/<trace_id>/{place}")
    return next((name for name, (_m, p) in registered_pages().items() if p == path), f"no page at {path}")


def test_every_place_an_analysis_shows_is_audited():
    """A new analysis shown on a page (its `shows`) enrols that page here: the page must be
    audited (so its figures need rows above), or say in UNAUDITED_PLACES why not."""
    from core.analysis.registry import ANALYSES

    places = {place for spec in ANALYSES.values() for place in spec.shows}
    pages = {place: place_page(place) for place in places}
    assert {p: page for p, page in pages.items() if p not in UNAUDITED_PLACES and page not in AUDITED_PAGES} == {}
    assert set(UNAUDITED_PLACES) <= places  # no excuse outlives its place


def page_figure_ids(page: str) -> set[str]:
    """The figures a page shows, read from its own module: chart ids (graph(...),
    dcc.Graph(id=...)), tables and card containers by id, cards by card_id (else
    "card <label>"), and the cards its pure builder makes ("<prefix><key>")."""
    tree = ast.parse((ROOT_DIR / "dashboard" / "pages" / f"{page_modules()[page]}.py").read_text())
    out: set[str] = set()
    for call in _calls(tree):
        name = _name(call)
        if name == "graph" and call.args and isinstance(call.args[0], ast.Constant):
            out.add(call.args[0].value)
        kw = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
        if name == "card":
            if "card_id" in kw:
                out.add(kw["card_id"])
            elif call.args and isinstance(call.args[0], ast.Constant):
                out.add(f"card {call.args[0].value}")
        elif isinstance(kw.get("id"), str) and (name == "Graph" or FIGURE_ID.match(kw["id"])):
            out.add(kw["id"])
    if page in CARD_BUILDERS:
        module, prefix = CARD_BUILDERS[page]
        for call in _calls(ast.parse((ROOT_DIR / module).read_text())):
            if _name(call) == "Card" and call.args and isinstance(call.args[0], ast.Constant):
                out.add(prefix + call.args[0].value)
        for node in ast.walk(ast.parse((ROOT_DIR / module).read_text())):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and k.value == "key" and isinstance(v, ast.Constant):
                        out.add(prefix + v.value)
    return out


def audited_ids() -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for page, rows in PAGES.items():
        for _figure, ids, _need, check, _why in rows:
            if check is not None:
                out[page].update(ids)
    for page, rows in (("Compare", COMPARE), ("Simulate", SIMULATE), ("Live", LIVE), ("Overview", KINETO_ROWS)):
        for row in rows:
            out[page].update(row[1])
    return out


def test_the_list_covers_every_figure_the_pages_show():
    """Every chart, card and figure table of the audited pages is in the list above with a
    recomputation (a page's new figure fails here until it gets one)."""
    covered = audited_ids()
    missing = {page: sorted(page_figure_ids(page) - covered[page]) for page in AUDITED_PAGES}
    assert {p: m for p, m in missing.items() if m} == {}
    stale = {page: sorted(covered[page] - page_figure_ids(page)) for page in AUDITED_PAGES}
    assert {p: m for p, m in stale.items() if m} == {}  # no row names a figure its page lost


def audit_counts() -> dict[str, int]:
    states = list(AUDIT.values())
    return {
        "audited": states.count("audited"),
        "missing": sum(1 for s in states if s.startswith("missing")),
        "failed": states.count("FAILED"),
        "n/a": states.count("n/a"),
    }


def audit_report() -> list[str]:
    counts = audit_counts()
    lines = [
        f"truth audit: {counts['audited']} figures audited, {counts['missing']} still missing an independent "
        f"recomputation, {counts['failed']} failed ({counts['n/a']} not applicable to their fixture)"
    ]
    missing = sorted({(page, fig, state) for (_f, page, fig), state in AUDIT.items() if state.startswith("missing")})
    lines += [f"  missing: {page} / {fig} ({state[9:]})" for page, fig, state in missing]
    return lines


def test_zz_audit_counts(capsys):
    """Last: the audited and missing counts (also printed in the session summary)."""
    if not AUDIT:
        pytest.skip("no fixture was audited in this run")
    with capsys.disabled():
        print("\n" + "\n".join(audit_report()))
    counts = audit_counts()
    assert counts["failed"] == 0, FAILURES
    assert counts["audited"] > 0
    # a figure shown without an independent recomputation fails the audit
    assert counts["missing"] == 0, [k for k, v in AUDIT.items() if v.startswith("missing")]
