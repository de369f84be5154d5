"""Driving a description's joints at its own actuation, through the controllers (:mod:`simbackend.controllers`).

A description's ``actuation`` says how its joints are driven: ``"servo"``, the
scene's position actuators (:class:`~simbackend.controllers.JointPositionConfig`);
``"pd"``, a PD law at the physics rate on its motors
(:class:`~simbackend.controllers.JointPDConfig`, with the description's ``kp``
and ``kd``, and its DC-motor ``saturation_effort`` and ``velocity_limit`` where
given). :func:`joint_controller` builds the one controller that drives every
driven joint (the policy's, then the held ones) that way, and gives the policy
joints' gains, for a torque estimate ``kp * (target - q) - kd * qdot``. The
velocity task and the settle check (:mod:`simbackend.robots.settle`) take it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from simbackend.controllers import JointPDConfig, JointPositionConfig, make_controller
from simbackend.controllers.base import joint_actuators
from simbackend.errors import InvalidArgumentError

from .description import RobotDescription

__all__ = ["joint_controller", "joint_controller_gains", "joint_efforts", "target_bounds"]


def target_bounds(resolved: Any, scale: Any, held_scale: float = 1e-3) -> tuple[list[float], list[float]]:
    """``(low, high)`` per driven joint: the default angle ``-+ scale`` for the policy's joints (one number,
    or a ``(k,)`` tensor, one per policy joint) and ``-+ held_scale`` for the held ones, so that a
    normalized action 0 targets the default pose.

    ``resolved`` is :func:`simbackend.robots.resolve`'s :class:`~simbackend.robots.ResolvedRobot`.
    """
    held = resolved.held_default
    targets = torch.cat([resolved.default_joints, held])
    scale = torch.as_tensor(scale, dtype=resolved.default_joints.dtype, device=resolved.default_joints.device)
    spread = torch.cat([scale.expand_as(resolved.default_joints), torch.full_like(held, held_scale)])
    return (targets - spread).tolist(), (targets + spread).tolist()


def joint_controller(
    desc: RobotDescription, backend: Any, resolved: Any, low: Sequence[float], high: Sequence[float]
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The controller that drives ``desc``'s joints at its actuation, and the policy joints' gains.

    Args:
        desc: the description (:func:`simbackend.robots.get_robot`'s).
        backend: a backend built on its scene (:func:`simbackend.robots.make_robot_backend`).
        resolved: ``resolve(desc, backend)`` (:class:`~simbackend.robots.ResolvedRobot`).
        low, high: the action bounds of every driven joint, the policy's joints then the held ones
            (``len(desc.driven_joints)`` each): a normalized action in ``[-1, 1]`` maps onto them
            (:func:`target_bounds` gives the velocity task's).

    Returns:
        ``(controller, kp, kd)``: a :class:`~simbackend.controllers.JointPDConfig` controller
        (``actuation="pd"``, the description's gains) or a
        :class:`~simbackend.controllers.JointPositionConfig` one on the scene's position servos
        (``"servo"``), action ``(N, len(desc.driven_joints))``; ``kp`` and ``kd`` are ``(k,)``
        float32 tensors on the backend's device for the ``k`` policy joints (the servos' own gains
        for ``"servo"``).

    Raises:
        InvalidArgumentError: a driven joint without the one actuator its actuation needs
            (``robot.joints: joint 'x' has no position actuator ...``); a ``velocity_limit`` without
            ``saturation_effort`` on a motor with no ctrl range (``robot.velocity_limit: ...``).
    """
    from .resolved import joint_gains, joint_motor_limits

    joints = desc.driven_joints
    k = len(desc.joints)
    dev = backend.device
    if desc.actuation == "pd":
        kp, kd = joint_gains(desc, desc.name)
        sat, vmax = joint_motor_limits(desc)
        config = JointPDConfig(
            joints=joints, kp=kp, kd=kd, low=low, high=high, saturation_effort=sat, velocity_limit=vmax
        )
        try:
            controller = make_controller(backend, config)
        except InvalidArgumentError as e:  # the description's field, not the config's, is what to fix
            text = str(e)
            if not text.startswith(("JointPDConfig.saturation_effort", "JointPDConfig.velocity_limit")):
                raise
            raise InvalidArgumentError("robot." + text.removeprefix("JointPDConfig.")) from None
        return (
            controller,
            torch.tensor(kp[:k], dtype=torch.float32, device=dev),
            torch.tensor(kd[:k], dtype=torch.float32, device=dev),
        )
    gains = backend.get_model_actuator_gains()
    ids = backend.get_joint_ids(list(desc.joints)).cpu().numpy()
    acts = joint_actuators(backend, ids, desc.joints, "position", "robot.joints", "")
    controller = make_controller(backend, JointPositionConfig(joints=joints, low=low, high=high))
    return controller, gains.kp[acts].to(dev, torch.float32), gains.kv[acts].to(dev, torch.float32)


