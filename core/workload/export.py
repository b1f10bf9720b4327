"""Export generated steps in PolyTrace formats (pure builders + thin file writers).

- `packed_rows(step, dp_size)`: the ``packed_lengths_step_N.jsonl`` rows, one per
  prompt group: ``{"step", "rank", "dp_rank", "tp_rank", "local_index", "input",
  "output": [...], "n_sampling", "validate"}``; groups are dealt to `dp_size` ranks in
  contiguous chunks (rank = dp_rank, tp_rank 0). For multi-turn steps `output` is each
  trajectory's response length (completion + tool tokens).
- `multiturn_rows(step)`: ``multiturn_workload_step_N.jsonl`` rows for multi-turn steps
  (turns with prompt/cached/completion tokens, tool calls with latency), the subset of
  fields the simulator and the analyses read.
- `compact_json(steps)`: the whole-run compact format keyed by step, as the project's
  reader (backend/formats/polytrace.py) and PolyTrace's loader take it. Single-turn:
  ``{"0": {"input": [prompt per group], "output": [[responses of group 0], ...]}}``;
  multi-turn: ``{"0": [{"input": [prompt tokens of each turn], "output": [completion
  tokens of each turn]}, ...]}`` — a turn's prompt is the whole context at that turn
  (previous prompt + completion + appended tool tokens).
- `write_packed_jsonl(directory, steps)`, `write_multiturn_jsonl(directory, steps)`,
  `write_compact_json(path, steps)`: write them (orjson), returning the paths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from core.workload.generate import GeneratedStep


def packed_rows(step: GeneratedStep, dp_size: int = 1) -> list[dict]:
    ng = len(step.responses)
    dp = np.arange(ng) * max(dp_size, 1) // max(ng, 1)
    rows = []
    local = 0
    for g in range(ng):
        if g and dp[g] != dp[g - 1]:
            local = 0
        out = [int(x) for x in step.responses[g]]
        rows.append(
            {
                "step": int(step.step),
                "rank": int(dp[g]),
                "dp_rank": int(dp[g]),
                "tp_rank": 0,
                "local_index": local,
                "input": int(step.prompt[g]),
                "output": out,
                "n_sampling": len(out),
                "validate": False,
            }
        )
        local += 1
    return rows


def multiturn_rows(step: GeneratedStep) -> list[dict]:
    if step.turns is None:
        raise ValueError(f"step {step.step}: not a multi-turn step")
    rows = []
    for g, grp in enumerate(step.turns):
        for i, traj in enumerate(grp):
            ctx = 0
            turns, calls = [], []
            for k, (inp, out) in enumerate(zip(traj["input"], traj["output"])):
                cached = ctx
                ctx += int(inp)
                turns.append(
                    {
                        "turn": k,
                        "prompt_tokens": ctx,
                        "cached_tokens": cached,
                        "completion_tokens": int(out),
                        "finish_reason": "tool_calls" if k + 1 < len(traj["output"]) else "stop",
                        "tool_call_count": 1 if k + 1 < len(traj["output"]) else 0,
                    }
                )
                ctx += int(out)
                if k + 1 < len(traj["output"]):
                    calls.append(
                        {
                            "turn": k,
                            "tool_name": "tool",
                            "latency_s": float(traj["tool_latency_s"][k]),
                            "response_token_len": int(traj["input"][k + 1]),
                            "status": "success",
                        }
                    )
            prompt = int(traj["input"][0])
            rows.append(
                {
                    "step": int(step.step),
                    "prompt_len": prompt,
                    "turns": turns,
                    "tool_calls": calls,
                    "turn_count": len(turns),
                    "tool_call_count": len(calls),
                    "final_total_len": ctx,
                    "final_response_len": ctx - prompt,
                    "finish_reason": "stop",
                    "validate": False,
                    "prompt_group_id": g,
                    "sample_id": i,
                }
            )
    return rows


def compact_json(steps: list[GeneratedStep]) -> dict:
    out: dict[str, dict | list[dict]] = {}
    for s in steps:
        if s.turns is None:
            out[str(s.step)] = {
                "input": [int(x) for x in s.prompt],
                "output": [[int(x) for x in r] for r in s.responses],
            }
        else:
            out[str(s.step)] = [
                {
                    "input": np.cumsum(np.r_[0, t["input"]][1:] + np.r_[0, t["output"][:-1]]).astype(int).tolist(),
                    "output": [int(x) for x in t["output"]],
                }
                for grp in s.turns
                for t in grp
            ]
    return out


def write_packed_jsonl(directory: str | Path, steps: list[GeneratedStep], dp_size: int = 1) -> list[Path]:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in steps:
        p = d / f"packed_lengths_step_{s.step}.jsonl"
        p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in packed_rows(s, dp_size)))
        paths.append(p)
    return paths


def write_multiturn_jsonl(directory: str | Path, steps: list[GeneratedStep]) -> list[Path]:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in steps:
        p = d / f"multiturn_workload_step_{s.step}.jsonl"
        p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in multiturn_rows(s)))
        paths.append(p)
    return paths


def write_compact_json(path: str | Path, steps: list[GeneratedStep]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(orjson.dumps(compact_json(steps)))
    return p
