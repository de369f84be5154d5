#!/usr/bin/env python3
"""Run an exported velocity policy in MuJoCo with nothing but ``mujoco``, ``onnxruntime`` and ``numpy``.

This is the reference control loop a team ports to its robot's runtime: it does not import simbackend.
Everything it knows about the policy comes from the policy's metadata (the JSON beside the ONNX file, or
the same JSON inside it); docs/deploy.md describes every field.

Each control period (``control.period``) it

1. builds the observation from raw MuJoCo data, as a robot's controller would from its sensors: the IMU
   frame's orientation (``base_lin_vel``, ``base_ang_vel``, ``projected_gravity``), the joint encoders
   (``joint_pos`` less the default pose, ``joint_vel``, in the policy's joint order), the velocity command
   and the previous action, each term at its slice and scaled by its ``scale``;
2. runs the ONNX policy (its observation normaliser is inside), clips the action to ``action.clip`` and
   turns it into joint targets ``offset + scale * action``;
3. drives the joints ``control.decimation`` physics steps: position servos configured with the metadata's
   gains and effort limits (``actuation.kind = "servo"``), or a PD law at the physics rate on torque motors
   (``"pd"``, with the DC motor's torque-speed limits where given).

It also judges each episode as the training task did (``episode``): a fall (base below
``min_base_height``, tilted beyond ``max_tilt``, or a ``termination_bodies`` body touching something) ends
it; reaching ``length`` steps with a mean planar velocity error of at most ``success_error`` m/s is a
success.

Commands come from a scripted sequence (``--commands FILE.json``: ``[[t, vx, vy, wz], ...]``, each from
time ``t`` in seconds), a constant (``--command vx vy wz``) or, where a display exists, the keyboard
(``--viewer``: arrow keys change the forward velocity and the yaw rate, ``,`` and ``.`` the lateral
velocity, space stops).

    python run_policy.py policy.onnx --commands commands.json --episodes 4
    python run_policy.py policy.onnx --viewer            # on a desktop: the keyboard drives the robot

Height scans (a policy trained on rough terrain) need the robot's own elevation map: this loop refuses
such a policy, naming the term.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import numbers
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import onnxruntime as ort

#: the metadata format this loop reads, and its key inside the ONNX file
FORMAT = "simbackend.policy/1"
METADATA_KEY = "simbackend.policy"
#: the observation terms this loop builds
TERMS = ("base_lin_vel", "base_ang_vel", "projected_gravity", "command", "joint_pos", "joint_vel", "last_action")


class MetadataError(ValueError):
    """The policy's metadata is missing or does not fit the scene; the message names the field."""


class UsageError(ValueError):
    """A file or flag given to the loop that it cannot use; the message names it."""


def _session(path: str | os.PathLike, opts: Any = None) -> Any:
    """onnxruntime's session on the policy file (CPU); a missing or unreadable file is a :class:`UsageError`."""
    if not Path(path).is_file():
        raise UsageError(f"POLICY: no such file {str(path)!r}")
    try:
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's errors are several lines
        raise UsageError(f"POLICY: {str(path)!r} is not an ONNX model onnxruntime runs ({type(e).__name__})") from None


def _json(text: str, what: str, error: type[ValueError] = MetadataError) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:  # json.JSONDecodeError, or bytes that are not text
        raise error(f"{what} is not JSON ({getattr(e, 'msg', e)} at line {getattr(e, 'lineno', '?')})") from None


def load_metadata(policy_path: str | os.PathLike, json_path: str | os.PathLike | None = None) -> dict:
    """The policy's metadata: ``json_path``, else the JSON beside the ONNX file, else the copy inside it."""
    policy_path = Path(policy_path)
    candidates = [Path(json_path)] if json_path is not None else [policy_path.with_suffix(".json")]
    for path in candidates:
        if path.is_file():
            meta = _json(path.read_text(errors="replace"), f"metadata: {str(path)!r}")
            break
    else:
        if json_path is not None:
            raise MetadataError(f"metadata: no such file {str(json_path)!r}")
        session = _session(policy_path)
        text = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        if text is None:
            raise MetadataError(f"metadata: {str(policy_path)!r} has no {METADATA_KEY!r} entry and no JSON beside it")
        meta = _json(text, f"metadata: the {METADATA_KEY!r} entry of {str(policy_path)!r}")
    if not isinstance(meta, dict):
        raise MetadataError(f"metadata: expected a JSON object, got {type(meta).__name__}")
    if meta.get("format") != FORMAT:
        raise MetadataError(f"format: expected {FORMAT!r}, got {meta.get('format')!r}")
    if meta.get("kind") != "velocity":
        raise MetadataError(f"kind: this loop runs velocity policies, got {meta.get('kind')!r}")
    if meta.get("quaternion", "wxyz") != "wxyz":
        raise MetadataError(f"quaternion: this loop reads MuJoCo's wxyz quaternions, got {meta.get('quaternion')!r}")
    return meta


