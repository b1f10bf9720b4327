"""A synthetic long-tailed RLVR workload in PolyTrace packed-lengths shape.

Used by `rlvr-explorer demo`, the benchmarks and the tests: the project's own data,
so nothing real is needed for a first start.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def packed_length_rows(
    steps: int,
    groups: int,
    n_sampling: int = 8,
    *,
    dp_size: int = 8,
    max_response_len: int = 8192,
    drift: float = 0.002,
    median_response: float = 600.0,
    seed: int = 0,
) -> Iterator[list[dict]]:
    """Yield one list of packed-lengths rows (one per prompt group) per step.

    Response lengths are lognormal per group (a group shares a difficulty), their
    median (`median_response` at step 0) growing by `drift` per step, clipped at
    `max_response_len` (truncation).
    """
    rng = np.random.default_rng(seed)
    for step in range(steps):
        prompt = np.clip(rng.lognormal(5.2, 0.5, groups), 16, 4096).astype(np.int64)
        difficulty = rng.normal(0.0, 0.6, groups)[:, None]
        mu = np.log(median_response) + drift * step + difficulty
        out = rng.lognormal(mu, 0.7, (groups, n_sampling))
        out = np.clip(out, 1, max_response_len).astype(np.int64)
        dp = np.arange(groups) * dp_size // groups
        yield [
            {
                "step": step,
                "rank": int(dp[g]),
                "dp_rank": int(dp[g]),
                "tp_rank": 0,
                "local_index": int(g - (dp[g] * groups + dp_size - 1) // dp_size),
                "input": int(prompt[g]),
                "output": out[g].tolist(),
                "n_sampling": n_sampling,
                "validate": False,
            }
            for g in range(groups)
        ]
