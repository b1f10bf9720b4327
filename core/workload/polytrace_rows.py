"""PolyTrace rows (already parsed JSON dicts) to the column dicts of backend/formats/base.py.

Pure and small, so tests, benchmarks and the workload generator can go from PolyTrace
files to `core.simulator.workload_from_columns` without the database. The real
readers (backend/formats) stay the source of truth for uploads; these helpers only
handle well-formed rows.

- `packed_rows_to_columns(rows)`: ``packed_lengths_step_N.jsonl`` rows (one prompt
  group per row) -> ``samples`` columns; group_idx is the row's position within its
  step (ordered by dp_rank, rank, local_index, as PolyTrace's own loader does).
- `multiturn_rows_to_columns(rows)`: ``multiturn_workload_step_N.jsonl`` rows (one
  trajectory per row) -> ``samples``, ``turns``, ``tool_calls`` columns.
- `reward_rows_to_columns(rows)`: ``reward_timings_step_N.jsonl`` -> ``rank_timings``.
"""

from __future__ import annotations

import numpy as np

# The `turns` columns of a multi-turn trajectory (finish_reason aside, which only the
# upload readers keep).
TURN_COLUMNS = (
    "step",
    "group_idx",
    "sample_idx",
    "turn",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "engine_latency_s",
    "tool_call_count",
)


def packed_rows_to_columns(rows: list[dict]) -> dict[str, np.ndarray]:
    rows = sorted(
        rows,
        key=lambda r: (
            int(r.get("step", 0)),
            int(r.get("dp_rank", 0)),
            int(r.get("rank", 0)),
            int(r.get("local_index", 0)),
        ),
    )
    step, grp, sidx, prompt, resp, dp, validate = [], [], [], [], [], [], []
    counters: dict[int, int] = {}
    for r in rows:
        s = int(r.get("step", 0))
        g = counters.get(s, 0)
        counters[s] = g + 1
        out = r["output"]
        n = len(out)
        step += [s] * n
        grp += [g] * n
        sidx += list(range(n))
        prompt += [int(r["input"])] * n
        resp += [int(x) for x in out]
        dp += [int(r.get("dp_rank", -1))] * n
        validate += [bool(r.get("validate", False))] * n
    return {
        "step": np.asarray(step, dtype=np.int32),
        "group_idx": np.asarray(grp, dtype=np.int32),
        "sample_idx": np.asarray(sidx, dtype=np.int32),
        "prompt_len": np.asarray(prompt, dtype=np.int32),
        "response_len": np.asarray(resp, dtype=np.int32),
        "dp_rank": np.asarray(dp, dtype=np.int32),
        "validate": np.asarray(validate, dtype=bool),
    }


def multiturn_rows_to_columns(rows: list[dict]) -> dict[str, dict]:
    samples: dict[str, list] = {
        k: []
        for k in (
            "step",
            "group_idx",
            "sample_idx",
            "prompt_len",
            "response_len",
            "validate",
            "num_turns",
            "num_tool_calls",
            "latency_s",
        )
    }
    turns: dict[str, list] = {k: [] for k in TURN_COLUMNS}
    calls: dict[str, list] = {
        k: [] for k in ("step", "group_idx", "sample_idx", "call_idx", "turn", "latency_s", "response_tokens")
    }
    for r in rows:
        s, g, i = int(r.get("step", 0)), int(r.get("prompt_group_id", 0)), int(r.get("sample_id", 0))
        ts = r.get("turns") or []
        cs = r.get("tool_calls") or []
        samples["step"].append(s)
        samples["group_idx"].append(g)
        samples["sample_idx"].append(i)
        samples["prompt_len"].append(int(r["prompt_len"]))
        samples["response_len"].append(int(r.get("final_response_len", sum(t["completion_tokens"] for t in ts))))
        samples["validate"].append(bool(r.get("validate", False)))
        samples["num_turns"].append(len(ts))
        samples["num_tool_calls"].append(len(cs))
        samples["latency_s"].append(float(sum(t.get("engine_latency_s") or 0.0 for t in ts)))
        for t in ts:
            turns["step"].append(s)
            turns["group_idx"].append(g)
            turns["sample_idx"].append(i)
            turns["turn"].append(int(t["turn"]))
            turns["prompt_tokens"].append(int(t["prompt_tokens"]))
            turns["cached_tokens"].append(int(t.get("cached_tokens") or 0))
            turns["completion_tokens"].append(int(t["completion_tokens"]))
            lat = t.get("engine_latency_s")
            turns["engine_latency_s"].append(float("nan") if lat is None else float(lat))
            turns["tool_call_count"].append(int(t.get("tool_call_count") or 0))
        for k, c in enumerate(cs):
            calls["step"].append(s)
            calls["group_idx"].append(g)
            calls["sample_idx"].append(i)
            calls["call_idx"].append(k)
            calls["turn"].append(int(c["turn"]))
            calls["latency_s"].append(float(c.get("latency_s") or 0.0))
            calls["response_tokens"].append(int(c.get("response_token_len") or 0))

    def arr(d: dict) -> dict:
        return {
            k: np.asarray(v, dtype=np.float64 if k.endswith("_s") else (bool if k == "validate" else np.int32))
            for k, v in d.items()
        }

    return {"samples": arr(samples), "turns": arr(turns), "tool_calls": arr(calls)}


def reward_rows_to_columns(rows: list[dict]) -> dict:
    return {
        "step": np.asarray([int(r["step"]) for r in rows], dtype=np.int32),
        "rank": np.asarray([int(r["rank"]) for r in rows], dtype=np.int32),
        "dp_rank": np.asarray([int(r.get("dp_rank", -1)) for r in rows], dtype=np.int32),
        "phase": ["reward"] * len(rows),
        "seconds": np.asarray([float(r["reward_time_s"]) for r in rows]),
        "batch_size": np.asarray([int(r.get("batch_size", -1)) for r in rows], dtype=np.int32),
        "validate": np.asarray([bool(r.get("validate", False)) for r in rows], dtype=bool),
    }
