"""Why one replay is faster or slower than another: the difference of makespan split by
cause (the `explain` part of `result.compare`), and its text rendering.

Every GPU-second of a replay is one component of `causes.COMPONENTS`: an idle cause,
an overhead (weight sync, recompute) or useful work (generation, training passes), so
n_gpus x makespan = the sum of the components. With the same GPU budget n on both
sides, makespan B - makespan A = sum over components of (GPU-s of B - GPU-s of A) / n
exactly; each component's term is its contribution to the difference. With different
budgets the terms are divided by A's budget and a `budget_s` term, -(n_B - n_A) x
makespan_B / n_A, completes the sum.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from core.simulator.causes import CAUSES, COMPONENTS, IDLE_CAUSES, OVERHEAD_STAGES, WORK_STAGES

_STAGE_COMPONENT = {stage: comp for comp, stages in WORK_STAGES.items() for stage in stages}
_STAGE_COMPONENT.update({s: s for s in OVERHEAD_STAGES})

DEFINITION = (
    "GPU-seconds of each replay split into idle causes, overheads and useful work (they add up to "
    "n_gpus x makespan); delta_s of a component = (GPU-s of B - GPU-s of A) / GPUs of A, its "
    "contribution to makespan B - makespan A (the deltas plus budget_s add up to it exactly); "
    "components ranked by |delta_s|"
)


def components(result: Any) -> dict[str, float]:
    """GPU-seconds per component of a `SimResult` (idle by cause, busy by stage)."""
    out: dict[str, float] = defaultdict(float)
    for cause, s in result.idle_gpu_s.items():
        out[cause] += s
    for lane in result.lanes:
        k = len(lane.gpus)
        for a, b, state, label, _ in lane.intervals:
            if state == "busy":
                out[_STAGE_COMPONENT.get(label, label)] += (b - a) * k
    return dict(out)


def pool_split(result: Any) -> dict:
    """How the replay's layout uses its GPUs, from its timeline lanes."""
    n: dict[str, int] = defaultdict(int)
    for lane in result.lanes:
        n[lane.role] += len(lane.gpus)
    rollout, train, shared, unused = n["rollout"], n["train"], n["shared"], n["unused"]
    if rollout or train:
        text = f"{rollout} rollout + {train} train GPUs"
    else:
        text = f"{shared} GPUs time-shared by rollout and training"
    unused += max(0, result.n_gpus - rollout - train - shared - unused)
    if unused:
        text += f" ({unused} unused)"
    return {
        "disaggregated": bool(rollout or train),
        "rollout_gpus": rollout,
        "train_gpus": train,
        "shared_gpus": shared,
        "unused_gpus": unused,
        "text": text,
    }


def digest(result: Any) -> dict:
    """What `explain` reads of a `SimResult`, small enough to keep for many replays (the
    advisor keeps one per configuration): policy, budget, makespan, idle seconds by
    cause, GPU-seconds per component and the pool split."""
    return {
        "policy": result.config.get("policy", {}).get("kind"),
        "n_gpus": result.n_gpus,
        "makespan": result.makespan,
        "idle_gpu_s": dict(result.idle_gpu_s),
        "components": components(result),
        "split": pool_split(result),
    }


def explain(a: Any, b: Any) -> dict:
    """The `explain` part of `compare(a, b)` (shape in result.py's docstring)."""
    return explain_digests(digest(a), digest(b))


def explain_digests(a: dict, b: dict, labels: tuple[str, str] | None = None) -> dict:
    """`explain` of two `digest`s (`labels`: how to name A and B, default their policies)."""
    la, lb = labels or _labels(a, b)
    ca, cb = a["components"], b["components"]
    n_a = a["n_gpus"] or 1
    delta = b["makespan"] - a["makespan"]
    rows = []
    for c in _ordered(ca, cb):
        va, vb = ca.get(c, 0.0), cb.get(c, 0.0)
        if va == 0.0 and vb == 0.0:
            continue
        rows.append(_row(c, va, vb, n_a, a, b))
    rows.sort(key=lambda r: -abs(r["delta_s"]))
    verdict = _verdict(a["makespan"], b["makespan"])
    out = {
        "definition": DEFINITION,
        "a": _side(la, a),
        "b": _side(lb, b),
        "delta_s": delta,
        "verdict": verdict,
        "speedup": a["makespan"] / b["makespan"] if b["makespan"] > 0 else None,
        "budget_s": -(b["n_gpus"] - a["n_gpus"]) * b["makespan"] / n_a,
        "components": rows,
    }
    out["summary"] = _summary(out)
    return out


