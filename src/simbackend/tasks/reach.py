"""``reach``: move the end-effector site of the built-in 7-DoF arm to a sampled target point.

Every episode starts near the ``home`` keyframe and draws a target in a box in
front of the arm (``target_low`` .. ``target_high``, world frame).

Action (default controller ``"ee_delta_pos"``): ``(N, 3)`` in ``[-1, 1]``, a
translation of the ``ee_site`` of up to ``max_delta`` m per policy step along
the arm base's axes, orientation held; the operational-space controller
(:class:`~simbackend.controllers.EEPoseConfig`, damped least squares on the
site Jacobian) turns it into joint targets for the position servos. With
``controller="joint_delta_pos"`` the action is ``(N, 7)`` joint-target deltas
of up to ``max_joint_delta`` rad.

Observations: ``joint_pos`` (7), ``joint_vel`` (7), ``ee_pos`` (3), ``target_pos``
(3) and ``to_target`` (3), positions in the arm base's frame.
Reward: ``1 - tanh(5 d)`` for the distance ``d`` to the target, plus 1 while
within ``success_radius``. Success: within ``success_radius`` at the end of the
episode. No early termination.

:func:`scripted_action` is the baseline: a proportional law on the
end-effector error through the same controller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from simbackend.controllers import EEPoseConfig, JointPositionConfig, make_controller
from simbackend.errors import InvalidArgumentError
from simbackend.math import quat_apply_inverse

from . import register_task
from .base import Task, TaskConfig, check_non_negative

ARM_JOINTS = tuple(f"joint{k}" for k in range(1, 8))
CONTROLLERS = ("ee_delta_pos", "joint_delta_pos")


@dataclass(frozen=True)
class ReachConfig(TaskConfig):
    """Reach. Defaults: 100 policy steps of 40 ms (4 s).

    Attributes:
        controller: ``"ee_delta_pos"`` or ``"joint_delta_pos"``.
        target_low, target_high: corners of the target box, world frame (m).
        max_delta: end-effector translation of a unit action (m per policy step).
        max_joint_delta: joint-target change of a unit action (rad), joint control.
        joint_noise: start joint angles uniform in ``home +- joint_noise`` (rad).
        success_radius: distance (m) that counts as reached.
    """

    episode_length: int = 100
    decimation: int = 20
    controller: str = "ee_delta_pos"
    target_low: tuple = (0.25, -0.35, 0.9)
    target_high: tuple = (0.55, 0.35, 1.4)
    max_delta: float = 0.05
    max_joint_delta: float = 0.1
    joint_noise: float = 0.1
    success_radius: float = 0.02

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.controller not in CONTROLLERS:
            raise InvalidArgumentError(
                f"config.controller: expected one of {list(CONTROLLERS)}, got {self.controller!r}"
            )
        for name in ("target_low", "target_high"):
            v = getattr(self, name)
            try:
                v = tuple(float(x) for x in v)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"config.{name}: expected 3 numbers, got {v!r}") from None
            if len(v) != 3 or not all(math.isfinite(x) for x in v):
                raise InvalidArgumentError(f"config.{name}: expected 3 finite numbers, got {v!r}")
            object.__setattr__(self, name, v)
        if any(lo > hi for lo, hi in zip(self.target_low, self.target_high)):
            raise InvalidArgumentError(
                f"config.target_low: must be <= target_high, got {self.target_low} and {self.target_high}"
            )
        check_non_negative(self, "max_delta", "max_joint_delta", "joint_noise", "success_radius")


@register_task
class ReachTask(Task):
    name = "reach"
    model = "arm7"
    config_class = ReachConfig
    #: 3 target coordinates, 7 joint offsets
    reset_draws = 10

    def _build_controller(self):
        b, c = self.backend, self.config
        self._site = b.get_site_ids(["ee_site"])
        self._base = b.get_body_ids(["base"])
        self._home = b.get_keyframe_qpos("home").to(torch.float32)
        self._qpos_cols = b.get_joint_qpos_indices(list(ARM_JOINTS))
        self._dof_cols = b.get_joint_dof_pos_indices(list(ARM_JOINTS))
        self.targets = torch.zeros((self.num_envs, 3), dtype=torch.float32, device=self.device)
        self._low = torch.tensor(c.target_low, dtype=torch.float32, device=self.device)
        self._high = torch.tensor(c.target_high, dtype=torch.float32, device=self.device)
        if c.controller == "ee_delta_pos":
            d = c.max_delta
            return make_controller(
                b,
                EEPoseConfig(
                    joints=ARM_JOINTS,
                    site="ee_site",
                    pos_low=-d,
                    pos_high=d,
                    rot_bound=0.1,
                    frame="root_translation:root_aligned_rotation",
                    use_delta=True,
                    root_body="base",
                ),
            )
        d = c.max_joint_delta
        return make_controller(
            b, JointPositionConfig(joints=ARM_JOINTS, low=-d, high=d, use_delta=True, use_target=True)
        )

    def _action_dim(self) -> int:
        return 3 if self.config.controller == "ee_delta_pos" else len(ARM_JOINTS)

    def _controller_action(self, action: torch.Tensor) -> torch.Tensor:
        if self.config.controller == "ee_delta_pos":  # translation only: a zero rotation holds the orientation
            return torch.cat([action, torch.zeros_like(action)], dim=1)
        return action

    def _initial_state(self, env_ids: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u = u.to(torch.float32)
        self.targets[env_ids] = self._low + (self._high - self._low) * u[:, :3]
        qpos = self._home.expand(env_ids.numel(), -1).clone()
        qpos[:, self._qpos_cols] += self.config.joint_noise * (2 * u[:, 3:10] - 1)
        return qpos, None

    def to_base(self, p_w: torch.Tensor) -> torch.Tensor:
        """``(N, 3)`` world points ``p_w`` expressed in the arm base's frame."""
        base_pos = self.backend.get_body_pos_w(self._base)[:, 0]
        base_quat = self.backend.get_body_quat_w(self._base)[:, 0]
        return quat_apply_inverse(base_quat, p_w - base_pos)

    def ee_pos_w(self) -> torch.Tensor:
        """``(N, 3)`` world position of the end-effector site."""
        return self.backend.get_site_pos_w(self._site)[:, 0]

    def distance(self) -> torch.Tensor:
        """``(N,)`` distance (m) from the end-effector site to the target."""
        return torch.linalg.vector_norm(self.targets - self.ee_pos_w(), dim=1)

    def _observations(self) -> dict[str, torch.Tensor]:
        ee = self.to_base(self.ee_pos_w())
        target = self.to_base(self.targets)
        return {
            "joint_pos": self.backend.get_dof_pos()[:, self._dof_cols],
            "joint_vel": self.backend.get_dof_vel()[:, self._dof_cols],
            "ee_pos": ee,
            "target_pos": target,
            "to_target": target - ee,
        }

    def _reward(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        d = self.distance()
        return {"reach": 1.0 - torch.tanh(5.0 * d), "reached": (d <= self.config.success_radius).to(torch.float32)}

    def _success(self) -> torch.Tensor:
        return self.distance() <= self.config.success_radius


def scripted_action(task: ReachTask, gain: float = 1.0) -> torch.Tensor:
    """The baseline policy: ``(N, 3)`` actions moving the site straight at the target.

    A proportional law on the end-effector error in the arm base's frame, scaled
    by the controller's per-step bound and clipped to ``[-1, 1]``: the operational-
    space controller (damped least squares on the site Jacobian) does the rest.
    Needs the ``"ee_delta_pos"`` controller.
    """
    if task.config.controller != "ee_delta_pos":
        raise InvalidArgumentError(
            f"task: the scripted reach baseline needs controller='ee_delta_pos', got {task.config.controller!r}"
        )
    error = task.to_base(task.targets) - task.to_base(task.ee_pos_w())
    return (gain * error / task.config.max_delta).clamp(-1.0, 1.0)
