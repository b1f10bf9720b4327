"""Length-ranked, skew-aware dispatch (StreamRL, arXiv 2504.15930), disaggregated with
one-step-off pipelining: the rollout of step k+1 overlaps the training of step k (the
`one_step_off` schedule) and each step's samples are dispatched by a length ranker.

- The ranker predicts which samples will be long. Modelled by its quality q: a sample's
  predicted score is q·z + sqrt(1 − q²)·ε, z the normal score of its true rank in the
  step (tokens it generates over all turns), ε standard normal noise (seeded by the
  `seed` parameter and the step), so q is the correlation of predicted and true normal
  scores: 1 the oracle, 0 no information. Predicted lengths are the step's lengths
  re-assigned in the predicted order (a ranker orders; magnitudes come from the length
  distribution, which moves little from step to step).
- Skew-aware dispatch: samples (a group's samples may go to different replicas, each
  prefilling the group's prompt once) in decreasing predicted length, each to the
  replica with the least predicted tokens so far (LPT), and each replica admits its
  samples longest-predicted first, so the long tail starts at once and is spread.

Not modelled: StreamRL's stream generation into the trainer (samples trained as they
finish, dynamic-batch pipelining), heterogeneous or cross-data-center pools, elastic
scaling of the generation pool, and the ranker's own inference cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from core.simulator.dispatch import longest_first
from core.simulator.policies.base import Env, RolloutOutcome, rollout_outcome
from core.simulator.policies.one_step_off import run_one_step_off
from core.simulator.policies.spec import PolicySpec, param
from core.simulator.requests import sample_tokens, step_request_arrays
from core.simulator.workload import StepWorkload


@dataclass(frozen=True)
class LengthRankedParams:
    ranker_quality: float = param(
        0.8,
        "correlation of the ranker's predicted with the true length rank (normal scores): 1 the oracle, "
        "0 a random order",
        ge=0.0,
        le=1.0,
        grid=(0.5, 1.0),
    )
    seed: int = param(0, "seed of the ranker's errors (with the step number)", ge=0)


def ranked_prediction(lengths: np.ndarray, quality: float, rng: np.random.Generator) -> np.ndarray:
    """The lengths a ranker of `quality` predicts: the same values, in its order."""
    n = lengths.size
    if n == 0:
        return lengths.astype(np.float64)
    rank = np.empty(n)
    rank[np.argsort(lengths, kind="stable")] = np.arange(n)
    z = ndtri((rank + 0.5) / n)
    score = quality * z + math.sqrt(max(0.0, 1.0 - quality * quality)) * rng.standard_normal(n)
    predicted = np.empty(n)
    predicted[np.argsort(score, kind="stable")] = np.sort(lengths)
    return predicted


def ranked_rollout(env: Env, w: StepWorkload, keep_store: bool) -> RolloutOutcome:
    prm: LengthRankedParams = env.params
    tokens = sample_tokens(step_request_arrays(w), w.n_samples)
    predicted = ranked_prediction(tokens, prm.ranker_quality, np.random.default_rng([prm.seed, w.step]))
    order = np.argsort(-predicted, kind="stable")  # longest predicted first
    rc = env.new_cluster(spread_groups=True)
    _, first, last = rc.add_step(w, np.arange(w.n_samples))
    rc.submit(first[order], longest_first(predicted[order], env.cluster.rollout_replicas), 0.0)
    rc.run_all()
    return rollout_outcome(rc, last, keep_store)


SPEC = PolicySpec(
    kind="length_ranked",
    not_on_engine=None,
    disaggregated=True,
    help="disaggregated, one step off; a length ranker orders each step's samples and they are "
    "dispatched longest-predicted first to the least loaded replica (StreamRL)",
    run=run_one_step_off,
    params=LengthRankedParams,
    batch_rollouts=True,
    rollout=ranked_rollout,
    seed_param="seed",
    paper="StreamRL: Scalable, Heterogeneous, and Elastic RL for LLMs with Disaggregated Stream "
    "Generation (arXiv 2504.15930)",
)