class OnnxPolicy:
    """The exported network: ``(D,)`` float32 observation in, ``(k,)`` action out (before clipping)."""

    def __init__(self, path: str | os.PathLike, meta: dict):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1  # one observation at a time: threads cost more than they give
        self.session = _session(path, opts)
        self.input = meta["network"]["input"]
        names = [node.name for node in self.session.get_inputs()]
        if names != [self.input]:
            raise MetadataError(f"network.input: {self.input!r}; the ONNX graph takes {names} (one input expected)")
        for key, node in (("input", self.session.get_inputs()[0]), ("output", self.session.get_outputs()[0])):
            if node.type != "tensor(float)":
                raise MetadataError(f"network.{key}: the ONNX graph's {node.name!r} is {node.type}, not float32")
            if len(node.shape) != 2 or node.shape[1] != meta["network"][f"{key}_size"]:
                raise MetadataError(
                    f"network.{key}_size: {meta['network'][f'{key}_size']}, the ONNX graph's {node.name!r} has shape"
                    f" {node.shape}, expected (batch, size)"
                )

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: obs[None].astype(np.float32)})[0][0]


def finite_list(values: Any, key: str, n: int | None = None, *, none: float | None = None) -> np.ndarray:
    """Metadata field ``key`` as ``n`` finite numbers (``None`` read as ``none`` where that is given)."""
    if not isinstance(values, (list, tuple)) or (n is not None and len(values) != n):
        got = f"{len(values)} values" if isinstance(values, (list, tuple)) else repr(values)[:40]
        raise MetadataError(f"{key}: expected {n if n is not None else 'a list of'} numbers, got {got}")
    out = []
    for v in values:
        if v is None and none is not None:
            out.append(none)
        elif isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
        else:
            raise MetadataError(f"{key}: expected finite numbers, got {v!r}")
    return np.array(out, dtype=np.float64)


