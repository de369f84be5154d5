"""A description checked against a backend (:func:`resolve`), a backend built on a description's scene
(:func:`make_robot_backend`) and a PD description's gains and motor limits (:func:`joint_gains`,
:func:`joint_motor_limits`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError, closest_names_hint

from .description import RobotDescription, pattern_values
from .registry import get_robot
from .scene import robot_scene

__all__ = ["ResolvedRobot", "check_robot", "joint_gains", "joint_motor_limits", "make_robot_backend", "resolve"]


@dataclass(frozen=True)
class ResolvedRobot:
    """A description checked against a backend: the ids and columns a task reads (on the backend's device).

    Attributes:
        description: the description.
        qpos_cols, dof_cols: ``(k,)`` columns of ``get_qpos()`` and ``get_dof_pos()`` of the policy's joints.
        default_joints: ``(k,)`` float32 default angles of the policy's joints.
        joint_low, joint_high: ``(k,)`` float32 joint ranges (``-inf``/``inf`` where unlimited).
        held_default: ``(h,)`` default angles of the held joints.
        base_body: the base body id. feet: ``(F,)`` foot body ids. termination: ``(T,)`` body ids
            (host arrays: the getters take them without a read from the device).
        imu_site: ``(1,)`` the IMU site id, or ``None``.
        default_qpos: ``(nq,)`` float32 default state (base level on the floor at the origin).
    """

    description: RobotDescription
    qpos_cols: torch.Tensor
    dof_cols: torch.Tensor
    default_joints: torch.Tensor
    joint_low: torch.Tensor
    joint_high: torch.Tensor
    held_default: torch.Tensor
    base_body: int
    feet: np.ndarray
    termination: np.ndarray
    imu_site: np.ndarray | None
    default_qpos: torch.Tensor


def make_robot_backend(
    robot: Any, sim: str, num_envs: int, *, device: Any = None, seed: int = 0, **options: Any
) -> Any:
    """Backend ``sim`` with ``num_envs`` envs on the robot's scene, checked against the description.

    The path the velocity task and ``simbackend robots`` take: the scene file
    (:func:`robot_scene`), the robot's engine blocks (``engine_options``; a block of the
    caller's for the same engine replaces the robot's, as in ``make_task``), then
    :func:`resolve`, so a description that does not fit its model fails here, in one line
    naming the field, and the backend is closed.

    Args:
        robot: a :class:`RobotDescription`, a registered name or a JSON description file.
        sim, num_envs, device, seed, options: as :func:`simbackend.make_backend`'s
            (``contact_sensing=True`` for the feet's contact forces).
    """
    from simbackend.options import check_options
    from simbackend.registry import make_backend

    desc = get_robot(robot)
    own = sim.lower() if isinstance(sim, str) else sim
    if isinstance(own, str) and own in desc.engine_options:
        try:  # the robot's block for this engine: its keys and values are the engine's to judge
            check_options(own, {own: desc.engine_options[own]})
        except SimBackendError as e:
            cls = ArgumentTypeError if isinstance(e, TypeError) else InvalidArgumentError
            raise cls(f"robot.engine_options.{e}") from None
    scene = robot_scene(desc)
    backend = make_backend(sim, scene.path, num_envs, device=device, seed=seed, **{**desc.engine_options, **options})
    try:
        resolve(desc, backend, scene.default_qpos)
    except BaseException:
        backend.close()
        raise
    return backend


def check_robot(robot: Any) -> RobotDescription:
    """The description checked against its model before any engine of the caller's is built: its scene
    composed (:func:`robot_scene`) and resolved (:func:`resolve`) on the reference engine, MuJoCo, whose
    compiler composes every scene. What this refuses is the description's fault on every engine: one line
    naming the field, an :class:`~simbackend.errors.InvalidArgumentError` or
    :class:`~simbackend.errors.ArgumentTypeError` (a model file that cannot be read or compiled too:
    :class:`~simbackend.models.scene.SceneCompileError`). What one engine alone cannot build (SAPIEN's 32
    ignore bits) is that engine's to refuse when it builds."""
    desc = get_robot(robot)
    with make_robot_backend(desc, "mujoco", 1):
        pass
    return desc


def resolve(desc: Any, backend: Any, default_qpos: Any = None) -> ResolvedRobot:
    """Check ``desc`` against ``backend`` (built on its scene) and give the task's ids and columns.

    ``desc`` is a :class:`RobotDescription`, a registered name or a JSON file; ``default_qpos``
    the default state, by default its scene's (:func:`robot_scene`).

    Raises one line naming the field: a name the model lacks (with the closest names), a default
    angle outside its joint's range, a base body without a free joint.
    """
    desc = get_robot(desc)
    if default_qpos is None:
        default_qpos = robot_scene(desc).default_qpos
    info = backend.info
    dev = backend.device
    bodies, geoms = list(backend.body_names), list(info.geom_names)

    def body_id(name: str, field: str, geoms_too: bool = False) -> int:
        if name in bodies:
            return bodies.index(name)
        if geoms_too and name in geoms:
            return int(info.geom_body[geoms.index(name)])
        known = bodies + (geoms if geoms_too else [])
        what = "body or geom" if geoms_too else "body"
        raise InvalidArgumentError(f"robot.{field}: the model has no {what} {name!r}{closest_names_hint(name, known)}")

    base = body_id(desc.base_body, "base_body")
    feet = [body_id(n, "feet", geoms_too=True) for n in desc.feet]
    term = [body_id(n, "termination_bodies") for n in desc.termination_bodies]
    imu = None
    if desc.imu_site is not None:
        sites = list(backend.site_names)
        if desc.imu_site not in sites:
            raise InvalidArgumentError(
                f"robot.imu_site: the model has no site {desc.imu_site!r}{closest_names_hint(desc.imu_site, sites)}"
            )
        imu = np.array([sites.index(desc.imu_site)], dtype=np.int64)
    joints = list(backend.joint_names)
    for n in desc.driven_joints:
        if n not in joints:
            raise InvalidArgumentError(f"robot.joints: the model has no joint {n!r}{closest_names_hint(n, joints)}")
    qpos = torch.as_tensor(np.asarray(default_qpos, np.float64), dtype=torch.float32, device=dev)
    if qpos.shape != (backend.nq,):
        raise InvalidArgumentError(
            f"robot {desc.name!r}: its default state has {qpos.numel()} values, the model nq={backend.nq}"
        )
    jid = [joints.index(n) for n in desc.joints]
    rng = np.asarray(info.joint_range, np.float64)[jid]
    qcols = backend.get_joint_qpos_indices(list(desc.joints))
    default = qpos[qcols]
    for i, n in enumerate(desc.joints):
        lo, hi = rng[i]
        v = float(default[i])
        if not (lo - 1e-6 <= v <= hi + 1e-6):
            raise InvalidArgumentError(
                f"robot.default_pose: joint {n!r} at {v:g} is outside its range [{lo:g}, {hi:g}]"
            )
    held = list(desc.held_joints)
    held_default = qpos[backend.get_joint_qpos_indices(held)] if held else torch.zeros(0, device=dev)
    return ResolvedRobot(
        description=desc,
        qpos_cols=qcols,
        dof_cols=backend.get_joint_dof_pos_indices(list(desc.joints)),
        default_joints=default,
        joint_low=torch.as_tensor(rng[:, 0], dtype=torch.float32, device=dev),
        joint_high=torch.as_tensor(rng[:, 1], dtype=torch.float32, device=dev),
        held_default=held_default,
        base_body=base,
        feet=np.asarray(feet, dtype=np.int64),
        termination=np.asarray(term, dtype=np.int64),
        imu_site=imu,
        default_qpos=qpos,
    )


def joint_gains(desc: RobotDescription, name: str) -> tuple[list[float], list[float]]:
    """``(kp, kd)`` per driven joint for ``actuation='pd'`` (patterns resolved)."""
    names = desc.driven_joints
    kp = pattern_values(desc.kp, names, "robot.kp")
    kd = pattern_values(desc.kd, names, "robot.kd")
    missing = [n for n in names if n not in kp or n not in kd]
    if missing:
        raise InvalidArgumentError(f"robot.kp, robot.kd: no gain for joints {missing} ({name})")
    return [kp[n] for n in names], [kd[n] for n in names]


def joint_motor_limits(desc: RobotDescription) -> tuple[list[float] | None, list[float] | None]:
    """``(saturation_effort, velocity_limit)`` per driven joint for ``actuation='pd'`` (patterns resolved,
    ``inf`` for a joint no pattern names: no limit there); each ``None`` where the description gives none."""
    names = desc.driven_joints
    out: list[list[float] | None] = []
    for name in ("saturation_effort", "velocity_limit"):
        given = getattr(desc, name)
        values = pattern_values(given, names, f"robot.{name}")
        out.append(None if given is None else [values.get(n, float("inf")) for n in names])
    return out[0], out[1]
