"""Reference trajectories a calibration fits to: this project's recordings or a robot's logs.

Two sources, one internal form (:class:`Segment`: the target backend's ``qpos``/``qvel``
layout, and the commands held between rows):

* a **recording** (``.h5``/``.hdf5``, :mod:`simbackend.playback.recording`) of any
  engine: every recorded env is cut into segments at its writes (resets,
  randomizations) and where it diverged; the commands are the recorded actuator
  controls, replayed as they are (exact for servos and for one substep per row; a
  physics-rate controller's controls, the PD law of ``actuation="pd"`` robots, are not
  recorded: log those robots' targets instead);
* a **log** (``.npz``, format ``simbackend-log`` version 1, :func:`write_log`), the form a
  robot's own logger can write: rows at a fixed control period, measured joints and
  (for a floating base) the base, and the commands sent, as joint position targets
  (replayed through the robot description's own joint controller) or as actuator
  controls.

Log arrays (``T`` rows; row ``t``'s command is the one sent at row ``t`` and held until
row ``t + 1``; the last row's command is not used):

================  ===========  ====================================================
``format``        str          ``"simbackend-log"``
``version``       int          1
``control_dt``    float        seconds between rows (a whole number of physics steps)
``joint_names``   ``(J,)``     the measured joints: every hinge/slide joint of the model
``joint_pos``     ``(T, J)``   rad or m
``joint_vel``     ``(T, J)``   rad/s or m/s
``base_pos``      ``(T, 3)``   world frame, m (required for a floating-base model)
``base_quat``     ``(T, 4)``   world frame, ``w, x, y, z`` (required with ``base_pos``)
``base_lin_vel``  ``(T, 3)``   world frame, m/s (required with ``base_pos``)
``base_ang_vel``  ``(T, 3)``   base frame (a gyroscope's), rad/s (required with ``base_pos``)
``target_names``  ``(K,)``     joints the targets drive: the robot's driven joints, in order
``target_pos``    ``(T, K)``   joint position targets, rad or m
``actuator_names``  ``(U,)``   instead of targets: actuators, in the model's names
``ctrl``          ``(T, U)``   their controls
``episode``       ``(T,)``     optional episode ids: a change starts a new segment
``robot``         str          optional: the registered robot (or description file) the log is of
================  ===========  ====================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simbackend.errors import ArgumentTypeError, InvalidArgumentError
from simbackend.model_info import JOINT_BALL, JOINT_FREE

__all__ = ["LOG_FORMAT", "Reference", "Segment", "load_reference", "write_log"]

LOG_FORMAT = "simbackend-log"
LOG_VERSION = 1
LOG_SUFFIXES = (".npz",)
RECORDING_SUFFIXES = (".h5", ".hdf5")


@dataclass
class Segment:
    """A continuous stretch of reference: ``T`` rows of state, ``T - 1`` commands between them.

    Attributes:
        qpos, qvel: ``(T, nq)``, ``(T, nv)`` float64 in the target backend's layout.
        commands: ``(T - 1, c)`` float64: what row ``t``'s command held until row ``t + 1``.
        nsteps: physics substeps between two rows.
        source: ``"<file>#<env or episode>"`` for reports.
    """

    qpos: np.ndarray
    qvel: np.ndarray
    commands: np.ndarray
    nsteps: int
    source: str

    @property
    def rows(self) -> int:
        return int(self.qpos.shape[0])


@dataclass
class Reference:
    """Reference segments and what their commands are.

    Attributes:
        segments: the segments (at least one, each at least two rows).
        command: ``"ctrl"`` (actuator controls, in ``command_names`` order) or ``"targets"``
            (joint position targets of ``command_names``, through the robot's joint controller).
        command_names: actuator or joint names.
        robot: the robot a ``targets`` log is of (a registered name or a description file), or ``None``.
        files: the files read.
    """

    segments: list[Segment]
    command: str
    command_names: tuple[str, ...]
    robot: str | None = None
    files: list[str] = field(default_factory=list)

    def extend(self, other: Reference) -> None:
        if other.command != self.command or other.command_names != self.command_names:
            raise InvalidArgumentError(
                f"reference: {other.files[0]!r} sends {other.command} of {list(other.command_names)[:4]}..., the"
                f" others {self.command} of {list(self.command_names)[:4]}...; every reference of one fit must"
                " command the same actuators or joints"
            )
        self.segments += other.segments
        self.files += other.files


def _joint_widths(jtype: int) -> tuple[int, int]:
    return {JOINT_FREE: (7, 6), JOINT_BALL: (4, 3)}.get(int(jtype), (1, 1))


def _from_recording(path: Path, info: Any) -> Reference:
    from simbackend.playback.recording import Recording

    with Recording(path) as rec:
        cols_q, cols_v = _column_map(rec.joint_names, rec.joint_type, rec.joint_qposadr, rec.joint_dofadr, info)
        names = tuple(rec.actuator_names)
        missing = [a for a in info.actuator_names if a not in names]
        if missing:
            raise InvalidArgumentError(f"reference: {str(path)!r} records no controls of actuators {missing[:5]}")
        act = np.array([names.index(a) for a in info.actuator_names], np.int64)
        nsteps = rec.rows("nsteps").astype(np.int64)
        segments = []
        for k, env in enumerate(rec.env_ids.tolist()):
            qpos = rec.rows("qpos", envs=k).astype(np.float64)
            qvel = rec.rows("qvel", envs=k).astype(np.float64)
            ctrl = rec.rows("ctrl", envs=k).astype(np.float64)[:, act]
            ok = ~rec.rows("diverged", envs=k).astype(bool)
            # a write row (nsteps 0) starts a segment: the state after the write is its first row
            for a, b in _split_recording(ok, nsteps):
                segments.append(
                    Segment(
                        qpos[a:b][:, cols_q],
                        qvel[a:b][:, cols_v],
                        ctrl[a + 1 : b],
                        int(nsteps[a + 1]),
                        f"{path.name}#env{env}:{a}",
                    )
                )
    return Reference(segments, "ctrl", tuple(info.actuator_names), None, [str(path)])


def _split_recording(ok: np.ndarray, nsteps: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges ``[a, b)`` to fit to: row ``a`` a valid state (a write row, or the last row before
    ``nsteps`` changed), then stepped valid rows with one ``nsteps``."""
    out, a, n = [], 0, ok.size
    for t in range(1, n + 1):
        if t < n and ok[a] and ok[t] and nsteps[t] > 0 and (t == a + 1 or nsteps[t] == nsteps[t - 1]):
            continue
        if t - a >= 2 and ok[a]:
            out.append((a, t))
        if t == n:
            break
        a = t - 1 if (nsteps[t] > 0 and ok[t] and ok[t - 1] and t - 1 > a) else t
    return out


def _column_map(names: Any, types: Any, qadr: Any, dadr: Any, info: Any) -> tuple[np.ndarray, np.ndarray]:
    """Columns of the source's qpos/qvel that give the target's, joint by joint (by name)."""
    src = {str(n): (int(t), int(q), int(d)) for n, t, q, d in zip(names, types, qadr, dadr)}
    cq, cv = np.zeros(info.nq, np.int64), np.zeros(info.nv, np.int64)
    for j, name in enumerate(info.joint_names):
        if name not in src:
            raise InvalidArgumentError(f"reference: has no joint {name!r} of the model")
        t, q, d = src[name]
        if t != int(info.joint_type[j]):
            raise InvalidArgumentError(f"reference: joint {name!r} has another type than the model's")
        wq, wv = _joint_widths(t)
        cq[int(info.joint_qposadr[j]) : int(info.joint_qposadr[j]) + wq] = np.arange(q, q + wq)
        cv[int(info.joint_dofadr[j]) : int(info.joint_dofadr[j]) + wv] = np.arange(d, d + wv)
    return cq, cv


def _array(data: Any, name: str, shape: tuple, where: str) -> np.ndarray:
    if name not in data:
        raise InvalidArgumentError(f"{where}: no array {name!r}")
    a = np.asarray(data[name])
    if a.dtype.kind not in "fiu":
        raise InvalidArgumentError(f"{where}: {name} must be numbers, got dtype {a.dtype}")
    a = a.astype(np.float64)
    if a.ndim != len(shape) or any(s is not None and s != g for s, g in zip(shape, a.shape)):
        want = "(" + ", ".join("?" if s is None else str(s) for s in shape) + ")"
        raise InvalidArgumentError(f"{where}: {name} has shape {a.shape}, expected {want}")
    if not np.isfinite(a).all():
        if a.ndim == 0:
            raise InvalidArgumentError(f"{where}: {name} is not finite, got {a.item()!r}")
        row = int(np.flatnonzero(~np.isfinite(a.reshape(a.shape[0], -1)).all(1))[0])
        raise InvalidArgumentError(f"{where}: {name} is not finite at row {row}")
    return a


def _strings(data: Any, name: str, where: str) -> tuple[str, ...]:
    if name not in data:
        raise InvalidArgumentError(f"{where}: no array {name!r}")
    a = np.asarray(data[name])
    if a.ndim != 1 or a.dtype.kind not in "US":
        raise InvalidArgumentError(f"{where}: {name} must be a 1-D array of names")
    return tuple(str(s) for s in a.tolist())


def _from_log(path: Path, info: Any, physics_dt: float) -> Reference:
    where = f"reference {path.name!r}"
    try:
        data = dict(np.load(path, allow_pickle=False))
    except (OSError, ValueError) as e:
        raise InvalidArgumentError(f"{where}: not a readable .npz file ({e})") from None
    fmt = str(data.get("format", ""))
    if fmt != LOG_FORMAT:
        raise InvalidArgumentError(f"{where}: format {fmt!r}, expected {LOG_FORMAT!r}")
    version = np.asarray(data.get("version", -1))
    if version.ndim or version.dtype.kind not in "iuf" or float(version) != LOG_VERSION:
        raise InvalidArgumentError(
            f"{where}: version {version.tolist()!r}; this simbackend reads version {LOG_VERSION}"
        )
    dt = float(_array(data, "control_dt", (), where))
    if not dt > 0:
        raise InvalidArgumentError(f"{where}: control_dt must be > 0 s, got {dt:g}")
    ratio = dt / physics_dt
    nsteps = int(round(ratio))
    if nsteps < 1 or abs(ratio - nsteps) > 1e-6 * max(1.0, ratio):
        raise InvalidArgumentError(
            f"{where}: control_dt {dt:g} s is not a whole number of the model's physics steps ({physics_dt:g} s)"
        )
    jnames = _strings(data, "joint_names", where)
    jpos = _array(data, "joint_pos", (None, len(jnames)), where)
    T = jpos.shape[0]
    jvel = _array(data, "joint_vel", (T, len(jnames)), where)
    qpos, qvel = np.zeros((T, info.nq)), np.zeros((T, info.nv))
    have_base = "base_pos" in data
    for j, name in enumerate(info.joint_names):
        t = int(info.joint_type[j])
        qa, da = int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
        if t == JOINT_FREE:
            if not have_base:
                raise InvalidArgumentError(
                    f"{where}: no base_pos; the model's free joint {name!r} needs the base pose and velocity"
                    " (base_pos, base_quat, base_lin_vel, base_ang_vel) to anchor the replay"
                )
            qpos[:, qa : qa + 3] = _array(data, "base_pos", (T, 3), where)
            quat = _array(data, "base_quat", (T, 4), where)
            norm = np.linalg.norm(quat, axis=1)
            if (np.abs(norm - 1) > 1e-3).any():
                raise InvalidArgumentError(f"{where}: base_quat rows must be unit quaternions (w, x, y, z)")
            qpos[:, qa + 3 : qa + 7] = quat / norm[:, None]
            qvel[:, da : da + 3] = _array(data, "base_lin_vel", (T, 3), where)
            qvel[:, da + 3 : da + 6] = _array(data, "base_ang_vel", (T, 3), where)
        elif t == JOINT_BALL:
            raise InvalidArgumentError(f"{where}: ball joint {name!r}: logs of ball joints are not read")
        else:
            if name not in jnames:
                raise InvalidArgumentError(
                    f"{where}: joint_names lacks the model's joint {name!r}; a log must measure every joint"
                )
            qpos[:, qa], qvel[:, da] = jpos[:, jnames.index(name)], jvel[:, jnames.index(name)]
    if "target_pos" in data:
        command, names = "targets", _strings(data, "target_names", where)
        cmd = _array(data, "target_pos", (T, len(names)), where)
    elif "ctrl" in data:
        command, names = "ctrl", _strings(data, "actuator_names", where)
        unknown = [a for a in names if a not in info.actuator_names]
        if unknown:
            raise InvalidArgumentError(f"{where}: actuator_names: the model has no actuators {unknown[:5]}")
        if sorted(names) != sorted(info.actuator_names):
            raise InvalidArgumentError(f"{where}: actuator_names must name every actuator of the model once")
        cmd = _array(data, "ctrl", (T, len(names)), where)
        order = [names.index(a) for a in info.actuator_names]
        cmd, names = cmd[:, order], tuple(info.actuator_names)
    else:
        raise InvalidArgumentError(f"{where}: no commands: give target_pos (with target_names) or ctrl")
    episode = _array(data, "episode", (T,), where) if "episode" in data else np.zeros(T)
    cuts = [0, *(np.flatnonzero(np.diff(episode) != 0) + 1).tolist(), T]
    segments = [
        Segment(qpos[a:b], qvel[a:b], cmd[a : b - 1], nsteps, f"{path.name}#episode{int(episode[a])}")
        for a, b in zip(cuts[:-1], cuts[1:])
        if b - a >= 2
    ]
    if not segments:
        raise InvalidArgumentError(f"{where}: no episode has two rows")
    robot = str(data["robot"]) if "robot" in data else None
    return Reference(segments, command, names, robot, [str(path)])


def load_reference(paths: Any, info: Any, physics_dt: float) -> Reference:
    """Read reference files (recordings and logs) into the layout of a model (``info``, a
    :class:`~simbackend.model_info.ModelInfo`, and its physics step)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not isinstance(paths, (list, tuple)) or not paths:
        raise ArgumentTypeError("reference: expected one or more file paths")
    out: Reference | None = None
    for p in map(Path, paths):
        if not p.is_file():
            raise InvalidArgumentError(f"reference: no such file {str(p)!r}")
        if p.suffix.lower() in RECORDING_SUFFIXES:
            ref = _from_recording(p, info)
        elif p.suffix.lower() in LOG_SUFFIXES:
            ref = _from_log(p, info, physics_dt)
        else:
            raise InvalidArgumentError(
                f"reference: {str(p)!r}: expected a recording ({', '.join(RECORDING_SUFFIXES)}) or a log (.npz)"
            )
        if not ref.segments:
            raise InvalidArgumentError(f"reference: {str(p)!r} holds no stretch of two stepped rows")
        if out is None:
            out = ref
        else:
            out.extend(ref)
    assert out is not None
    return out


def write_log(
    path: Any,
    *,
    control_dt: float,
    joint_names: Any,
    joint_pos: np.ndarray,
    joint_vel: np.ndarray,
    target_names: Any = None,
    target_pos: np.ndarray | None = None,
    actuator_names: Any = None,
    ctrl: np.ndarray | None = None,
    base: dict[str, np.ndarray] | None = None,
    episode: np.ndarray | None = None,
    robot: str | None = None,
) -> Path:
    """Write a ``simbackend-log`` (see the module docstring); ``base`` holds ``base_pos``, ``base_quat``,
    ``base_lin_vel`` and ``base_ang_vel``. Returns the path."""
    if (target_pos is None) == (ctrl is None):
        raise InvalidArgumentError("write_log: give exactly one of target_pos and ctrl")
    arrays: dict[str, Any] = {
        "format": np.array(LOG_FORMAT),
        "version": np.array(LOG_VERSION),
        "control_dt": np.array(float(control_dt)),
        "joint_names": np.array(list(joint_names)),
        "joint_pos": np.asarray(joint_pos, np.float64),
        "joint_vel": np.asarray(joint_vel, np.float64),
    }
    if target_pos is not None:
        arrays["target_names"] = np.array(list(target_names))
        arrays["target_pos"] = np.asarray(target_pos, np.float64)
    else:
        arrays["actuator_names"] = np.array(list(actuator_names))
        arrays["ctrl"] = np.asarray(ctrl, np.float64)
    for k, v in (base or {}).items():
        arrays[k] = np.asarray(v, np.float64)
    if episode is not None:
        arrays["episode"] = np.asarray(episode, np.int64)
    if robot is not None:
        arrays["robot"] = np.array(str(robot))
    p = Path(path)
    with open(p, "wb") as f:  # np.savez would append .npz to a name without it
        np.savez_compressed(f, **arrays)
    return p
