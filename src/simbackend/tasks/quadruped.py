"""``quadruped``: track a commanded planar velocity with the built-in floating-base quadruped.

The staple of legged-robot training, on flat ground. Every episode draws one
command (forward and lateral velocity in the base's heading frame, yaw rate)
and a start near the ``stand`` keyframe with a random heading.

Action: ``(N, 12)`` in ``[-1, 1]``: joint position targets ``stand + action_scale *
action`` tracked by a PD law at the physics rate on the twelve torque motors
(:class:`~simbackend.controllers.JointPDConfig`).

Observations (base frame): ``base_lin_vel`` (3), ``base_ang_vel`` (3),
``projected_gravity`` (3), ``command`` (3), ``joint_pos`` (12, relative to
``stand``), ``joint_vel`` (12), ``last_action`` (12).

Reward (per policy step, each term scaled by the control period as in
legged_gym): velocity tracking ``exp(-|v_xy - cmd_xy|^2 / sigma)`` and yaw-rate
tracking, minus vertical velocity, roll/pitch rate, tilt, action rate and
joint torque proxies. Terminated when the base falls: height below
``min_height`` or the base's up axis more than ``max_tilt`` rad from vertical.
Success: the episode reaches its time limit with the mean planar velocity
error at most ``success_error`` m/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from simbackend.controllers import JointPDConfig, make_controller
from simbackend.errors import InvalidArgumentError
from simbackend.math import quat_apply, quat_apply_inverse

from . import register_task
from .base import Task, TaskConfig, check_non_negative

LEGS = ("FL", "FR", "RL", "RR")
JOINTS = tuple(f"{leg}_{part}" for leg in LEGS for part in ("hip", "thigh", "calf"))


@dataclass(frozen=True)
class QuadrupedConfig(TaskConfig):
    """Velocity tracking. Defaults: 500 policy steps of 20 ms (10 s).

    Attributes:
        command_range: ``((vx_lo, vx_hi), (vy_lo, vy_hi), (yaw_lo, yaw_hi))``, m/s and rad/s.
        action_scale: joint-target offset (rad) of a unit action.
        kp, kd: PD gains (N m / rad, N m s / rad).
        joint_noise: start joint angles uniform in ``stand +- joint_noise``.
        min_height, max_tilt: fall criteria (m, rad).
        tracking_sigma: width of the tracking rewards, (m/s)^2.
        success_error: mean planar velocity error (m/s) of a successful episode.
    """

    episode_length: int = 500
    decimation: int = 10
    command_range: tuple = ((-1.0, 1.0), (-0.5, 0.5), (-1.0, 1.0))
    action_scale: float = 0.5
    kp: float = 40.0
    kd: float = 1.0
    joint_noise: float = 0.1
    min_height: float = 0.18
    max_tilt: float = 1.0
    tracking_sigma: float = 0.25
    success_error: float = 0.3

    def __post_init__(self) -> None:
        super().__post_init__()
        rng = self.command_range
        try:
            rng = tuple((float(lo), float(hi)) for lo, hi in rng)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"config.command_range: expected three (low, high) pairs, got {rng!r}") from None
        if len(rng) != 3 or any(not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi) for lo, hi in rng):
            raise InvalidArgumentError(f"config.command_range: expected three finite (low <= high) pairs, got {rng!r}")
        object.__setattr__(self, "command_range", rng)
        check_non_negative(
            self, "action_scale", "kp", "kd", "joint_noise", "min_height", "max_tilt", "tracking_sigma", "success_error"
        )
        if self.tracking_sigma == 0:
            raise InvalidArgumentError("config.tracking_sigma: expected a number > 0, got 0")


@register_task
class QuadrupedTask(Task):
    name = "quadruped"
    model = "quadruped"
    config_class = QuadrupedConfig
    #: 3 command values, 1 heading, 12 joint offsets
    reset_draws = 16

    def _build_controller(self):
        b, c = self.backend, self.config
        stand = b.get_keyframe_qpos("stand")
        self._stand_qpos = stand.to(torch.float32)
        cols = b.get_joint_qpos_indices(list(JOINTS))
        self._qpos_cols = cols
        self._stand_joints = self._stand_qpos[cols]
        low = (self._stand_joints - c.action_scale).tolist()
        high = (self._stand_joints + c.action_scale).tolist()
        n = self.num_envs
        self.commands = torch.zeros((n, 3), dtype=torch.float32, device=self.device)
        self.last_action = torch.zeros((n, len(JOINTS)), dtype=torch.float32, device=self.device)
        self._prev_action = torch.zeros_like(self.last_action)
        self._error_sum = torch.zeros(n, dtype=torch.float32, device=self.device)
        # made once: a copy to the device at every reset would make a GPU loop wait (docs/conventions.md)
        self._command_low, self._command_high = (
            torch.tensor([r[k] for r in self.config.command_range], device=self.device) for k in (0, 1)
        )
        self._gravity_w = torch.tensor([0.0, 0.0, -1.0], device=self.device)
        self._up_w = torch.tensor([0.0, 0.0, 1.0], device=self.device)
        self._dof_cols = b.get_joint_dof_pos_indices(list(JOINTS))
        return make_controller(b, JointPDConfig(joints=JOINTS, kp=c.kp, kd=c.kd, low=low, high=high))

    def _initial_state(self, env_ids: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u = u.to(torch.float32)
        n = env_ids.numel()
        lo, hi = self._command_low, self._command_high
        self.commands[env_ids] = lo + (hi - lo) * u[:, :3]
        qpos = self._stand_qpos.expand(n, -1).clone()
        yaw = (2 * u[:, 3] - 1) * math.pi
        qpos[:, 3] = torch.cos(yaw / 2)
        qpos[:, 6] = torch.sin(yaw / 2)
        qpos[:, 4:6] = 0
        qpos[:, self._qpos_cols] += self.config.joint_noise * (2 * u[:, 4:16] - 1)
        # index_fill_, not t[ids] = 0: that copies the 0 to the device inside index_put_, which waits
        for t in (self.last_action, self._prev_action, self._error_sum):
            t.index_fill_(0, env_ids, 0.0)
        return qpos, None

    def _base_frame(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q = self.backend.get_base_quat()
        return (
            quat_apply_inverse(q, self.backend.get_base_lin_vel()),
            quat_apply_inverse(q, self.backend.get_base_ang_vel()),
            quat_apply_inverse(q, self._gravity_w.expand(self.num_envs, 3)),
        )

    def _observations(self) -> dict[str, torch.Tensor]:
        lin, ang, grav = self._base_frame()
        return {
            "base_lin_vel": lin,
            "base_ang_vel": ang,
            "projected_gravity": grav,
            "command": self.commands.clone(),
            "joint_pos": self.backend.get_dof_pos()[:, self._dof_cols] - self._stand_joints,
            "joint_vel": self.backend.get_dof_vel()[:, self._dof_cols],
            "last_action": self.last_action.clone(),
        }

    def _controller_action(self, action: torch.Tensor) -> torch.Tensor:
        self._prev_action.copy_(self.last_action)
        self.last_action.copy_(action)
        return action

    def _reward(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        lin, ang, grav = self._base_frame()
        dt, sigma = self.control_dt, self.config.tracking_sigma
        err_xy = ((lin[:, :2] - self.commands[:, :2]) ** 2).sum(1)
        err_yaw = (ang[:, 2] - self.commands[:, 2]) ** 2
        self._error_sum += err_xy.sqrt()
        return {
            "track_lin_vel": 1.0 * dt * torch.exp(-err_xy / sigma),
            "track_yaw_rate": 0.5 * dt * torch.exp(-err_yaw / sigma),
            "lin_vel_z": -2.0 * dt * lin[:, 2] ** 2,
            "ang_vel_xy": -0.05 * dt * (ang[:, :2] ** 2).sum(1),
            "tilt": -1.0 * dt * (grav[:, :2] ** 2).sum(1),
            "action_rate": -0.01 * dt * ((action - self._prev_action) ** 2).sum(1),
            "joint_vel": -1e-4 * dt * (self.backend.get_dof_vel()[:, self._dof_cols] ** 2).sum(1),
        }

    def _fallen(self) -> torch.Tensor:
        up = quat_apply(self.backend.get_base_quat(), self._up_w.expand(self.num_envs, 3))
        too_low = self.backend.get_base_pos()[:, 2] < self.config.min_height
        return too_low | (up[:, 2] < math.cos(self.config.max_tilt))

    def _terminated(self) -> torch.Tensor:
        return self._fallen()

    def mean_velocity_error(self) -> torch.Tensor:
        """``(N,)`` mean planar velocity error (m/s) of the current episodes so far."""
        return self._error_sum / self.episode_step.clamp(min=1).to(torch.float32)

    def _success(self) -> torch.Tensor:
        done = self.episode_step >= self.config.episode_length
        return done & ~self._fallen() & (self.mean_velocity_error() <= self.config.success_error)
