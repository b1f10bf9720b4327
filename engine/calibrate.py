"""Engine calibration: a short batch x context sweep on a real engine, prefill and decode,
fitted into the simulator's iteration-time model (core/simulator/predictor.py):

- decode iteration with B running sequences holding ΣKV tokens:
  ``decode_a + decode_b · ΣKV + decode_c · B`` — fitted on every pure decode step
  (no request waiting for its first token) of the sweep;
- prefill of new requests with p prompt tokens each:
  ``prefill_a + prefill_b · Σp + prefill_c · Σp²`` per iteration — fitted on each sweep
  point's prefill phase (the steps until every request of the batch had its first
  token: n steps, Σp, Σp² over its requests), as n·prefill_a + prefill_b·Σp + prefill_c·Σp².

Non-negative least squares (the coefficients are times); R² says how well each form fits.
On a CPU engine the steps are timed by the CPU seconds the engine process spent in them
(its work, whatever else the machine runs: on a shared machine the wall time of the same
steps swung with the other processes' load, up to 40% between two sweeps); on a GPU by
wall time (the host waits while the device computes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from core.simulator.predictor import EngineCoefficients
from engine.client import EnginePool, Request


@dataclass(frozen=True)
class Sweep:
    """The sweep's points: every batch size at every context. Short contexts keep the
    batch apart from its KV tokens (else the fit cannot tell a sequence's cost from its
    tokens' and a short-context replay's batch cost is lost); batches past a replay's
    usual size keep its over-provisioned steps inside the fitted range."""

    batches: tuple[int, ...] = (1, 8, 32, 64, 128)
    contexts: tuple[int, ...] = (16, 256, 1024)
    decode_tokens: int = 48


def fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least-squares coefficients of y ≈ x·c, and R²."""
    c, _ = nnls(x, y)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - x @ c) ** 2).sum())
    return c, (1.0 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def decode_rows(iterations: list[list[float]], col: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """([1, ΣKV, B] per pure decode step, its seconds: column `col` of the log, 1 wall or
    6 CPU) from an engine's step log: steps with running requests and none waiting for
    its first token (a chunked prefill's steps mix prompt chunks into the batch)."""
    rows = [(1.0, it[3], it[2], it[col]) for it in iterations if it[5] == 0 and it[2] > 0]
    a = np.array(rows, dtype=np.float64).reshape(-1, 4)
    return a[:, :3], a[:, 3]


def cpu_share(iterations: list[list[float]]) -> float | None:
    """The engine process's CPU seconds over its steps' wall seconds: about 1 when it had
    a core to itself, lower when other processes held the cores (its times then are
    the machine's load as much as the engine's)."""
    wall = sum(it[1] for it in iterations)
    return sum(it[6] for it in iterations) / wall if wall > 0 else None


def sweep(pool: EnginePool, grid: Sweep, vocab: int, progress=lambda f: None) -> dict:
    """Run the sweep on engine 0; the fitted coefficients with their fit quality."""
    rng = np.random.default_rng(0)
    prefill_rows: list[tuple[float, float, float, float]] = []
    t_start = pool.now()
    points = [(b, c) for c in grid.contexts for b in grid.batches]
    col = 6 if pool.limits[0].get("on_cpu") else 1  # the step's time: CPU or wall seconds
    for n, (b, c) in enumerate(points):
        ids = [f"cal{n}.{i}" for i in range(b)]
        t0 = pool.now()
        pool.submit(0, [Request(r, rng.integers(1, vocab, c).tolist(), grid.decode_tokens) for r in ids])
        pool.run_until(lambda: all(r in pool.done for r in ids))
        first = max(pool.done[r].t_first for r in ids)
        steps = [it for it in pool.iterations()[0] if it[0] >= t0 and it[0] + it[1] <= first + 1e-9]
        prefill_rows.append((float(len(steps)), float(b * c), float(b * c * c), float(sum(it[col] for it in steps))))
        progress((n + 1) / len(points))
    iterations = [it for it in pool.iterations()[0] if it[0] >= t_start]
    xd, yd = decode_rows(iterations, col)
    cd, r2d = fit(xd, yd)
    p = np.array(prefill_rows)
    cp, r2p = fit(p[:, :3], p[:, 3])
    coeffs = EngineCoefficients(
        decode_a=float(cd[0]),
        decode_b=float(cd[1]),
        decode_c=float(cd[2]),
        prefill_a=float(cp[0]),
        prefill_b=float(cp[1]),
        prefill_c=float(cp[2]),
    )
    return {
        "coefficients": coeffs.to_dict(),
        "fit": {
            "decode_r2": r2d,
            "prefill_r2": r2p,
            "decode_steps": int(yd.size),
            "prefill_points": len(prefill_rows),
            "grid": {"batches": list(grid.batches), "contexts": list(grid.contexts), "decode": grid.decode_tokens},
            "sweep_s": time.monotonic() - t_start,
            "cpu_share": cpu_share(iterations),
            "timed_by": "cpu" if col == 6 else "wall",
        },
    }