def joint_controller_gains(desc: RobotDescription, backend: Any) -> torch.Tensor:
    """``(k,)`` float32: the stiffness (N m/rad) that drives each policy joint: the description's ``kp``
    (``"pd"``) or the joint's position servo's (``"servo"``), as :func:`joint_controller` drives them."""
    from .resolved import joint_gains

    if desc.actuation == "pd":
        kp, _ = joint_gains(desc, desc.name)
        return torch.tensor(kp[: len(desc.joints)], dtype=torch.float32, device=backend.device)
    ids = backend.get_joint_ids(list(desc.joints)).cpu().numpy()
    acts = joint_actuators(backend, ids, desc.joints, "position", "robot.joints", "")
    return backend.get_model_actuator_gains().kp[acts].to(backend.device, torch.float32)


def joint_efforts(desc: RobotDescription, backend: Any) -> torch.Tensor:
    """``(k,)`` float32: the most torque (N m) each policy joint's actuator gives, ``inf`` where unknown.

    The description's ``effort_limit`` where it names the joint; else the joint's actuator, read through the
    contract: ``gear`` times its force range (``model_fields()["actuator_force_range"]``) where that is
    finite, or, for a motor, ``gear * gain`` times its ctrl range. A DC motor's ``saturation_effort`` (its
    stall torque, the most it gives at rest) lowers it where it is smaller.
    """
    from simbackend.errors import UnsupportedFeatureError

    from .description import pattern_values

    given = pattern_values(desc.effort_limit, desc.joints, "robot.effort_limit")
    info = backend.info
    try:
        force = np.abs(np.asarray(backend.model_fields()["actuator_force_range"], dtype=np.float64)).max(axis=1)
    except UnsupportedFeatureError:
        force = np.full(len(info.actuator_names), np.inf)
    ctrl = np.abs(np.asarray(info.actuator_ctrl_range, dtype=np.float64)).max(axis=1)
    ids = backend.get_joint_ids(list(desc.joints)).cpu().numpy()
    out = []
    for name, j in zip(desc.joints, ids):
        if name in given:
            out.append(float(given[name]))
            continue
        best = np.inf
        for a in np.flatnonzero(np.asarray(info.actuator_joint) == j):
            gear = abs(float(info.actuator_gear[a]))
            if np.isfinite(force[a]):
                best = min(best, gear * force[a])
            elif info.actuator_kind[a] == "motor" and np.isfinite(ctrl[a]):
                best = min(best, gear * abs(float(info.actuator_gain[a])) * ctrl[a])
        out.append(best)
    stall = pattern_values(desc.saturation_effort, desc.joints, "robot.saturation_effort")
    out = [min(e, stall.get(name, np.inf)) for name, e in zip(desc.joints, out)]
    return torch.tensor(out, dtype=torch.float32, device=backend.device)
