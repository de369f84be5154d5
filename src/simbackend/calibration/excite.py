"""Excitation: recordings worth fitting to, written on any engine as ``simbackend-log`` files.

Open-loop joint position targets around the robot's default pose, sent through the robot
description's own joint controller at a fixed control period:

* ``chirp``: every driven joint follows ``default + amplitude * sin(phase(t))``, a sweep from
  ``f0`` to ``f1`` Hz over the episode, each env and joint with its own random phase offset
  (seeded), so the envs of one run excite different joint combinations;
* ``steps``: every joint holds a target drawn uniformly in ``default +- amplitude`` for a
  random 0.2-0.6 s, then jumps to another (the transients identify damping and armature).

A trained policy's episodes are the third kind (:func:`excite_policy`): the checkpoint's
deterministic policy plays its task on any engine, without the task's randomization, and the
log holds the joint targets its controller sent. Every env starts each episode at the default
pose; episodes last ``episode_s`` seconds (a
legged robot that falls still excites contact; the next episode starts over). The log holds
every hinge/slide joint, the base (floating-base robots) and the targets sent, the form a
robot's own logger writes (:func:`~simbackend.calibration.write_log`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend import checks
from simbackend.errors import InvalidArgumentError
from simbackend.model_info import JOINT_BALL, JOINT_FREE

from .commands import TargetDriver
from .reference import write_log

__all__ = ["MAX_LOG_VALUES", "SIGNALS", "excite", "excite_policy"]

SIGNALS = ("chirp", "steps")
#: the most numbers one excitation logs (rows x envs x the values of a row): 400 MB in float64, about
#: 5.5 hours of a 12-joint floating-base robot at 50 Hz; more is refused before anything is allocated
MAX_LOG_VALUES = 50_000_000


def _check_log_size(seconds: float, control_dt: float, num_envs: int, width: int) -> int:
    """The rows per env of ``seconds`` at ``control_dt``; a log of more than :data:`MAX_LOG_VALUES` numbers
    (``width`` per row and env) refused in one line naming ``seconds``."""
    rows = max(2, int(round(seconds / control_dt)))
    values = rows * num_envs * width
    if values > MAX_LOG_VALUES:
        raise InvalidArgumentError(
            f"seconds: {seconds:g} s x {num_envs} envs at {control_dt:g} s per row is {rows * num_envs:,} rows of"
            f" {width} values ({values * 8 / 2**30:.3g} GiB), more than the {MAX_LOG_VALUES:,} values one"
            " excitation logs; log fewer seconds or envs, or several logs (--reference repeats)"
        )
    return rows


def _targets(
    signal: str,
    rng: np.random.Generator,
    default: np.ndarray,
    amplitude: float,
    rows: int,
    dt: float,
    f0: float,
    f1: float,
    n: int,
) -> np.ndarray:
    """``(rows, n, k)`` targets of one episode for ``n`` envs."""
    k = default.size
    t = np.arange(rows) * dt
    if signal == "chirp":
        T = max(rows * dt, dt)
        phase = 2 * math.pi * (f0 * t + (f1 - f0) * t**2 / (2 * T))
        offset = rng.uniform(0, 2 * math.pi, (n, k))
        return default + amplitude * np.sin(phase[:, None, None] + offset[None])
    out = np.empty((rows, n, k))
    for e in range(n):
        for j in range(k):
            r = 0
            while r < rows:
                hold = max(1, int(round(rng.uniform(0.2, 0.6) / dt)))
                out[r : r + hold, e, j] = default[j] + rng.uniform(-amplitude, amplitude)
                r += hold
    return out


def _log_rows(
    info: Any, q: np.ndarray, v: np.ndarray
) -> tuple[list[int], np.ndarray, np.ndarray, dict[str, np.ndarray] | None]:
    """The hinge/slide joints, their ``(T, J)`` positions and velocities, and the base arrays, from
    ``(T, nq)``/``(T, nv)`` rows (one free base at most)."""
    types = [int(t) for t in info.joint_type]
    hinge = [j for j, t in enumerate(types) if t not in (JOINT_FREE, JOINT_BALL)]
    free = [j for j, t in enumerate(types) if t == JOINT_FREE]
    if JOINT_BALL in types or len(free) > 1:
        raise InvalidArgumentError("robot: a log holds hinge/slide joints and at most one free base")
    qcols = np.array([int(info.joint_qposadr[j]) for j in hinge], np.int64)
    vcols = np.array([int(info.joint_dofadr[j]) for j in hinge], np.int64)
    base = None
    if free:
        qa, da = int(info.joint_qposadr[free[0]]), int(info.joint_dofadr[free[0]])
        base = {
            "base_pos": q[:, qa : qa + 3],
            "base_quat": q[:, qa + 3 : qa + 7],
            "base_lin_vel": v[:, da : da + 3],
            "base_ang_vel": v[:, da + 3 : da + 6],
        }
    return hinge, q[:, qcols], v[:, vcols], base


def excite_policy(
    checkpoint: Any,
    sim: str,
    out: Any,
    *,
    seconds: float = 10.0,
    num_envs: int = 4,
    seed: int = 0,
    device: Any = None,
    progress: Any = None,
) -> dict:
    """Play a checkpoint's deterministic policy on engine ``sim`` and log its episodes (``.npz``).

    The task is the checkpoint's, with its settings and without randomization (an engine's nominal
    model); the log holds every joint, the base, and the joint targets the task's controller sent
    (the robot's driven joints), so the policy's own gait is the reference. Episodes end as the
    task ends them (falls, time limits) and each starts a new segment.

    Args:
        checkpoint: a checkpoint path (``simbackend train``'s) of a task on a robot (the velocity task).
        sim, out, seconds, num_envs, seed, device, progress: as :func:`excite`'s (``seed`` seeds the task).
    """
    from simbackend.tasks import make_task
    from simbackend.training.checkpoint import load_checkpoint

    seconds = checks.real(seconds, "seconds", minimum=0, above=True)
    num_envs = checks.integer(num_envs, "num_envs", minimum=1)
    ckpt = load_checkpoint(checkpoint)
    config = {**ckpt.task_config, "randomization": None}
    policy = ckpt.policy()
    task = make_task(ckpt.task, sim, num_envs, config=config, seed=seed, device=device)
    try:
        controller = getattr(task, "controller", None)
        robot = getattr(task, "robot", None)
        if controller is None or robot is None or not hasattr(controller, "targets"):
            raise InvalidArgumentError(
                f"checkpoint: task {ckpt.task!r} drives no robot's joint targets; excite_policy logs robot tasks"
            )
        b = task.backend
        info = b.info
        width = info.nq + info.nv + controller.targets.shape[1] + 1
        total = _check_log_size(seconds, task.control_dt, num_envs, width)
        q = np.empty((total, num_envs, info.nq))
        v = np.empty((total, num_envs, info.nv))
        targets = np.zeros((total, num_envs, controller.targets.shape[1]))
        episode = np.zeros((total, num_envs), np.int64)
        count = np.arange(num_envs, dtype=np.int64) * total
        obs = task.reset()
        for r in range(total):
            q[r] = b.get_qpos().detach().cpu().numpy()
            v[r] = b.get_qvel().detach().cpu().numpy()
            episode[r] = count
            if r + 1 == total:
                break
            step = task.step(policy(task.flatten(obs)))
            targets[r] = controller.targets.detach().cpu().numpy()
            done = (step.terminated | step.truncated).cpu().numpy()
            obs = task.reset(torch.as_tensor(done, device=task.device)) if done.any() else step.obs
            count = count + done
            if progress is not None:
                progress((r + 1) / total)
        flat_q = q.transpose(1, 0, 2).reshape(-1, info.nq)
        flat_v = v.transpose(1, 0, 2).reshape(-1, info.nv)
        hinge, jpos, jvel, base = _log_rows(info, flat_q, flat_v)
        write_log(
            out,
            control_dt=task.control_dt,
            joint_names=[info.joint_names[j] for j in hinge],
            joint_pos=jpos,
            joint_vel=jvel,
            target_names=robot.description.driven_joints,
            target_pos=targets.transpose(1, 0, 2).reshape(-1, targets.shape[2]),
            base=base,
            episode=episode.T.reshape(-1),
            robot=str(config.get("robot") or robot.description.name),
        )
        return {"rows": total * num_envs, "episodes": int(len(np.unique(episode))), "envs": num_envs,
                "sim": b.name, "signal": "policy"}  # fmt: skip
    finally:
        task.close()


def excite(
    robot: Any,
    sim: str,
    out: Any,
    *,
    signal: str = "chirp",
    seconds: float = 10.0,
    episode_s: float = 5.0,
    num_envs: int = 4,
    amplitude: float = 0.3,
    f0: float = 0.3,
    f1: float = 3.0,
    control_dt: float = 0.02,
    seed: int = 0,
    plan: Any = None,
    device: Any = None,
    progress: Any = None,
) -> dict:
    """Run an excitation of ``robot`` on engine ``sim`` and write its log to ``out`` (``.npz``).

    Args:
        robot: a registered robot, a :class:`~simbackend.robots.RobotDescription` or a description file.
        sim: the engine.
        out: the log file to write.
        signal: ``"chirp"`` or ``"steps"`` (module docstring).
        seconds: logged seconds per env (whole episodes of ``episode_s``, the last one cut short).
        num_envs: envs run side by side (each one an independent excitation).
        amplitude: rad (or m) around the default pose.
        f0, f1: the chirp's start and end frequencies, Hz.
        control_dt: seconds between targets (a whole number of the model's physics steps).
        seed: seeds the phases and steps (and the backend).
        plan: a :class:`~simbackend.randomization.RandomizationPlan` whose ``init`` terms set the engine's
            parameters first and whose ``reset`` terms are drawn at every episode start (a reference with
            known, or randomized, parameters); ``interval`` terms are refused.
        progress: called with the fraction done after each episode.

    Returns:
        A summary: rows, episodes, envs, the engine and the signal.
    """
    from simbackend.robots import make_robot_backend

    if signal not in SIGNALS:
        raise InvalidArgumentError(f"signal: expected one of {list(SIGNALS)}, got {signal!r}")
    seconds, episode_s, amplitude, control_dt, f1 = (
        checks.real(value, name, minimum=0, above=True)
        for name, value in (
            ("seconds", seconds),
            ("episode_s", episode_s),
            ("amplitude", amplitude),
            ("control_dt", control_dt),
            ("f1", f1),
        )
    )
    f0 = checks.real(f0, "f0", minimum=0, maximum=f1)
    num_envs = checks.integer(num_envs, "num_envs", minimum=1)
    if Path(out).suffix.lower() != ".npz":
        raise InvalidArgumentError(f"out: a log is an .npz file, got {str(out)!r}")
    if plan is not None and plan.phase_terms("interval"):
        raise InvalidArgumentError("plan: excitation applies init and reset terms; remove the interval terms")
    backend = make_robot_backend(robot, sim, num_envs, device=device, seed=seed)
    with backend:
        if plan is not None:
            from simbackend.robots import expand_plan, get_robot

            plan = expand_plan(plan, get_robot(robot), backend.info)  # a plan's `feet`: this robot's
            backend.apply_init_randomization(plan)
        info = backend.info
        ratio = control_dt / backend.physics_dt
        nsteps = int(round(ratio))
        if nsteps < 1 or abs(ratio - nsteps) > 1e-6 * max(1.0, ratio):
            raise InvalidArgumentError(
                f"control_dt: {control_dt:g} s is not a whole number of physics steps ({backend.physics_dt:g} s)"
            )
        driver = TargetDriver(robot, backend)
        total = _check_log_size(seconds, control_dt, num_envs, info.nq + info.nv + len(driver.joint_names) + 1)
        rng = np.random.default_rng(seed)
        per_episode = max(2, min(total, int(round(episode_s / control_dt))))
        logs: dict[str, list] = {k: [] for k in ("q", "v", "target", "episode")}
        episode, done = 0, 0
        while done < total:
            rows = min(per_episode, total - done)
            if rows < 2:
                break
            targets = _targets(signal, rng, driver.default_targets, amplitude, rows, control_dt, f0, f1, num_envs)
            backend.set_state(None, driver.resolved.default_qpos.expand(num_envs, -1), None, randomization=plan)
            driver.reset()
            q = np.empty((rows, num_envs, info.nq))
            v = np.empty((rows, num_envs, info.nv))
            for r in range(rows):
                q[r] = backend.get_qpos().detach().cpu().numpy()
                v[r] = backend.get_qvel().detach().cpu().numpy()
                if r + 1 < rows:
                    driver.step(targets[r], nsteps)
            logs["q"].append(q)
            logs["v"].append(v)
            logs["target"].append(targets)
            logs["episode"].append(np.full((rows, num_envs), episode))
            episode += 1
            done += rows
            if progress is not None:
                progress(done / total)
        # one env's episodes after another's: rows (env, episode, row) flattened, ids distinct per env
        q = np.concatenate(logs["q"], 0).transpose(1, 0, 2).reshape(-1, info.nq)
        v = np.concatenate(logs["v"], 0).transpose(1, 0, 2).reshape(-1, info.nv)
        tg = np.concatenate(logs["target"], 0).transpose(1, 0, 2).reshape(-1, len(driver.joint_names))
        ep = (np.concatenate(logs["episode"], 0).T + episode * np.arange(num_envs)[:, None]).reshape(-1)
        hinge, jpos, jvel, base = _log_rows(info, q, v)
        name = robot if isinstance(robot, str) else driver.description.name
        write_log(
            out,
            control_dt=control_dt,
            joint_names=[info.joint_names[j] for j in hinge],
            joint_pos=jpos,
            joint_vel=jvel,
            target_names=driver.joint_names,
            target_pos=tg,
            base=base,
            episode=ep,
            robot=name,
        )
        return {
            "rows": int(q.shape[0]),
            "episodes": int(episode * num_envs),
            "envs": num_envs,
            "sim": backend.name,
            "signal": signal,
        }