def finite_number(value: Any, key: str, *, positive: bool = False) -> float:
    """Metadata field ``key`` as one finite number (``> 0`` where ``positive``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise MetadataError(f"{key}: expected a finite number, got {value!r}")
    if positive and value <= 0:
        raise MetadataError(f"{key}: expected a positive number, got {value!r}")
    return float(value)


def scene_sha256(folder: str | os.PathLike) -> str:
    """``robot.scene_sha256`` of a scene folder: the sha256 of, for each file in the order of its relative path
    (``/``-separated, UTF-8, sorted bytewise), that path, a zero byte and the 32 bytes of the file's sha256."""
    root = Path(folder)
    h = hashlib.sha256()
    for name, f in sorted((p.relative_to(root).as_posix().encode(), p) for p in root.rglob("*") if p.is_file()):
        h.update(name + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def check_layout(meta: dict) -> None:
    """The shape of what this loop reads: each section an object, each list of names strings, each size a positive
    integer, each observation term an object (what is wrong is a :class:`MetadataError` naming the field)."""

    def short(value: Any) -> str:
        return repr(value)[:40]

    for key in ("control", "action", "base", "joints", "actuation", "network", "episode"):
        if not isinstance(meta.get(key), dict):
            raise MetadataError(f"{key}: expected an object, got {short(meta.get(key))}")
    held = meta["joints"].get("held", {"names": [], "targets": []})
    if not isinstance(held, dict):
        raise MetadataError(f"joints.held: expected an object, got {short(held)}")
    for key, value in (
        ("joints.names", meta["joints"].get("names")),
        ("joints.held.names", held.get("names")),
        ("actuation.actuators", meta["actuation"].get("actuators")),
        ("episode.termination_bodies", meta["episode"].get("termination_bodies")),
    ):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MetadataError(f"{key}: expected a list of names, got {short(value)}")
    for key, value in (
        ("base.body", meta["base"].get("body")),
        ("network.input", meta["network"].get("input")),
        ("actuation.kind", meta["actuation"].get("kind")),
    ):
        if not isinstance(value, str):
            raise MetadataError(f"{key}: expected a name, got {short(value)}")
    if not isinstance(meta["base"].get("imu_site"), (str, type(None))):
        raise MetadataError(f"base.imu_site: expected a site name or null, got {short(meta['base']['imu_site'])}")
    sizes = [("action.size", meta["action"].get("size"))]
    sizes += [(f"network.{k}", meta["network"].get(k)) for k in ("input_size", "output_size")]
    terms = meta.get("observations")
    if not isinstance(terms, list) or not terms or not all(isinstance(t, dict) for t in terms):
        raise MetadataError(f"observations: expected a list of terms (objects), got {short(terms)}")
    for i, term in enumerate(terms):
        if not isinstance(term.get("name"), str):
            raise MetadataError(f"observations[{i}].name: expected a name, got {short(term.get('name'))}")
        sizes += [(f"observations[{i}].size", term.get("size")), (f"observations[{i}].start", term.get("start", 0) + 1)]
    for key, value in sizes:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MetadataError(f"{key}: expected a positive integer, got {short(value)}")


def _quat_to_mat(q: np.ndarray) -> np.ndarray:
    m = np.zeros(9)
    mujoco.mju_quat2Mat(m, q / np.linalg.norm(q))
    return m.reshape(3, 3)


@dataclass
class Episode:
    """What the judge saw: steps played, whether and why it ended, the velocity error so far."""

    steps: int = 0
    fell: bool = False
    reason: str = ""
    error_sum: float = 0.0
    done: bool = False
    success: bool = False
    log: dict = field(default_factory=lambda: {"obs": [], "action": [], "command": [], "qpos": [], "qvel": []})


class VelocityController:
    """The policy's boundary on a MuJoCo model: observations in, actuator commands out (the part to port).

    Args:
        model: the robot's scene (``robot.scene`` of the metadata); its actuators are configured from the
            metadata's ``actuation`` (gains and effort limits), as a robot's motor drivers would be.
        meta: the policy's metadata.
    """

    def __init__(self, model: mujoco.MjModel, meta: dict):
        self.model, self.meta = model, meta
        check_layout(meta)
        joints, act, action = meta["joints"], meta["actuation"], meta["action"]
        names = list(joints["names"])
        k = len(names)
        if len(act["actuators"]) != k:
            raise MetadataError(f"actuation.actuators: {len(act['actuators'])} values for {k} joints")
        if int(action["size"]) != k or int(meta["network"]["output_size"]) != k:
            raise MetadataError(f"action.size: {action['size']} for {k} joints")
        self.base = self.id_of(mujoco.mjtObj.mjOBJ_BODY, meta["base"]["body"], "base.body")
        jnt = int(model.body_jntadr[self.base])
        if jnt < 0 or model.jnt_type[jnt] != mujoco.mjtJoint.mjJNT_FREE:
            raise MetadataError(f"base.body: {meta['base']['body']!r} has no free joint in the scene")
        self.base_q, self.base_v = int(model.jnt_qposadr[jnt]), int(model.jnt_dofadr[jnt])
        imu = meta["base"].get("imu_site")
        self.imu = None if imu is None else self.id_of(mujoco.mjtObj.mjOBJ_SITE, imu, "base.imu_site")
        ids = [self.id_of(mujoco.mjtObj.mjOBJ_JOINT, n, "joints.names") for n in names]
        self.qadr = np.array([model.jnt_qposadr[j] for j in ids])
        self.vadr = np.array([model.jnt_dofadr[j] for j in ids])
        self.acts = np.array(
            [self.id_of(mujoco.mjtObj.mjOBJ_ACTUATOR, n, "actuation.actuators") for n in act["actuators"]]
        )
        held = joints.get("held", {"names": [], "targets": []})
        self.held_acts = np.array([self._held_actuator(n) for n in held["names"]], dtype=np.int64)
        self.default = finite_list(joints["default"], "joints.default", k)
        self.scale = finite_list(action["scale"], "action.scale", k)
        self.offset = finite_list(action["offset"], "action.offset", k)
        clip = action.get("clip")
        self.clip = None if clip is None else tuple(finite_list(clip, "action.clip", 2))
        if self.clip is not None and not self.clip[0] < self.clip[1]:
            raise MetadataError(f"action.clip: expected [low, high] with low < high, got {clip!r}")
        self.kind = act["kind"]
        self.kp = finite_list(act["kp"], "actuation.kp", k)
        self.kd = finite_list(act["kd"], "actuation.kd", k)
        if (self.kp < 0).any() or (self.kd < 0).any():
            raise MetadataError("actuation.kp, actuation.kd: expected gains >= 0")
        self.effort = finite_list(act.get("effort_limit") or [None] * k, "actuation.effort_limit", k, none=np.inf)
        self.held_targets = finite_list(held["targets"], "joints.held.targets", len(held["names"]))
        self._configure_actuators()
        self.terms = self._check_terms(meta["observations"], int(meta["network"]["input_size"]))
        decimation = meta["control"]["decimation"]
        if isinstance(decimation, bool) or not isinstance(decimation, int) or decimation < 1:
            raise MetadataError(f"control.decimation: expected a positive integer, got {decimation!r}")
        self.decimation = decimation
        period = finite_number(meta["control"]["period"], "control.period", positive=True)
        dt = finite_number(meta["control"]["physics_dt"], "control.physics_dt", positive=True)
        if abs(dt * self.decimation - period) > 1e-9:
            raise MetadataError(f"control.period: {period} s is not {self.decimation} x physics_dt {dt} s")
        if abs(model.opt.timestep - dt) > 1e-12:
            raise MetadataError(f"control.physics_dt: {dt} s, the scene's timestep is {model.opt.timestep} s")
        self.period = period
        self.last_action = np.zeros(k)
        self.targets = self.offset.copy()

    def id_of(self, kind: mujoco.mjtObj, name: str, key: str) -> int:
        i = mujoco.mj_name2id(self.model, kind, name)
        if i < 0:
            raise MetadataError(f"{key}: the scene has no {kind.name[6:].lower()} {name!r}")
        return int(i)

    def _held_actuator(self, joint: str) -> int:
        j = self.id_of(mujoco.mjtObj.mjOBJ_JOINT, joint, "joints.held.names")
        found = np.flatnonzero((self.model.actuator_trnid[:, 0] == j) & (self.model.actuator_trntype == 0))
        if not found.size:
            raise MetadataError(f"joints.held.names: joint {joint!r} has no actuator in the scene")
        return int(found[0])

    def _configure_actuators(self) -> None:
        """Servo gains and effort limits from the metadata, as a motor driver is configured (``"servo"``);
        ``"pd"``: the motors stay torque motors and :meth:`ctrl` computes the PD law."""
        m = self.model
        if self.kind == "servo":
            for i, a in enumerate(self.acts):
                m.actuator_gainprm[a, 0] = self.kp[i]
                m.actuator_biasprm[a, 1] = -self.kp[i]
                m.actuator_biasprm[a, 2] = -self.kd[i]
                if np.isfinite(self.effort[i]):
                    m.actuator_forcelimited[a] = 1
                    m.actuator_forcerange[a] = (-self.effort[i], self.effort[i])
        elif self.kind == "pd":
            act = self.meta["actuation"]
            k = len(self.acts)
            sat = act.get("saturation_effort") or [None] * k
            vmax = act.get("velocity_limit") or [None] * k
            self.saturation = finite_list(sat, "actuation.saturation_effort", k, none=np.inf)
            self.vmax = finite_list(vmax, "actuation.velocity_limit", k, none=np.inf)
            self.torque_per_ctrl = m.actuator_gear[self.acts, 0] * m.actuator_gainprm[self.acts, 0]
        else:
            raise MetadataError(f"actuation.kind: expected 'servo' or 'pd', got {self.kind!r}")

    @staticmethod
    def _check_terms(terms: list, size: int) -> list:
        start = 0
        for i, term in enumerate(terms):
            finite_number(term.get("scale", 1.0), f"observations[{i}].scale")
            if term["name"] not in TERMS:
                if term["name"] == "height_scan":
                    raise MetadataError(
                        f"observations[{i}].name: 'height_scan' needs the robot's elevation map; this loop has none"
                    )
                raise MetadataError(f"observations[{i}].name: unknown term {term['name']!r}; known: {list(TERMS)}")
            if int(term["start"]) != start:
                raise MetadataError(f"observations[{i}].start: {term['start']}, expected {start}")
            start += int(term["size"])
        if start != size:
            raise MetadataError(f"observations: the terms give {start} values, network.input_size is {size}")
        return terms

    # -- sensors ------------------------------------------------------------------------------------
    def frames(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(lin, ang, gravity, R_base)``: the base's velocities and gravity in the IMU frame, and the base's
        rotation matrix (world from base)."""
        q = data.qpos[self.base_q + 3 : self.base_q + 7]
        r_base = _quat_to_mat(np.array(q))
        r_imu = r_base if self.imu is None else data.site_xmat[self.imu].reshape(3, 3)
        lin_w = data.qvel[self.base_v : self.base_v + 3]
        ang_w = r_base @ data.qvel[self.base_v + 3 : self.base_v + 6]  # a free joint's angular velocity: body frame
        return r_imu.T @ lin_w, r_imu.T @ ang_w, r_imu.T @ np.array([0.0, 0.0, -1.0]), r_base

    def observe(self, data: mujoco.MjData, command: np.ndarray) -> np.ndarray:
        """The policy's input at the current state (``mj_kinematics`` must have run on it)."""
        lin, ang, grav, _ = self.frames(data)
        values = {
            "base_lin_vel": lin,
            "base_ang_vel": ang,
            "projected_gravity": grav,
            "command": np.asarray(command, dtype=np.float64),
            "joint_pos": data.qpos[self.qadr] - self.default,
            "joint_vel": data.qvel[self.vadr],
            "last_action": self.last_action,
        }
        parts = [np.asarray(values[t["name"]], dtype=np.float64) * float(t.get("scale", 1.0)) for t in self.terms]
        return np.concatenate(parts).astype(np.float32)

    # -- actuators ----------------------------------------------------------------------------------
    def act(self, action: np.ndarray) -> np.ndarray:
        """Clip the policy's action, keep it as the next ``last_action``, set the joint targets."""
        a = np.asarray(action, dtype=np.float64)
        if self.clip is not None:
            a = np.clip(a, *self.clip)
        self.last_action = a.astype(np.float32).astype(np.float64)
        self.targets = self.offset + self.scale * self.last_action
        return self.targets

    def ctrl(self, data: mujoco.MjData) -> None:
        """Write the actuators' ctrl for the next physics step (servo: the targets; pd: the PD torque)."""
        m = self.model
        if self.kind == "servo":
            data.ctrl[self.acts] = m.actuator_gear[self.acts, 0] * self.targets
        else:
            q, qd = data.qpos[self.qadr], data.qvel[self.vadr]
            torque = self.kp * (self.targets - q) - self.kd * qd
            finite = np.isfinite(self.vmax)  # no velocity limit: nothing lost (and no inf/inf computed)
            lost = np.zeros_like(qd)
            lost[finite] = qd[finite] * self.saturation[finite] / self.vmax[finite]
            torque = np.clip(torque, -self.saturation - lost, self.saturation - lost)
            ctrl = torque / self.torque_per_ctrl
            lo, hi = m.actuator_ctrlrange[self.acts].T
            limited = m.actuator_ctrllimited[self.acts].astype(bool)
            data.ctrl[self.acts] = np.where(limited, np.clip(ctrl, lo, hi), ctrl)
        if self.held_acts.size:
            data.ctrl[self.held_acts] = m.actuator_gear[self.held_acts, 0] * self.held_targets

    def reset(self) -> None:
        self.last_action = np.zeros_like(self.last_action)
        self.targets = self.offset.copy()


class Judge:
    """The training task's episode rules (``episode`` of the metadata)."""

    def __init__(self, model: mujoco.MjModel, meta: dict, controller: VelocityController):
        ep = meta["episode"]
        self.model, self.c = model, controller
        length = ep["length"]
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise MetadataError(f"episode.length: expected a positive integer, got {length!r}")
        self.length = length
        self.min_height = finite_number(ep["min_base_height"], "episode.min_base_height")
        self.cos_tilt = math.cos(finite_number(ep["max_tilt"], "episode.max_tilt", positive=True))
        self.success_error = finite_number(ep["success_error"], "episode.success_error", positive=True)
        self.threshold = finite_number(ep["contact_threshold"], "episode.contact_threshold")
        error = ep.get("error") or {}
        frame = error.get("frame", "imu") if isinstance(error, dict) else error
        if frame != "imu":  # the velocity error in the frame the metadata names (this loop measures the imu frame's)
            raise MetadataError(f"episode.error.frame: this loop measures the velocity error in 'imu', got {frame!r}")
        body = mujoco.mjtObj.mjOBJ_BODY
        self.bodies = {controller.id_of(body, n, "episode.termination_bodies") for n in ep["termination_bodies"]}

    def touching(self, data: mujoco.MjData) -> bool:
        """Whether a termination body's net contact force exceeds the threshold (the last physics step's)."""
        force = {b: np.zeros(3) for b in self.bodies}
        f6 = np.zeros(6)
        for i in range(data.ncon):
            con = data.contact[i]
            b1, b2 = int(self.model.geom_bodyid[con.geom1]), int(self.model.geom_bodyid[con.geom2])
            if b1 not in force and b2 not in force:
                continue
            mujoco.mj_contactForce(self.model, data, i, f6)
            world = con.frame.reshape(3, 3).T @ f6[:3]  # the force of geom1 on geom2, world frame
            if b1 in force:
                force[b1] -= world
            if b2 in force:
                force[b2] += world
        return any(float(f @ f) > self.threshold**2 for f in force.values())

    def after_step(self, data: mujoco.MjData, episode: Episode, command: np.ndarray) -> None:
        """Count one policy step: the velocity error against ``command`` (the one now in force), a fall."""
        lin, _, _, r_base = self.c.frames(data)
        episode.steps += 1
        episode.error_sum += float(np.linalg.norm(lin[:2] - np.asarray(command)[:2]))
        z = float(data.qpos[self.c.base_q + 2])
        fell = z < self.min_height or r_base[2, 2] < self.cos_tilt
        if not fell and self.bodies and self.touching(data):
            fell, episode.reason = True, "a termination body touched something"
        elif fell:
            episode.reason = "base too low" if z < self.min_height else "base tilted too far"
        episode.fell = fell
        if fell or episode.steps >= self.length:
            episode.done = True
            episode.success = not fell and episode.error_sum / self.length <= self.success_error


class Commands:
    """A scripted command sequence: ``[[t, vx, vy, wz], ...]``, each entry from time ``t`` (s) on."""

    def __init__(self, script: Any, source: str = "commands"):
        if not isinstance(script, list) or not script:
            raise UsageError(f"{source}: expected [[t, vx, vy, wz], ...], got {repr(script)[:40]}")
        rows = []
        for i, r in enumerate(script):
            ok = isinstance(r, (list, tuple, np.ndarray)) and len(r) == 4
            ok = ok and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in r)
            if not ok:
                raise UsageError(f"{source}: row {i}: expected [t, vx, vy, wz], four finite numbers, got {r!r}")
            rows.append((float(r[0]), np.array(r[1:4], dtype=np.float64)))
        rows.sort(key=lambda row: row[0])
        for (t0, _), (t1, _) in zip(rows, rows[1:]):
            if t1 == t0:
                raise UsageError(f"{source}: two rows start at t = {t0:g} s; give each time once")
        self.rows = rows

    def __call__(self, t: float) -> np.ndarray:
        current = self.rows[0][1]
        for start, value in self.rows:
            if start <= t + 1e-9:
                current = value
        return current


class Runner:
    """The whole loop on one MuJoCo model: reset, then control periods of observe, infer, drive, judge."""

    def __init__(self, policy_path: str | os.PathLike, meta: dict | None = None, scene: str | None = None):
        self.meta = meta if meta is not None else load_metadata(policy_path)
        robot = self.meta.get("robot") or {}
        if not isinstance(robot, dict):
            raise MetadataError(f"robot: expected an object, got {repr(robot)[:40]}")
        if scene is None and not isinstance(robot.get("scene"), str):
            raise MetadataError(
                f"robot.scene: expected the scene's path, got {robot.get('scene')!r}; --scene names one"
            )
        path = Path(scene) if scene is not None else Path(policy_path).parent / robot["scene"]
        key = "--scene" if scene is not None else "robot.scene"
        if not path.is_file():
            raise UsageError(f"{key}: no such file {str(path)!r}" + ("" if scene else " (--scene names another)"))
        if scene is None and robot.get("scene_sha256") not in (None, scene_sha256(path.parent)):
            raise MetadataError(
                f"robot.scene_sha256: the files of {str(path.parent)!r} are not the ones exported with the policy"
                " (--scene loads another scene)"
            )
        try:
            self.model = mujoco.MjModel.from_xml_path(str(path))
        except ValueError as e:  # MuJoCo's load errors are several lines
            raise UsageError(f"{key}: MuJoCo cannot load {str(path)!r}: {' '.join(str(e).split())[:200]}") from None
        self.data = mujoco.MjData(self.model)
        self.controller = VelocityController(self.model, self.meta)
        self.judge = Judge(self.model, self.meta, self.controller)
        self.policy = OnnxPolicy(policy_path, self.meta)
        self.start = finite_list(self.meta["base"]["default_qpos"], "base.default_qpos", self.model.nq)

    def reset(self, qpos: np.ndarray | None = None, qvel: np.ndarray | None = None) -> None:
        """Start an episode: ``qpos`` (default: ``base.default_qpos``), ``qvel`` (default: at rest)."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = self.start if qpos is None else qpos
        self.data.qvel[:] = 0.0 if qvel is None else qvel
        mujoco.mj_forward(self.model, self.data)
        self.controller.reset()

    def run_episode(
        self, commands: Commands, qpos: np.ndarray | None = None, steps: int | None = None, log: bool = False,
        viewer: Any = None, keyboard: Keyboard | None = None,
    ) -> Episode:  # fmt: skip
        """Play one episode (at most ``steps`` policy steps) from ``qpos``; with ``log``, every step's
        observation, action and command, and the state it was made at, are kept in ``episode.log``."""
        self.reset(qpos)
        c, m, d = self.controller, self.model, self.data
        episode = Episode()
        limit = self.judge.length if steps is None else min(steps, self.judge.length)
        t = 0.0
        command = keyboard.command if keyboard is not None else commands(t)
        obs = c.observe(d, command)
        while not episode.done and episode.steps < limit:
            start = time.perf_counter()
            action = self.policy(obs)
            if log:
                episode.log["obs"].append(obs)
                episode.log["action"].append(action)
                episode.log["command"].append(np.array(command))
                episode.log["qpos"].append(d.qpos.copy())
                episode.log["qvel"].append(d.qvel.copy())
            c.act(action)
            for _ in range(c.decimation):
                c.ctrl(d)
                mujoco.mj_step(m, d)
            mujoco.mj_kinematics(m, d)  # the sensors' frames at the state reached
            t += c.period
            command = keyboard.command if keyboard is not None else commands(t)
            self.judge.after_step(d, episode, command)
            obs = c.observe(d, command)
            if viewer is not None:
                viewer.sync()
                time.sleep(max(0.0, c.period - (time.perf_counter() - start)))
        return episode


class Keyboard:
    """Velocity commands from the viewer's keys, within the metadata's command ranges."""

    STEP = (0.1, 0.05, 0.1)

    def __init__(self, meta: dict):
        ranges = (meta.get("commands") or {}).get("ranges") if isinstance(meta.get("commands"), dict) else None
        if not isinstance(ranges, list) or len(ranges) != 3:
            raise MetadataError(f"commands.ranges: expected three [low, high] pairs, got {repr(ranges)[:40]}")
        self.ranges = np.stack([finite_list(r, f"commands.ranges[{i}]", 2) for i, r in enumerate(ranges)])
        self.command = np.zeros(3)

    def __call__(self, key: int) -> None:
        glfw_keys = {265: (0, 1), 264: (0, -1), 263: (2, 1), 262: (2, -1), 44: (1, 1), 46: (1, -1)}
        if key == 32:
            self.command[:] = 0.0
        elif key in glfw_keys:
            axis, sign = glfw_keys[key]
            self.command[axis] += sign * self.STEP[axis]
        self.command = np.clip(self.command, self.ranges[:, 0], self.ranges[:, 1])
        print(f"command: vx {self.command[0]:+.2f} m/s, vy {self.command[1]:+.2f} m/s, wz {self.command[2]:+.2f} rad/s")


def _checked_args(args: argparse.Namespace) -> Commands:
    """The flags checked before anything runs (a bad one is a :class:`UsageError`): the commands they give."""
    if args.episodes < 1:
        raise UsageError(f"--episodes: expected a positive integer, got {args.episodes}")
    if args.log is not None:
        log = Path(args.log)
        if log.suffix != ".npz":
            raise UsageError(f"--log: expected a .npz file, got {args.log!r}")
        if not log.parent.is_dir():
            raise UsageError(f"--log: folder {str(log.parent)!r} does not exist")
        if log.is_dir() or (log.exists() and not args.overwrite):
            raise UsageError(f"--log: {args.log!r} exists (--overwrite replaces it)")
    if args.command is not None and not all(math.isfinite(v) for v in args.command):
        raise UsageError(f"--command: expected three finite numbers, got {args.command}")
    if not args.commands:
        return Commands([[0.0, *(args.command or (0.5, 0.0, 0.0))]])
    path = Path(args.commands)
    if not path.is_file():
        raise UsageError(f"--commands: no such file {args.commands!r}")
    return Commands(_json(path.read_text(errors="replace"), f"--commands: {args.commands!r}", UsageError), "--commands")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="the exported policy (.onnx)")
    p.add_argument("--metadata", help="its metadata JSON (default: beside the ONNX file, else inside it)")
    p.add_argument("--scene", help="the scene to load (default: the metadata's robot.scene, beside the policy)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--commands", metavar="FILE.json", help="scripted commands [[t, vx, vy, wz], ...]")
    src.add_argument("--command", nargs=3, type=float, metavar=("VX", "VY", "WZ"), help="a constant command")
    src.add_argument("--viewer", action="store_true", help="MuJoCo's viewer, commands from the keyboard")
    p.add_argument("--episodes", type=int, default=1, help="episodes to play (default 1)")
    p.add_argument("--log", metavar="OUT.npz", help="each step's obs, action, command, qpos, qvel (episode 0)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --log file")
    args = p.parse_args(argv)
    try:
        commands = _checked_args(args)
        meta = load_metadata(args.policy, args.metadata)
        runner = Runner(args.policy, meta, args.scene)
    except (MetadataError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:  # a field the loop reads is missing
        print(f"error: {e.args[0]}: missing from the policy's metadata", file=sys.stderr)
        return 2
    if args.viewer:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            print("error: --viewer: no display here; use --commands or --command", file=sys.stderr)
            return 2
        import mujoco.viewer

        try:
            keys = Keyboard(meta)
        except MetadataError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        with mujoco.viewer.launch_passive(runner.model, runner.data, key_callback=keys) as view:
            while view.is_running():
                runner.run_episode(Commands([[0.0, 0.0, 0.0, 0.0]]), viewer=view, keyboard=keys)
        return 0
    wins = 0
    for i in range(args.episodes):
        ep = runner.run_episode(commands, log=args.log is not None and i == 0)
        if args.log is not None and i == 0:
            arrays: dict[str, Any] = {k: np.array(v) for k, v in ep.log.items()}
            arrays["period"] = np.array(runner.controller.period)
            np.savez(args.log, **arrays)
        wins += ep.success
        mean_error = ep.error_sum / max(ep.steps, 1)
        ended = f"fell at step {ep.steps} ({ep.reason})" if ep.fell else f"played {ep.steps} steps"
        print(f"episode {i}: {ended}, mean velocity error {mean_error:.3f} m/s, success {ep.success}")
    print(f"success {wins}/{args.episodes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
