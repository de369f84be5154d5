"""Joint-space controllers: position servos, PD on motors, passive joints."""

from __future__ import annotations

import numpy as np
import torch

from simbackend.contract import SimBackend
from simbackend.errors import InvalidArgumentError

from .base import (
    Controller,
    bound_array,
    check_backend,
    joint_actuators,
    resolve_dof_joints,
    resolve_names,
    sorted_range,
)
from .config import JointPDConfig, JointPositionConfig, PassiveConfig
from .registry import register_controller

__all__ = ["JointPDController", "JointPositionController", "PassiveController"]


class _JointTargets(Controller):
    """Shared part of the joint controllers: ``(N, k)`` joint targets set from absolute or delta actions."""

    def _init_targets(self, backend: SimBackend, joints: np.ndarray, target_range: np.ndarray) -> None:
        dev = backend.device
        names = list(self.config.joints)
        self.joint_ids = torch.as_tensor(joints, dtype=torch.int64, device=dev)
        self._qpos_cols = backend.get_joint_qpos_indices(names).to(dev)
        self._qvel_cols = backend.get_joint_qvel_indices(names).to(dev)
        self._target_low = torch.as_tensor(target_range[:, 0], dtype=torch.float32, device=dev)
        self._target_high = torch.as_tensor(target_range[:, 1], dtype=torch.float32, device=dev)
        self._target = self._clip_target(self._joint_state(self._qpos_cols))

    @property
    def targets(self) -> torch.Tensor:
        """``(N, k)`` float32 current joint targets (rad or m), a copy."""
        return self._target.clone()

    def _clip_target(self, t: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(t, self._target_high), self._target_low)

    def reanchor(self, ids: torch.Tensor) -> None:
        q = self._joint_state(self._qpos_cols)
        self._target[ids] = self._clip_target(q[ids])

    def store_targets(self, action: torch.Tensor) -> None:
        cfg = self.config
        if cfg.use_delta:
            base = self._target if cfg.use_target else self._joint_state(self._qpos_cols)
            target = base + action
        else:
            target = action
        self._target = self._clip_target(target)


def _action_bounds(cfg, default: np.ndarray, n: int, device: torch.device, what: str) -> tuple:
    """``(low, high)`` of the action: the config's, or (absolute, none given) ``default`` ``(n, 2)``."""
    if cfg.low is not None:
        return bound_array(cfg.low, n, device), bound_array(cfg.high, n, device)
    if cfg.normalize_action and not np.isfinite(default).all():
        bad = [cfg.joints[i] for i in np.flatnonzero(~np.isfinite(default).all(axis=1))]
        raise InvalidArgumentError(
            f"{type(cfg).__name__}.low, high: joints {bad} have an unlimited {what};"
            " give finite low/high to normalize actions"
        )
    return (
        torch.as_tensor(default[:, 0], dtype=torch.float32, device=device),
        torch.as_tensor(default[:, 1], dtype=torch.float32, device=device),
    )


@register_controller
class JointPositionController(_JointTargets):
    """Joint position targets for joints driven by position actuators (:class:`JointPositionConfig`).

    Action ``(N, k)`` for ``k = len(joints)``; :meth:`compute` gives ``(N, k)``
    ctrl ``gear * target`` for their position actuators (``actuator_ids``).
    Not physics-rate: the servos track the targets themselves.

    Attributes:
        joint_ids: ``(k,)`` the joints, in config order.
        targets: ``(N, k)`` the current joint targets.
    """

    config_type = JointPositionConfig

    def __init__(self, backend: SimBackend, config: JointPositionConfig):
        backend = check_backend(backend)
        self.config = config
        joints = resolve_dof_joints(backend, config.joints, "JointPositionConfig.joints")
        acts = joint_actuators(
            backend, joints, config.joints, "position", "JointPositionConfig.joints", "; JointPDConfig drives motors"
        )
        info = backend.info
        gear = np.asarray(info.actuator_gear)[acts]
        if (gear == 0).any():
            raise InvalidArgumentError(
                f"JointPositionConfig.joints: actuators with gear 0: "
                f"{[info.actuator_names[a] for a in acts[gear == 0]]}"
            )
        target_range = sorted_range(np.asarray(info.actuator_ctrl_range)[acts], gear)
        k = len(acts)
        low, high = _action_bounds(config, target_range, k, backend.device, "ctrl range")
        super().__init__(backend, config, acts, low, high, physics_rate=False, normalize_action=config.normalize_action)
        self._gear = torch.as_tensor(gear, dtype=torch.float32, device=backend.device)
        self._init_targets(backend, joints, target_range)

    def compute(self) -> torch.Tensor:
        """``(N, k)`` ctrl of the position actuators: ``gear * target``."""
        return self._target * self._gear


