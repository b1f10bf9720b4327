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

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

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


def dist_tail(c: Ctx):
    r = c.raw.by_step("response")
    payload = c.summaries("response")
    cap = payload["max_response_len"]
    for x in payload["steps"]:
        v = r[x["step"]]
        close(x["tail_ratio"], v.max() / v.mean(), f"step {x['step']} tail ratio")
        close(x["truncation_rate"], float((v >= cap).mean()) if cap else None, f"step {x['step']} at-cap share")


def dist_truncation_flag(c: Ctx):
    flags = defaultdict(list)
    for t in c.raw.trajectories:
        flags[t["step"]].append(t["finish_reason"] == "length")
    at_cap = defaultdict(list)
    for t in c.raw.trajectories:
        at_cap[t["step"]].append(t["final_response_len"] >= t["max_response_len"])
    payload = c.summaries("response")
    assert payload["max_response_len"] == c.raw.max_response_len
    for x in payload["steps"]:
        close(x["truncation_rate_flag"], float(np.mean(flags[x["step"]])), f"step {x['step']} engine stop share")
        close(x["truncation_rate"], float(np.mean(at_cap[x["step"]])), f"step {x['step']} at-cap share")


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
        if c.raw.trajectories:
            ts = sorted(s["time"] for s in c.raw.samples if s["step"] == e["step"])
            k = max(math.ceil(0.9 * len(ts) - 1e-9), 1)
            close(e["tail_seconds"], ts[-1] - ts[k - 1], f"step {e['step']} tail seconds")
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


# page -> [(figure, needs, check or None, why missing)]
PAGES = {
    "Overview": [
        ("card Steps", SAMPLES, ov_steps, ""),
        ("card Samples (turns, tool calls)", SAMPLES, ov_samples, ""),
        ("card Tokens", SAMPLES, ov_tokens, ""),
        ("card Tail ratio (median max/mean)", SAMPLES, ov_tail, ""),
        ("card DP imbalance (mean max/mean)", PACKED_ONLY, ov_imbalance, ""),
        ("card DP imbalance hint: best split saves", PACKED_ONLY, ov_best_saved, ""),
        ("card Idle share (rollout)", SAMPLES, ov_idle, ""),
        ("overview-lengths p50/p90/p99/max per step", SAMPLES, ov_lengths, ""),
        ("overview-stage-time measured stage seconds", STAGES, None, "no fixture has verl stage timings"),
        (
            "card Tokens trained on + overview-data-efficiency",
            DAPO,
            dapo_cards,
            "",
        ),
    ],
    "Distributions": [
        (
            "dist-box / dist-percentiles response percentiles per step",
            SAMPLES,
            lambda c: dist_percentiles(c, "response"),
            "",
        ),
        ("dist-box prompt percentiles per step", SAMPLES, lambda c: dist_percentiles(c, "prompt"), ""),
        ("dist-box total percentiles per step", SAMPLES, lambda c: dist_percentiles(c, "total"), ""),
        ("dist-heatmap / dist-cdf response histogram", SAMPLES, lambda c: dist_hist(c, "response"), ""),
        ("dist-heatmap / dist-cdf prompt histogram", SAMPLES, lambda c: dist_hist(c, "prompt"), ""),
        ("dist-heatmap / dist-cdf total histogram", SAMPLES, lambda c: dist_hist(c, "total"), ""),
        ("per-task views (task selector)", TASKS, None, "no fixture has task ids"),
        ("dist-tail max/mean and at-cap share", SAMPLES, dist_tail, ""),
        ("dist-tail engine stop reason share", MULTI_ONLY, dist_truncation_flag, ""),
        ("longtail-idle per step", SAMPLES, lt_idle, ""),
        ("longtail-finish per step (+ tie flag)", SAMPLES, lt_finish, ""),
        ("longtail-engines per engine", SAMPLES, lt_engines, ""),
        ("longtail-finish tail seconds (hover)", SAMPLES, lt_tail_seconds, ""),
    ],
    "Imbalance": [
        ("imb-heatmap recorded load per rank", PACKED_ONLY, imb_heatmap, ""),
        ("imb-ratio recorded max/mean, max/min (+ card)", PACKED_ONLY, imb_ratio_recorded, ""),
        ("imb-ratio LPT", PACKED_ONLY, imb_ratio_lpt, ""),
        ("card LPT whole-run", PACKED_ONLY, imb_lpt_card, ""),
        ("imb-ratio Karmarkar-Karp", PACKED_ONLY, imb_ratio_kk, ""),
        ("card KK whole-run", PACKED_ONLY, imb_kk_card, ""),
        ("imb-saving / card Balancing saves (best split)", PACKED_ONLY, imb_saving, ""),
        ("imb-saving bounds (>= 0, >= LPT, <= lower bound)", PACKED_ONLY, imb_saving_bounds, ""),
    ],
    "Multi-turn & reward": [
        ("mt-counts turns / tool calls histograms", MULTI_ONLY, mt_counts, ""),
        ("mt-steps turns / tool calls per step", MULTI_ONLY, mt_steps, ""),
        ("mt-cache prefix-cache hit rate", MULTI_ONLY, mt_cache, ""),
        ("mt-context context growth by turn", MULTI_ONLY, mt_context, ""),
        ("mt-latency fit", MULTI_ONLY, mt_latency_fit, ""),
        ("mt-latency binned means", MULTI_ONLY, mt_latency_bins, ""),
        ("lat-tools tool latency per step", MULTI_ONLY, lat_tools, ""),
        ("lat-reward reward seconds per step", REWARD_ONLY, lat_reward, ""),
        ("lat-reward-ranks reward per rank", REWARD_ONLY, lat_ranks, ""),
    ],
}


def run_table(c: Ctx) -> None:
    for page, rows in PAGES.items():
        for figure, need, check, why in rows:
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
    before = len(FAILURES)
    for figure, check in checks.items():
        try:
            check()
            AUDIT[(name, "Overview", figure)] = "audited"
        except (AssertionError, pytest.fail.Exception) as exc:
            AUDIT[(name, "Overview", figure)] = "FAILED"
            FAILURES.append(f"{name} / Overview / {figure}: {str(exc).splitlines()[0]}")
    assert FAILURES[before:] == []


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
