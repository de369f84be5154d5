"""Checkpoints that carry everything an evaluation needs: weights, observation normaliser, task, configs, engine.

A checkpoint is one ``torch.save`` file of plain values (it loads with ``weights_only=True``):

* ``"format"``: :data:`FORMAT`;
* ``"task"``, ``"task_config"`` (``config.to_dict()``, a randomization plan as its dict), ``"sim"`` (the
  engine it was trained on), ``"delegated"`` (the model elements whose physics that engine took from
  MuJoCo, its ``capabilities.delegated``: a policy trained there partly learned MuJoCo's forces),
  ``"describe"`` (``task.describe()``), ``"engines"`` (``{engine: envs}``: the training envs each engine
  simulated, several for a mixed backend such as ``sim="mujoco,sapien"``; absent before 0.10);
* ``"train_config"`` (:meth:`TrainConfig.to_dict`), ``"rsl_rl_cfg"`` (the runner configuration);
* ``"observation_size"``, ``"action_dim"``, ``"iteration"``, ``"env_steps"``, ``"eval"`` (the last
  evaluation's figures or ``None``);
* rsl-rl's ``"actor_state_dict"``, ``"critic_state_dict"``, ``"optimizer_state_dict"`` (the actor's
  holds its observation normaliser, also given as ``"obs_normalizer"`` ``{"mean", "std"}`` or ``None``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from simbackend._extras import require_extra

require_extra("rsl_rl", "tensordict", "matplotlib", "tqdm", purpose="training (simbackend.training)")

from tensordict import TensorDict  # noqa: E402

from simbackend.errors import InvalidArgumentError

from .config import TrainConfig

__all__ = ["FORMAT", "Checkpoint", "Policy", "check_resumable", "load_checkpoint", "robot_change", "save_checkpoint"]

FORMAT = "simbackend.training/1"

_REQUIRED = (
    "task",
    "task_config",
    "sim",
    "train_config",
    "rsl_rl_cfg",
    "observation_size",
    "action_dim",
    "actor_state_dict",
)

#: what continuing a run needs beyond the actor (rsl-rl's ``PPO.load``)
RESUME_KEYS = ("critic_state_dict", "optimizer_state_dict")


class Policy:
    """The deterministic policy (the Gaussian's mean) of an rsl-rl actor: ``policy(obs) -> actions``.

    ``obs`` is a task's flat observation ``(N, observation_size)``; the actions ``(N, action_dim)`` are
    what the actor outputs (the task clips them to ``[-1, 1]``). Runs without gradients.
    """

    def __init__(self, actor: torch.nn.Module, device: Any = "cpu"):
        self.actor = actor.to(device)
        self.actor.eval()
        self.device = torch.device(device)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.to(self.device, torch.float32)
        with torch.inference_mode():
            return self.actor(TensorDict({"policy": obs}, batch_size=[obs.shape[0]]))


def build_actor(rsl_rl_cfg: dict, observation_size: int, action_dim: int) -> torch.nn.Module:
    """rsl-rl's actor model as the runner configuration ``rsl_rl_cfg`` describes it."""
    from rsl_rl.utils import resolve_class

    actor_class, actor_cfg = resolve_class(rsl_rl_cfg["actor"])
    obs = TensorDict({"policy": torch.zeros(1, observation_size)}, batch_size=[1])
    return actor_class(obs, {"actor": ["policy"]}, "actor", action_dim, **actor_cfg)


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint (:func:`load_checkpoint`); ``data`` is the raw dict."""

    path: Path
    data: dict

    @property
    def task(self) -> str:
        return self.data["task"]

    @property
    def sim(self) -> str:
        return self.data["sim"]

    @property
    def engines(self) -> dict[str, int]:
        """``{engine: training envs}``, in the mix's order: the engines the policy was trained on (one for a
        plain backend; a checkpoint from before 0.10: its ``sim`` with every env)."""
        if self.data.get("engines"):
            return dict(self.data["engines"])
        from simbackend.mixing import engines_of, is_mix, parse_mix

        n = int(self.train_config.num_envs)
        if not is_mix(self.sim):
            return {self.sim: n}
        mix = parse_mix(self.sim, n, registered=engines_of(self.sim, checked=False))  # a record: no registry check
        return dict(zip(mix.engines, mix.counts))

    @property
    def delegated(self) -> tuple[str, ...]:
        """The elements whose physics the training engine took from MuJoCo (empty in checkpoints before 0.8)."""
        return tuple(self.data.get("delegated", ()))

    @property
    def task_config(self) -> dict:
        return dict(self.data["task_config"])

    @property
    def train_config(self) -> TrainConfig:
        return TrainConfig.from_dict(self.data["train_config"])

    @property
    def iteration(self) -> int:
        return int(self.data.get("iteration", 0))

    @property
    def env_steps(self) -> int:
        return int(self.data.get("env_steps", 0))

    def policy(self, device: Any = "cpu") -> Policy:
        """The deterministic policy with the checkpoint's weights and observation normaliser."""
        actor = build_actor(self.data["rsl_rl_cfg"], int(self.data["observation_size"]), int(self.data["action_dim"]))
        actor.load_state_dict(self.data["actor_state_dict"])
        return Policy(actor, device)