@register_controller
class JointPDController(_JointTargets):
    """A PD law on motors, recomputed every physics substep (:class:`JointPDConfig`).

    Action ``(N, k)`` sets joint targets (absolute or delta, clipped to the joint
    range). :meth:`compute`: ``torque = kp (target - q) - kd qdot`` from the
    current state, clipped to the DC motor's torque-speed curve where the config
    gives one, ``ctrl = torque / (gear * gain)`` of each joint's motor,
    clipped to the ctrl range; ``(N, k)``. ``physics_rate`` is true.

    Attributes:
        joint_ids: ``(k,)`` the joints. kp, kd: ``(k,)`` float32 gains.
        saturation_effort: ``(k,)`` float32 stall torque ``S`` of the curve (``inf`` where the joint has
            none; with only a velocity limit, the motor's own limit ``E``).
        velocity_limit: ``(k,)`` float32 no-load speed ``V`` (``inf`` where none).
        targets: ``(N, k)`` the current joint targets.
    """

    config_type = JointPDConfig

    def __init__(self, backend: SimBackend, config: JointPDConfig):
        backend = check_backend(backend)
        self.config = config
        joints = resolve_dof_joints(backend, config.joints, "JointPDConfig.joints")
        acts = joint_actuators(
            backend,
            joints,
            config.joints,
            "motor",
            "JointPDConfig.joints",
            "; JointPositionConfig drives position actuators",
        )
        info = backend.info
        scale = np.asarray(info.actuator_gear)[acts] * np.asarray(info.actuator_gain)[acts]
        if (scale == 0).any():
            raise InvalidArgumentError(
                f"JointPDConfig.joints: motors with zero gear or gain: "
                f"{[info.actuator_names[a] for a in acts[scale == 0]]}"
            )
        joint_range = np.asarray(info.joint_range)[joints]
        k = len(acts)
        dev = backend.device
        low, high = _action_bounds(config, joint_range, k, dev, "joint range")
        super().__init__(backend, config, acts, low, high, physics_rate=True, normalize_action=config.normalize_action)
        self.kp = bound_array(config.kp, k, dev)
        self.kd = bound_array(config.kd, k, dev)
        self._scale = torch.as_tensor(scale, dtype=torch.float32, device=dev)
        r = np.asarray(info.actuator_ctrl_range)[acts]
        self._ctrl_low = torch.as_tensor(r[:, 0], dtype=torch.float32, device=dev)
        self._ctrl_high = torch.as_tensor(r[:, 1], dtype=torch.float32, device=dev)
        sat, vmax = _motor_curve(config, np.abs(r * scale[:, None]).max(axis=1), [info.actuator_names[a] for a in acts])
        self.saturation_effort = torch.as_tensor(sat, dtype=torch.float32, device=dev)
        self.velocity_limit = torch.as_tensor(vmax, dtype=torch.float32, device=dev)
        #: the curve is evaluated only where some joint has one (a plain PD law costs nothing more)
        self._curve = bool(np.isfinite(sat).any())
        #: S / V, the torque lost per unit of speed (0 where V is inf: S is then a plain torque limit)
        per_speed = np.divide(sat, vmax, out=np.zeros(k), where=np.isfinite(vmax))
        self._stall_per_speed = torch.as_tensor(per_speed, dtype=torch.float32, device=dev)
        self._neg_stall = -self.saturation_effort
        self._init_targets(backend, joints, joint_range)

    def compute(self) -> torch.Tensor:
        """``(N, k)`` motor ctrl of the PD law at the current state, clipped to the torque-speed curve
        (where there is one) and to the ctrl range."""
        q = self.backend.get_qpos()[:, self._qpos_cols]
        qd = self.backend.get_qvel()[:, self._qvel_cols]
        torque = self.kp * (self._target - q) - self.kd * qd
        if self._curve:  # S (1 - v/V) above, S (-1 - v/V) below: 2 S apart, never crossed
            lost = qd * self._stall_per_speed
            torque = torch.clamp(torque, min=self._neg_stall - lost, max=self.saturation_effort - lost)
        return torch.maximum(torch.minimum(torque / self._scale, self._ctrl_high), self._ctrl_low)


