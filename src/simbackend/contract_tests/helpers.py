"""Shared helpers of the conformance suite. Engine-neutral: talks only to the contract."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend.math import quat_angle_between as quat_distance  # noqa: F401 (re-exported for the suite)
from simbackend.math import quat_mul
from simbackend.math import quat_to_matrix as quat_to_mat  # noqa: F401 (re-exported for the suite)
from simbackend.model_info import JOINT_BALL, JOINT_FREE
from simbackend.sampling import random_configurations, random_unit_quat  # noqa: F401 (re-exported)

#: a small chain with a ball joint (contract models are all hinge/slide/free otherwise)
BALL_MJCF = """
<mujoco model="ball_chain">
  <compiler angle="radian" inertiafromgeom="false"/>
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="ball" type="ball"/>
      <inertial pos="0.02 0.01 -0.2" mass="1" diaginertia="0.01 0.02 0.03"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" contype="0" conaffinity="0"/>
      <body name="lower" pos="0.05 0 -0.3">
        <joint name="hinge" type="hinge" axis="1 0 0"/>
        <inertial pos="0 0.05 -0.1" mass="0.5" diaginertia="0.01 0.01 0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.02" contype="0" conaffinity="0"/>
        <site name="tip" pos="0.02 0.1 -0.25" quat="0.9 0.1 0.3 0.2"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

#: float32 outputs: absolute tolerance for positions of O(1 m) compared with float64 truth
POS_ATOL = 2e-6
QUAT_ATOL = 2e-6


def to_np(x: Any) -> np.ndarray:
    """float64 numpy copy of a tensor (any device) or array."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def assert_rows_equal(a: Any, rows_a: list[int], sim_a: Any, b: Any, rows_b: list[int], sim_b: Any) -> None:
    """``a[rows_a]`` equals ``b[rows_b]`` bit for bit where each pair of rows is simulated by the same engine;
    where a mixed backend put them on two engines, to 1e-4 relative: each engine stores the value drawn or
    moved in its own way (MuJoCo in float64, PhysX in float32, a plugin engine its inertias as
    principal moments, 1.3e-5 off), so the values agree but their rounding is the engine's. A wrong draw parts by far more."""
    x, y = to_np(a)[rows_a], to_np(b)[rows_b]
    for k, (i, j) in enumerate(zip(rows_a, rows_b)):
        if sim_a.env_engines[i] == sim_b.env_engines[j]:
            np.testing.assert_array_equal(x[k], y[k], err_msg=f"rows {i} and {j}")
        else:
            np.testing.assert_allclose(x[k], y[k], rtol=1e-4, atol=0, err_msg=f"rows {i} and {j} (two engines)")


def gymnasium_assets() -> Path | None:
    """Folder of gymnasium's MJCF models, found without importing gymnasium (or None)."""
    spec = importlib.util.find_spec("gymnasium")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "envs" / "mujoco" / "assets"
    return path if path.is_dir() else None


def parity_models() -> dict[str, str]:
    """label -> model source of the parity suite: the built-in names, then gymnasium's MJCF files as
    ``gymnasium/<stem>`` (when gymnasium is installed)."""
    from simbackend.models import builtin_models

    cases = {name: name for name in builtin_models()}
    gym = gymnasium_assets()
    if gym is not None:
        cases.update({f"gymnasium/{p.stem}": str(p) for p in sorted(gym.glob("*.xml"))})
    return cases


def random_qpos(sim: Any, rng: np.random.Generator, n: int | None = None, *, margin: float = 0.05) -> np.ndarray:
    """``(n, nq)`` random configurations of ``sim``'s model (:func:`simbackend.sampling.random_configurations`):
    dofs inside their ranges by ``margin``, unlimited dofs in [-pi, pi], random free/ball
    orientations, free joints within 0.1 m of the default position."""
    return random_configurations(
        sim.info, sim.num_envs if n is None else n, rng, margin=margin, free_offset=0.1, unlimited_slide=math.pi
    )


def angular_velocity_from_quats(q0: np.ndarray, q1: np.ndarray, dt: float) -> np.ndarray:
    """World-frame angular velocity taking q0 to q1 in dt (central or forward difference)."""
    dq = quat_mul(q1, q0 * np.array([1, -1, -1, -1]))  # q1 * q0^-1, world frame
    dq = np.where(dq[..., :1] < 0, -dq, dq)
    s = np.linalg.norm(dq[..., 1:], axis=-1, keepdims=True)
    angle = 2 * np.arctan2(s, dq[..., :1])
    axis = np.divide(dq[..., 1:], s, out=np.zeros_like(dq[..., 1:]), where=s > 0)
    return axis * angle / dt