def save_checkpoint(path: Any, data: dict) -> Path:
    """Write ``data`` (with the format tag) to ``path`` atomically (a temporary file, then a rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"format": FORMAT, **data}, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: Any, map_location: Any | None = "cpu") -> Checkpoint:
    """Read a checkpoint written by :func:`~simbackend.training.train`.

    Raises:
        InvalidArgumentError: no such file, or not a checkpoint of this format.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"checkpoint: expected a file path, got {type(path).__name__}")
    p = Path(path)
    if not p.is_file():
        raise InvalidArgumentError(f"checkpoint: no such file {str(p)!r}")
    try:
        data = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as e:
        raise InvalidArgumentError(
            f"checkpoint: {str(p)!r} is not a readable checkpoint (torch.load failed with {type(e).__name__})"
        ) from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidArgumentError(
            f"checkpoint: {str(p)!r} is not a simbackend training checkpoint (format {FORMAT!r})"
        )
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise InvalidArgumentError(f"checkpoint: {str(p)!r} lacks {missing}")
    return Checkpoint(p, data)


def check_resumable(ckpt: Checkpoint) -> None:
    """Raise naming ``resume`` unless ``ckpt`` holds what a run continues from: its critic and optimizer too."""
    missing = [key for key in RESUME_KEYS if key not in ckpt.data]
    if missing:
        raise InvalidArgumentError(
            f"resume: {str(ckpt.path)!r} holds the actor only, no {' or '.join(missing)}: it evaluates and"
            " exports, but a run cannot continue from it; train a new run"
        )


def robot_change(ckpt: Checkpoint, robot: Any) -> str | None:
    """How ``robot`` (a name, a JSON description file or a description) differs from the robot ``ckpt`` was
    trained on, in the policy's joints (names, order) or their actuation: one line naming both robots; ``None``
    where they agree (or neither task has a robot)."""
    from simbackend.errors import SimBackendError
    from simbackend.robots import get_robot

    trained = ckpt.task_config.get("robot")
    if trained == robot or trained is None or robot is None:
        return None if trained == robot else f"{str(ckpt.path)!r} was trained on robot {trained!r}, not {robot!r}"
    asked = get_robot(robot)
    try:
        before = get_robot(trained)
    except SimBackendError as e:
        return f"{str(ckpt.path)!r} was trained on robot {trained!r} (unreadable now: {e}), not {asked.name!r}"
    if (before.joints, before.actuation) == (asked.joints, asked.actuation):
        return None

    def text(d: Any) -> str:
        joints = f"joints {', '.join(d.joints)}; " if before.joints != asked.joints else ""
        return f"{d.name!r} ({joints}{d.actuation} actuation)"

    return f"{str(ckpt.path)!r} was trained on robot {text(before)}, not {text(asked)}"