def _labels(a: dict, b: dict) -> tuple[str, str]:
    ka, kb = (str(d["policy"] or "?") for d in (a, b))
    return (f"{ka} (A)", f"{kb} (B)") if ka == kb else (ka, kb)


def _ordered(ca: dict, cb: dict) -> list[str]:
    extra = sorted((set(ca) | set(cb)) - set(COMPONENTS))
    return [*COMPONENTS, *extra]


def _row(c: str, va: float, vb: float, n_a: int, a: dict, b: dict) -> dict:
    info = CAUSES.get(c)
    total_a = a["n_gpus"] * a["makespan"] or 1.0
    total_b = b["n_gpus"] * b["makespan"] or 1.0
    return {
        "cause": c,
        "kind": info.kind if info else "work",
        "phrase": info.phrase if info else c,
        "definition": info.definition if info else f"busy GPU-seconds of stage {c}",
        "lever": info.lever if info else "",
        "a_gpu_s": va,
        "b_gpu_s": vb,
        "delta_gpu_s": vb - va,
        "delta_s": (vb - va) / n_a,
        "share_a": va / total_a,
        "share_b": vb / total_b,
    }


def _side(label: str, d: dict) -> dict:
    total = d["n_gpus"] * d["makespan"]
    idle = sum(d["idle_gpu_s"].values())
    lost = {c: v for c, v in d["components"].items() if c in IDLE_CAUSES or c in OVERHEAD_STAGES}
    top = max(lost.items(), key=lambda kv: kv[1], default=None)
    return {
        "policy": d["policy"],
        "label": label,
        "n_gpus": d["n_gpus"],
        "makespan_s": d["makespan"],
        "gpu_s": total,
        "idle_fraction": idle / total if total > 0 else 0.0,
        "split": d["split"],
        "top_cause": (
            None
            if top is None or top[1] <= 0
            else {"cause": top[0], "phrase": CAUSES[top[0]].phrase, "gpu_s": top[1], "share": top[1] / total}
        ),
    }


def _verdict(ma: float, mb: float) -> str:
    if abs(mb - ma) <= 1e-9 * max(ma, mb, 1e-12):
        return "same"
    return "slower" if mb > ma else "faster"


def _summary(e: dict) -> str:
    a, b = e["a"], e["b"]
    speed = f" ({e['speedup']:.3f}x)" if e["speedup"] is not None else ""
    if e["verdict"] == "same":
        head = f"{b['label']} takes as long as {a['label']}{speed}"
    else:
        head = f"{b['label']} is {abs(e['delta_s']):.1f} s {e['verdict']} than {a['label']}{speed}"
    text = f"{head}: {_side_text(b)}; {_side_text(a)}"
    sign = 1.0 if e["verdict"] == "slower" else -1.0
    moves = [r for r in e["components"] if r["delta_s"] * sign > 0]
    if e["verdict"] != "same" and moves:
        r = moves[0]
        text += f"; the largest difference is {r['phrase']} ({r['delta_s']:+.1f} s of makespan)"
    return text + "."


def _side_text(s: dict) -> str:
    split = s["split"]
    if split["disaggregated"]:
        where = f"{split['rollout_gpus']} rollout + {split['train_gpus']} train GPUs"
    else:
        where = f"{split['shared_gpus']} time-shared GPUs"
    text = f"{s['label']} idles {s['idle_fraction']:.1%} of its GPU time on {where}"
    top = s["top_cause"]
    if top is not None:
        text += f", loses the most ({top['share']:.1%}) to {top['phrase']}"
    return text


def explain_text(e: dict, top: int = 6) -> str:
    """`explain` as text for a terminal: the summary, then the largest components with
    GPU-seconds of A and B and their contribution to the makespan difference."""
    a, b = e["a"], e["b"]
    lines = [e["summary"], ""]
    lines.append(f"{'where the GPU time went':<44}{a['label']:>14}{b['label']:>14}{'makespan +/-':>14}")
    for r in e["components"][:top]:
        lines.append(f"  {r['phrase'][:42]:<42}{r['a_gpu_s']:>12.1f} s{r['b_gpu_s']:>12.1f} s{r['delta_s']:>+12.1f} s")
    if abs(e["budget_s"]) > 0:
        lines.append(f"  {'different GPU budgets':<42}{'':>14}{'':>14}{e['budget_s']:>+12.1f} s")
    lines.append(f"  ({a['label']}: {a['split']['text']}; {b['label']}: {b['split']['text']})")
    return "\n".join(lines)
