"""What the CLI (and a worker) run: an engine calibration stored as a profile, and an
engine replay compared with the simulator's prediction from a profile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from backend.store.db import session_scope
from core.simulator.workload import StepWorkload
from engine.calibrate import Sweep, sweep
from engine.client import EnginePool, engine_python
from engine.models import Arch, arch_of, folder_arch
from engine.policies import engine_policy
from engine.profiles import get_profile, latest_profile, save_profile
from engine.replay import engine_replay, model_config
from engine.workload import engine_workload

Progress = Callable[[str], None]


def resolve_model(arch: str, model_path: Path | None) -> tuple[dict, Arch]:
    """(the engine's model config, its shape): a local folder, else a preset's random weights."""
    if model_path is not None:
        shape = folder_arch(model_path)
        return {"model": str(model_path.resolve()), "max_model_len": min(shape.max_positions, 32768)}, shape
    shape = arch_of(arch)
    return {"arch": shape.name, "max_model_len": min(shape.max_positions, 32768)}, shape


def engine_env() -> dict[str, str]:
    """On a CPU machine, every engine one OpenMP thread placed by the OS: pinned to a fixed
    core (vLLM's auto binding), an engine stalls whenever another process runs there —
    measured on a shared 2-core machine, a pinned engine ran a replay 10x slower than two
    unpinned ones. The calibration and every replay run alike."""
    return {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


def calibrate_on(pool: EnginePool, shape: Arch, progress: Progress, grid: Sweep | None = None) -> dict:
    """Sweep engine 0 of `pool`; the profile record (not yet stored)."""
    progress("calibrating: batch x context sweep")
    out = sweep(pool, grid or Sweep(), shape.vocab)
    lim = pool.limits[0]
    return {
        "engine": lim["engine"],
        "device": lim["device"],
        "arch": shape.name,
        "tp": 1,
        "coefficients": out["coefficients"],
        "fit": {**out["fit"], "engine_start_s": pool.start_s},
        "limits": {k: lim[k] for k in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens", "max_model_len")},
    }


def calibrate_engine(team_id: int, arch: str, model_path: Path | None, progress: Progress) -> dict:
    config, shape = resolve_model(arch, model_path)
    engine_python()
    progress("starting the engine")
    with EnginePool(config, 1, env=engine_env()) as pool:
        record = calibrate_on(pool, shape, progress)
    with session_scope() as session:
        return save_profile(session, team_id, record)


def _profile_for(pool: EnginePool, team_id: int, shape: Arch, profile_id: int | None, progress: Progress) -> dict:
    """--profile, else the latest of this engine/device/architecture, else a new one."""
    lim = pool.limits[0]
    with session_scope() as session:
        if profile_id is not None:
            return get_profile(session, team_id, profile_id)
        found = latest_profile(session, team_id, lim["engine"], lim["device"], shape.name)
    if found is not None:
        return found
    record = calibrate_on(pool, shape, progress)
    with session_scope() as session:
        return save_profile(session, team_id, record)


def replay_on_engine(
    team_id: int,
    workload: list[StepWorkload],
    kind: str,
    params: dict,
    *,
    max_requests: int | None,
    length_scale: float,
    profile_id: int | None = None,
    engines: int | None = None,
    arch: str = "tiny",
    model_path: Path | None = None,
    progress: Progress = lambda m: None,
) -> dict:
    design, _ = engine_policy(kind, params)  # says why before any engine starts
    multiturn = any(w.is_multiturn for w in workload)
    if multiturn and not design.multiturn:
        raise ValueError(f"--policy {kind}: multi-turn trajectories are replayed on an engine under sync only")
    engine_python()  # and that there is no engine
    config, shape = resolve_model(arch, model_path)
    shape_of = {"max_requests": max_requests, "length_scale": length_scale, "max_len": config["max_model_len"]}
    wl = engine_workload(workload, **shape_of)
    if profile_id is not None:  # a wrong id fails before any engine starts
        with session_scope() as session:
            get_profile(session, team_id, profile_id)
    k = engines or design.engines
    progress(f"starting {k} engine(s)")
    with EnginePool(config, k, env=engine_env()) as pool:
        profile = _profile_for(pool, team_id, shape, profile_id, progress)
        model = model_config(shape.name, shape.__dict__, shape.params)
        if multiturn:  # what the engine's prefix cache serves, in its blocks
            wl = engine_workload(workload, **shape_of, block_size=int(pool.limits[0].get("block_size", 1)))
        out = engine_replay(pool, wl, kind, params, profile, model, shape.vocab, progress)
        out["engine_start_s"] = pool.start_s
    lim = pool.limits[0]
    here = {"engine": lim["engine"], "device": lim["device"], "arch": shape.name}
    out.update(here)
    # a profile of another engine, device or model predicts another machine's times
    out["warnings"] = [
        f"profile {profile['id']} was measured with {key} {profile[key]!r}, this replay ran {value!r}"
        for key, value in here.items()
        if profile[key] != value
    ]
    out["workload"] = {"max_requests": max_requests, "length_scale": length_scale}
    return out
