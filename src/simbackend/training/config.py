"""Training settings: :class:`TrainConfig` (PPO hyper-parameters, network sizes, loop control) and the
per-task defaults (:data:`TASK_DEFAULTS`, :meth:`TrainConfig.for_task`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["EVAL_FIRST", "EVAL_POINTS", "TASK_DEFAULTS", "TrainConfig"]

#: the default evaluation schedule (``eval_interval=None``): after each of the first ``EVAL_FIRST``
#: iterations ...
EVAL_FIRST = 5
#: ... and after iteration ``max_iterations * (j / EVAL_POINTS) ** 2``, rounded half up, for
#: ``j = 1 .. EVAL_POINTS``
EVAL_POINTS = 16


@dataclass(frozen=True)
class TrainConfig:
    """Everything :func:`~simbackend.training.train` needs besides the task and the engine.

    The PPO fields are those of rsl-rl's :class:`~rsl_rl.algorithms.PPO` (same names and meaning).

    Attributes:
        num_envs: parallel training envs N.
        seed: seed of the training task's resets, of the network initialisation and of the action noise.
        max_iterations: PPO iterations (each ``num_envs * num_steps_per_env`` env steps, then one update).
        time_budget_s: stop before an iteration that would end past this many seconds of training
            (judged by the previous iteration's duration, with the last evaluation's duration kept for
            the final one; evaluations count); ``None``: no budget.
        eval_share: with a time budget, the most of the training time so far that evaluations during
            training may take: a scheduled evaluation that would go beyond it is skipped (the final
            evaluation always runs, within the budget).
        num_steps_per_env: rollout length per env and iteration.
        learning_rate, schedule, desired_kl, entropy_coef, value_loss_coef, clip_param, gamma, lam,
            num_learning_epochs, num_mini_batches, max_grad_norm: PPO (rsl-rl's names).
        actor_hidden_dims, critic_hidden_dims, activation: the two MLPs.
        init_noise_std: initial standard deviation of the Gaussian action noise (actions are in [-1, 1]).
        obs_normalization: running mean/std normalisation of the observations (stored in the checkpoint).
        init_at_random_ep_len: start the first episodes at random steps (rsl-rl's option; de-synchronises
            the envs' time limits).
        eval_interval: evaluate the deterministic policy every this many iterations; 0: only at the end;
            ``None`` (the default): after each of the first :data:`EVAL_FIRST` iterations (where a run
            that learns fast stops at success) and after iteration ``max_iterations * (j / 16) ** 2``
            (rounded half up) for ``j = 1 .. 16``, gaps that widen as training slows down
            (:meth:`eval_iterations`): every iteration of a run of up to 10 iterations, 13 to 21
            evaluations for 20 or more. Either way a run also evaluates at its last iteration when that
            is not one of them.
        eval_episodes: episodes of each evaluation (one per env of a separate task).
        eval_seed: seed of the evaluation task: every evaluation, on every engine, sees the same episodes.
        save_interval: write ``checkpoint_<iteration>.pt`` every this many iterations (0: only the final one).
        stop_at_success: stop once an evaluation's success rate reaches this (in (0, 1]); ``None``: never.
        torch_threads: torch's intra-op threads during training (``torch.set_num_threads``, restored after);
            0 leaves torch's setting. The networks are small: one thread is fastest, and many times faster
            than torch's default on a machine whose cores are shared.
    """

    num_envs: int = 64
    seed: int = 0
    max_iterations: int = 300
    time_budget_s: float | None = None
    eval_share: float = 0.1
    num_steps_per_env: int = 24
    # PPO
    learning_rate: float = 1e-3
    schedule: str = "adaptive"
    desired_kl: float = 0.01
    entropy_coef: float = 0.005
    value_loss_coef: float = 1.0
    clip_param: float = 0.2
    gamma: float = 0.99
    lam: float = 0.95
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    max_grad_norm: float = 1.0
    # networks
    actor_hidden_dims: tuple[int, ...] = (128, 128)
    critic_hidden_dims: tuple[int, ...] = (128, 128)
    activation: str = "elu"
    init_noise_std: float = 1.0
    obs_normalization: bool = True
    # loop
    init_at_random_ep_len: bool = False
    eval_interval: int | None = None
    eval_episodes: int = 32
    eval_seed: int = 1000
    save_interval: int = 50
    stop_at_success: float | None = None
    torch_threads: int = 1

    def __post_init__(self) -> None:
        def integer(name: str, lo: int) -> None:
            object.__setattr__(self, name, checks.integer(getattr(self, name), f"train_config.{name}", minimum=lo))

        def number(
            name: str, lo: float, hi: float | None = None, optional: bool = False, open_lo: bool = False
        ) -> None:
            object.__setattr__(
                self,
                name,
                checks.real(
                    getattr(self, name),
                    f"train_config.{name}",
                    minimum=lo,
                    maximum=hi,
                    above=open_lo,
                    allow_none=optional,
                ),
            )

        for name in (
            "num_envs",
            "max_iterations",
            "num_steps_per_env",
            "num_learning_epochs",
            "num_mini_batches",
            "eval_episodes",
        ):
            integer(name, 1)
        for name in ("save_interval", "seed", "eval_seed", "torch_threads"):
            integer(name, 0)
        object.__setattr__(
            self,
            "eval_interval",
            checks.integer(self.eval_interval, "train_config.eval_interval", minimum=0, allow_none=True),
        )
        number("time_budget_s", 0.0, optional=True, open_lo=True)
        number("eval_share", 0.0, 1.0)
        number("learning_rate", 0.0, open_lo=True)
        number("desired_kl", 0.0, open_lo=True)
        for name in ("entropy_coef", "value_loss_coef", "max_grad_norm"):
            number(name, 0.0)
        number("clip_param", 0.0, open_lo=True)
        number("gamma", 0.0, 1.0)
        number("lam", 0.0, 1.0)
        number("init_noise_std", 0.0, open_lo=True)
        number("stop_at_success", 0.0, 1.0, optional=True, open_lo=True)
        if self.schedule not in ("adaptive", "fixed"):
            raise InvalidArgumentError(f"train_config.schedule: expected 'adaptive' or 'fixed', got {self.schedule!r}")
        for name in ("actor_hidden_dims", "critic_hidden_dims"):
            dims = getattr(self, name)
            if (
                not isinstance(dims, (tuple, list))
                or not dims
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)
            ):
                raise InvalidArgumentError(
                    f"train_config.{name}: expected a non-empty list of positive ints, got {dims!r}"
                )
            object.__setattr__(self, name, tuple(dims))
        if not isinstance(self.activation, str):
            raise ArgumentTypeError(f"train_config.activation: expected a name, got {type(self.activation).__name__}")
        for name in ("obs_normalization", "init_at_random_ep_len"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentTypeError(f"train_config.{name}: expected a bool, got {getattr(self, name)!r}")

    # ------------------------------------------------------------------
    def evaluates_at(self, iteration: int) -> bool:
        """Whether training evaluates after ``iteration`` (1-based) on its schedule (``eval_interval``);
        the evaluation at a run's last iteration comes on top."""
        if self.eval_interval is None:
            return iteration in _auto_eval_iterations(self.max_iterations)
        return self.eval_interval > 0 and iteration % self.eval_interval == 0

    def eval_iterations(self) -> tuple[int, ...]:
        """The iterations after which training evaluates on its schedule, up to ``max_iterations``
        (``(1, 2, 3, 4, 5, 9, 15, 21, 29, 38, 47, 59, 71, 84, 99, 115, 132, 150)`` for cartpole's defaults)."""
        if self.eval_interval is None:
            return tuple(sorted(_auto_eval_iterations(self.max_iterations)))
        if self.eval_interval == 0:
            return ()
        return tuple(range(self.eval_interval, self.max_iterations + 1, self.eval_interval))

    @classmethod
    def for_task(cls, task: str, **overrides: Any) -> TrainConfig:
        """The defaults of ``task`` (:data:`TASK_DEFAULTS`, the generic defaults for another task) with
        ``overrides`` on top."""
        values = dict(TASK_DEFAULTS.get(task, {}))
        values.update(overrides)
        return cls.from_dict(values)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-ready values (tuples become lists)."""
        return {
            f.name: (list(v) if isinstance(v, tuple) else v)
            for f in dataclasses.fields(self)
            for v in (getattr(self, f.name),)
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> TrainConfig:
        """From :meth:`to_dict`'s output or a partial mapping (missing keys keep the generic defaults)."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"train_config: expected a mapping, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidArgumentError(f"train_config: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**d)

    def rsl_rl_cfg(self) -> dict:
        """The runner configuration of rsl-rl 5 (``OnPolicyRunner(env, cfg, ...)``)."""
        return {
            "algorithm": {
                "class_name": "rsl_rl.algorithms:PPO",
                "learning_rate": self.learning_rate,
                "schedule": self.schedule,
                "desired_kl": self.desired_kl,
                "entropy_coef": self.entropy_coef,
                "value_loss_coef": self.value_loss_coef,
                "clip_param": self.clip_param,
                "gamma": self.gamma,
                "lam": self.lam,
                "num_learning_epochs": self.num_learning_epochs,
                "num_mini_batches": self.num_mini_batches,
                "max_grad_norm": self.max_grad_norm,
                "use_clipped_value_loss": True,
                "rnd_cfg": None,
                "symmetry_cfg": None,
            },
            "actor": {
                "class_name": "rsl_rl.models:MLPModel",
                "hidden_dims": list(self.actor_hidden_dims),
                "activation": self.activation,
                "obs_normalization": self.obs_normalization,
                "distribution_cfg": {
                    "class_name": "rsl_rl.modules.distribution:GaussianDistribution",
                    "init_std": self.init_noise_std,
                    "std_type": "scalar",
                },
            },
            "critic": {
                "class_name": "rsl_rl.models:MLPModel",
                "hidden_dims": list(self.critic_hidden_dims),
                "activation": self.activation,
                "obs_normalization": self.obs_normalization,
            },
            "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
            "num_steps_per_env": self.num_steps_per_env,
            "save_interval": max(self.save_interval, 1),
            "check_for_nan": True,
        }


@functools.lru_cache(maxsize=64)
def _auto_eval_iterations(max_iterations: int) -> frozenset[int]:
    """The default schedule (``eval_interval=None``): the first :data:`EVAL_FIRST` iterations and
    ``round(max_iterations * (j / EVAL_POINTS) ** 2)``, halves up, for ``j = 1 .. EVAL_POINTS`` (in integers)."""
    square = EVAL_POINTS * EVAL_POINTS
    points = {(max_iterations * j * j + square // 2) // square for j in range(1, EVAL_POINTS + 1)}
    points.update(range(1, EVAL_FIRST + 1))
    return frozenset(i for i in points if 1 <= i <= max_iterations)


#: per-task defaults over :class:`TrainConfig`'s generic ones. ``cartpole``'s were measured on a shared
#: 2-core CPU machine (seed 0, 64 envs): the deterministic policy balances all 16 evaluation episodes after
#: 5 iterations (10k env steps; 1 s on MuJoCo, 4 s on SAPIEN), seeds 0-5 stopped after 5-40 iterations
#: (evaluated every 5 then), and without the early stop the stochastic training policy reaches 100 % by
#: ~60 iterations (14 s MuJoCo, 52 s SAPIEN). ``reach`` and ``quadruped`` are starting points after the
#: usual IsaacLab/mjlab settings, not tuned yet. No task sets ``eval_interval``: all take the default
#: schedule (:meth:`TrainConfig.eval_iterations`).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "cartpole": {
        "num_envs": 64,
        "max_iterations": 150,
        "num_steps_per_env": 32,
        "actor_hidden_dims": (32, 32),
        "critic_hidden_dims": (32, 32),
        "learning_rate": 1e-3,
        "entropy_coef": 0.005,
        "eval_episodes": 16,
        "save_interval": 50,
        "stop_at_success": 1.0,
    },
    "reach": {
        "num_envs": 256,
        "max_iterations": 500,
        "num_steps_per_env": 24,
        "actor_hidden_dims": (64, 64),
        "critic_hidden_dims": (64, 64),
        "entropy_coef": 0.001,
        "init_noise_std": 0.5,
        "eval_episodes": 32,
        "init_at_random_ep_len": True,
        "stop_at_success": 1.0,
    },
    "velocity": {
        "num_envs": 256,
        "max_iterations": 1000,
        "num_steps_per_env": 24,
        "actor_hidden_dims": (128, 128),
        "critic_hidden_dims": (128, 128),
        "learning_rate": 1e-3,
        "entropy_coef": 0.005,
        "eval_episodes": 32,
        "save_interval": 50,
        "init_at_random_ep_len": True,
    },
}
#: the quadruped task is the velocity task on the built-in quadruped: the same training defaults
TASK_DEFAULTS["quadruped"] = TASK_DEFAULTS["velocity"]
