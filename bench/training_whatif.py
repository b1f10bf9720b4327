"""What-if check of the training model against measured runs of other configurations:
verl's fully async trainer table (verl docs, *Recipe: Fully Async Policy Trainer*,
"Asynchronous Training on 7B Model": Qwen2.5-Math-7B on H20, 512 prompts x 16 responses a
step, max response 28K; as published since verl PR #4307), whose `update_actor` column
times the same step's update colocated (sync) at 32, 64 and 128 GPUs and on a trainer
of its own (fully async) at 16, 32 and 64 GPUs.

The model (core.simulator.training.train_rate: Amdahl's serial fraction over the DP
ranks, the colocation overhead on colocated passes, at the defaults of ClusterConfig)
is fitted on ONE row — its work W from that row's time — and predicts every other row
and the what-if it exists for: the trainer split off at half the GPUs against the
colocated run. Printed for each choice of the fitted row; the mean |error| is over
every predicted row of every choice.

    .venv/bin/python -m bench.training_whatif
"""

from __future__ import annotations

import numpy as np

from core.simulator import ClusterConfig
from core.simulator.training import train_rate

# (training GPUs, colocated with rollout, update_actor seconds), verl's table
VERL_ROWS: tuple[tuple[int, bool, float], ...] = (
    (32, True, 269.80),
    (64, True, 133.41),
    (128, True, 113.81),
    (16, False, 313.81),
    (32, False, 156.98),
    (64, False, 113.16),
)


def seconds_per_work(gpus: int, colocated: bool) -> float:
    """Seconds per FLOP of the whole step's update on `gpus` DP ranks (one GPU each)."""
    return 1.0 / (gpus * train_rate(ClusterConfig(train_dp=gpus, train_tp=1), colocated=colocated))


def predictions(fit_on: int) -> list[dict]:
    """Every other row predicted from row `fit_on` alone."""
    gpus, colocated, measured = VERL_ROWS[fit_on]
    work = measured / seconds_per_work(gpus, colocated)
    out = []
    for i, (g, c, m) in enumerate(VERL_ROWS):
        if i != fit_on:
            p = work * seconds_per_work(g, c)
            out.append({"gpus": g, "colocated": c, "measured": m, "predicted": p, "error": (p - m) / m})
    return out


def split_whatifs() -> list[dict]:
    """Halving the GPUs that train (a trainer of its own) against the colocated run at
    twice the GPUs: speedup of the update, measured vs the model's (no fit needed)."""
    times = {(g, c): m for g, c, m in VERL_ROWS}
    out = []
    for g, c, m in VERL_ROWS:
        if c and (g // 2, False) in times:
            measured = m / times[(g // 2, False)]
            predicted = seconds_per_work(g, True) / seconds_per_work(g // 2, False)
            out.append({"colocated_gpus": g, "measured": measured, "predicted": predicted})
    return out


def main() -> None:
    cfg = ClusterConfig()
    print(f"training model: train_serial_fraction {cfg.train_serial_fraction}, colocation_overhead "
          f"{cfg.colocation_overhead}")  # fmt: skip
    errors = []
    for i, (g, c, m) in enumerate(VERL_ROWS):
        rows = predictions(i)
        errors += [abs(r["error"]) for r in rows]
        shown = ", ".join(
            f"{r['gpus']}{' colocated' if r['colocated'] else ' apart'} {r['predicted']:.0f}/{r['measured']:.0f} s "
            f"({100 * r['error']:+.0f}%)"
            for r in rows
        )
        print(f"fit on {g}{' colocated' if c else ' apart'} ({m:.0f} s): predicted/measured {shown}")
    print(f"mean |error| over {len(errors)} predicted rows: {100 * np.mean(errors):.1f}%")
    for w in split_whatifs():
        err = w["predicted"] / w["measured"] - 1
        print(f"what-if, trainer of {w['colocated_gpus'] // 2} GPUs apart vs {w['colocated_gpus']} colocated: "
              f"update speedup measured {w['measured']:.2f}x, predicted {w['predicted']:.2f}x ({100 * err:+.0f}%)")  # fmt: skip


if __name__ == "__main__":
    main()