def _motor_curve(config: JointPDConfig, effort: np.ndarray, motors: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(S, V)`` per joint, float64 (``inf``: none): the config's stall torque and no-load speed, ``S``
    defaulting to the motor's own limit ``effort`` (``|ctrl range| * |gear * gain|``) where only ``V`` is given."""
    k = len(config.joints)
    sat = np.full(k, np.inf) if config.saturation_effort is None else np.broadcast_to(config.saturation_effort, k)
    vmax = np.full(k, np.inf) if config.velocity_limit is None else np.broadcast_to(config.velocity_limit, k)
    sat, vmax = np.array(sat, dtype=np.float64), np.array(vmax, dtype=np.float64)
    fill = np.isinf(sat) & np.isfinite(vmax)
    bad = fill & ~np.isfinite(effort)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidArgumentError(
            f"JointPDConfig.velocity_limit: joint {config.joints[i]!r} has a velocity limit but no"
            f" saturation_effort, and its motor {motors[i]!r} has no ctrl range to take the stall torque from;"
            " give saturation_effort"
        )
    sat[fill] = effort[fill]
    return sat, vmax


@register_controller
class PassiveController(Controller):
    """Joints left to the physics (:class:`PassiveConfig`): ``action_dim`` 0, their motors at 0.

    ``actuator_ids`` are the motors on those joints (possibly none);
    :meth:`compute` gives ``(N, k)`` zeros.
    """

    config_type = PassiveConfig

    def __init__(self, backend: SimBackend, config: PassiveConfig):
        backend = check_backend(backend)
        joints = resolve_names(backend, "joint", config.joints, "PassiveConfig.joints")
        info = backend.info
        acts = []
        for name, j in zip(config.joints, joints):
            for a in np.flatnonzero(np.asarray(info.actuator_joint) == j):
                kind = info.actuator_kind[a]
                if kind != "motor":
                    raise InvalidArgumentError(
                        f"PassiveConfig.joints: joint {name!r} is driven by {kind} actuator"
                        f" {info.actuator_names[a]!r}; only joints with motors (held at 0) or no actuator"
                        " can be passive"
                    )
                acts.append(int(a))
        super().__init__(
            backend,
            config,
            np.asarray(acts, dtype=np.int64),
            np.zeros(0),
            np.zeros(0),
            physics_rate=False,
            normalize_action=True,
        )
        self.joint_ids = torch.as_tensor(joints, dtype=torch.int64, device=backend.device)

    def compute(self) -> torch.Tensor:
        """``(N, k)`` zeros."""
        return torch.zeros((self.num_envs, self.actuator_ids.numel()), dtype=torch.float32, device=self.backend.device)

    def reanchor(self, ids: torch.Tensor) -> None:
        pass

    def store_targets(self, action: torch.Tensor) -> None:
        pass
