"""Training and evaluation of tasks with rsl-rl's PPO, on any engine.

* :func:`train`: PPO on ``make_task(task, sim, ...)`` through
  :class:`~simbackend.envs.rsl.RslRlVecEnv`, with a progress bar, periodic
  evaluation on a separate task, checkpoints, a CSV/JSON log and a learning
  curve (:mod:`.trainer`).
* :func:`evaluate`: a checkpoint's deterministic policy on any engine, over
  seeds, with 95 % confidence intervals (Student's t) (:mod:`.evaluation`).
* :class:`TrainConfig` and the per-task defaults :data:`TASK_DEFAULTS` (:mod:`.config`).
* :func:`load_checkpoint` (:mod:`.checkpoint`), :func:`estimate` / :func:`t_critical` (:mod:`.stats`).

>>> result = train("cartpole", "mujoco", out_dir="runs/cartpole")        # doctest: +SKIP
>>> evaluate(result.checkpoint, "sapien").success_rate                     # doctest: +SKIP

Imports neither an engine nor a backend package: engines are reached through
``make_task`` and the backend registry.
"""

from .checkpoint import Checkpoint, Policy, load_checkpoint
from .config import TASK_DEFAULTS, TrainConfig
from .evaluation import EvalResult, evaluate, merge_seeds, run_episodes
from .logs import COLUMNS
from .stats import Estimate, estimate, t_critical
from .trainer import TrainResult, train

__all__ = [
    "COLUMNS",
    "TASK_DEFAULTS",
    "Checkpoint",
    "Estimate",
    "EvalResult",
    "Policy",
    "TrainConfig",
    "TrainResult",
    "estimate",
    "evaluate",
    "merge_seeds",
    "load_checkpoint",
    "run_episodes",
    "t_critical",
    "train",
]