def integrate_qpos(sim: Any, qpos: np.ndarray, qvel: np.ndarray, h: float) -> np.ndarray:
    """``qpos`` advanced by ``qvel * h`` in the contract's conventions (free: linear world, angular local)."""
    info = sim.info
    out = qpos.copy()
    for j, t in enumerate(info.joint_type):
        qa, va = int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
        if t == JOINT_FREE:
            out[..., qa : qa + 3] += h * qvel[..., va : va + 3]
            out[..., qa + 3 : qa + 7] = _quat_integrate_local(qpos[..., qa + 3 : qa + 7], qvel[..., va + 3 : va + 6], h)
        elif t == JOINT_BALL:
            out[..., qa : qa + 4] = _quat_integrate_local(qpos[..., qa : qa + 4], qvel[..., va : va + 3], h)
        else:
            out[..., qa] += h * qvel[..., va]
    return out


def _quat_integrate_local(q: np.ndarray, w_local: np.ndarray, h: float) -> np.ndarray:
    angle = np.linalg.norm(w_local, axis=-1, keepdims=True) * h
    axis = np.divide(
        w_local,
        np.linalg.norm(w_local, axis=-1, keepdims=True),
        out=np.zeros_like(w_local),
        where=np.linalg.norm(w_local, axis=-1, keepdims=True) > 0,
    )
    dq = np.concatenate((np.cos(angle / 2), axis * np.sin(angle / 2)), axis=-1)
    out = quat_mul(q, dq)  # local angular velocity: right-multiply
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def snapshot(sim: Any) -> dict[str, torch.Tensor]:
    """Copies of every env's qpos, qvel, body poses and site positions, to check that a call changed nothing."""
    return {
        "qpos": sim.get_qpos().clone(),
        "qvel": sim.get_qvel().clone(),
        "body_pos_w": sim.get_body_pos_w().clone(),
        "body_quat_w": sim.get_body_quat_w().clone(),
        "site_pos_w": sim.get_site_pos_w().clone(),
    }


#: a free box on a low-friction floor, a servoed slider, a pendulum, a motor-driven slider, a free ball in the air
DR_MJCF = """
<mujoco model="dr_bench">
  <compiler angle="radian"/>
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <geom name="floor" type="plane" size="20 20 0.1" friction="0.1 0.005 0.0001"/>
    <body name="box" pos="0 0 0.1">
      <freejoint name="box_free"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.00667 0.00667 0.00667"/>
      <geom name="box_geom" type="box" size="0.1 0.1 0.1" friction="0.3 0.005 0.0001"/>
    </body>
    <body name="slider" pos="0 5 1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
      <geom name="slider_geom" type="sphere" size="0.05" contype="0" conaffinity="0"/>
    </body>
    <body name="pendulum" pos="0 -5 2">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.05"/>
      <inertial pos="0 0 -0.5" mass="1" diaginertia="0.001 0.001 0.001"/>
      <geom name="rod" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.02" contype="0" conaffinity="0"/>
    </body>
    <body name="cart" pos="5 0 1">
      <joint name="rail" type="slide" axis="1 0 0"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
      <geom name="cart_geom" type="sphere" size="0.05" contype="0" conaffinity="0"/>
    </body>
    <body name="ball" pos="-5 0 5">
      <freejoint name="ball_free"/>
      <inertial pos="0 0 0" mass="0.5" diaginertia="0.002 0.002 0.002"/>
      <geom name="ball_geom" type="sphere" size="0.1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <position name="servo" joint="slide" kp="20" kv="9"/>
    <motor name="push" joint="rail" gear="1"/>
  </actuator>
</mujoco>
"""


def env_params(sim: Any) -> dict[str, np.ndarray]:
    """Every per-env model parameter and the per-env default pose, float64 numpy (domain randomization)."""
    gains = sim.get_env_actuator_gains()
    return {
        "mass": to_np(sim.get_env_body_mass()),
        "com": to_np(sim.get_env_body_com()),
        "inertia": to_np(sim.get_env_body_inertia()),
        "friction": to_np(sim.get_env_geom_friction()),
        "kp": to_np(gains.kp),
        "kv": to_np(gains.kv),
        "damping": to_np(sim.get_env_joint_damping()),
        "armature": to_np(sim.get_env_joint_armature()),
        "frictionloss": to_np(sim.get_env_joint_frictionloss()),
        "gravity": to_np(sim.get_env_gravity()),
        "default_qpos": to_np(sim.get_env_default_qpos()),
    }


class CpuStopwatch:
    """Time a block in this process's own work: ``elapsed`` is the smaller of the wall-clock time and the
    process's CPU time (all its threads) since ``start()``.

    A latency bound on wall-clock time fails on a shared machine whose other jobs take the cores (a load
    average of 5 on 2 cores stretches wall time 2-3x); the process's CPU time is not stretched by them.
    Taking the smaller of the two keeps the bound honest where the engine's worker threads spin or run in
    parallel (CPU time above wall time). It measures work, not waiting: a bound on a timeout (time spent
    blocked) must stay on wall-clock time.
    """

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        import time

        self._wall, self._cpu = time.perf_counter(), time.process_time()

    @property
    def elapsed(self) -> float:
        import time

        return min(time.perf_counter() - self._wall, time.process_time() - self._cpu)
