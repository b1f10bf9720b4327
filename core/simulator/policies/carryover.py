"""Samples that outlive a rollout (partial and streaming policies): where each one's
request chain resumes, and the request arrays of resumed chains."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.simulator.requests import step_request_arrays
from core.simulator.workload import StepWorkload


@dataclass
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

    def arrays_of(self, i: int) -> dict:
        if i not in self.arrays:
            self.arrays[i] = step_request_arrays(self.workload[i])
        return self.arrays[i]

    def chain_end(self, it: Pending) -> int:
        a = self.arrays_of(it.step_idx)
        return int(a["first"][it.sample + 1]) if it.sample + 1 < a["first"].size else int(a["sample"].size)

    def chains(self, items: list[Pending]) -> dict[str, np.ndarray]:
        cols: dict[str, list[float]] = {k: [] for k in ("prefill", "context", "decode", "gap", "next", "owner", "src")}
        firsts, lasts = [], []
        for k, it in enumerate(items):
            a = self.arrays_of(it.step_idx)
            stop = self.chain_end(it)
            firsts.append(len(cols["prefill"]))
            for j in range(it.req, stop):
                ctx = int(a["context"][j])
                pre = int(a["prefill"][j])
                dec = int(a["decode"][j])
                if j == it.req and it.generated:
                    ctx += it.generated
                    pre = ctx  # resumed by recomputing prompt + partial response
                    dec = max(1, dec - it.generated)
                cols["prefill"].append(pre)
                cols["context"].append(ctx)
                cols["decode"].append(dec)
                cols["gap"].append(float(a["gap"][j]))
                cols["next"].append(len(cols["prefill"]) if j + 1 < stop else -1)
                cols["owner"].append(k)
                cols["src"].append(j)
            lasts.append(len(cols["prefill"]) - 1)
        out = {k: np.asarray(v) for k, v in cols.items()}
        out["first"] = np.asarray(firsts, dtype=np.int64)
        out["last"] = np.asarray(lasts, dtype=np.int64)
        return out


def sample_generated(w: StepWorkload, s: int, arr: dict) -> int:
    if not w.is_multiturn:
        return int(w.response_len[s])
    lo = arr["first"][s]
    hi = arr["first"][s + 1] if s + 1 < arr["first"].size else arr["sample"].size
    return int(arr["decode"][lo:hi].sum())
