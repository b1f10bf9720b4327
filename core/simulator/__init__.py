"""Discrete-event replay of RLVR training steps on a described cluster.

Public surface (pure: numpy/dataclasses in, plain results out):

- configs: `ClusterConfig`, `ModelConfig`, `EngineLimits`, `Policy`, `GPU_PRESETS`,
  `MODEL_PRESETS`, `config_from_dict` (each class also has `from_dict`)
- workload: `StepWorkload`, `workload_from_columns`
- replay: `simulate`, `SimResult`, `compare`, `chrome_trace`
- engine model: `EngineCoefficients`, `roofline_coefficients`
- calibration: `calibrate`, `Calibration`, `accuracy_report`

See docs/simulator.md.
"""

from core.simulator.calibration import Calibration, accuracy_report, calibrate
from core.simulator.config import (
    GPU_PRESETS,
    MODEL_PRESETS,
    ClusterConfig,
    EngineLimits,
    GpuSpec,
    ModelConfig,
    Policy,
    config_from_dict,
)
from core.simulator.predictor import EngineCoefficients, roofline_coefficients
from core.simulator.result import SimResult, StepResult, chrome_trace, compare
from core.simulator.simulate import simulate
from core.simulator.workload import StepWorkload, workload_from_columns

__all__ = [
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "ClusterConfig",
    "EngineLimits",
    "GpuSpec",
    "ModelConfig",
    "Policy",
    "config_from_dict",
    "StepWorkload",
    "workload_from_columns",
    "simulate",
    "SimResult",
    "StepResult",
    "compare",
    "chrome_trace",
    "EngineCoefficients",
    "roofline_coefficients",
    "calibrate",
    "Calibration",
    "accuracy_report",
]
