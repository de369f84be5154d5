"""Replays of a recording into any backend built from the same model.

* :func:`kinematic_replay` sets the recorded states row by row (for pictures:
  no physics runs).
* :func:`dynamic_replay` starts from the recorded state and applies the
  recorded controls, resetting envs where the recording did, and reports
  the first row where the replaying engine parts from the recording beyond a
  tolerance: a sim-to-sim check from one recording. On the recording's own
  backend it starts from the exact snapshots (bit for bit on MuJoCo); on
  another it starts from the named states (qpos/qvel and the per-env
  parameters, matched by name).

What a replay cannot reproduce: forces given to ``apply_body_force`` and the
``body_force`` randomization term (inputs a recording does not hold), and
controls a pre-step control function computed inside a ``step`` (a
recording holds the last substep's).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SnapshotMismatchError

from .recording import Recording


def _open(recording: Any) -> Recording:
    if isinstance(recording, Recording):
        return recording
    raise ArgumentTypeError(
        f"recording: expected a Recording (Recording(path) opens a file), got {type(recording).__name__}"
    )


def _check(rec: Recording, sim: Any, envs: Any) -> np.ndarray:
    """Positions of the replayed envs in the recording; ``sim`` must hold the recorded model and enough envs."""
    from simbackend.contract import SimBackend

    if not isinstance(sim, SimBackend):
        raise ArgumentTypeError(f"sim: expected a SimBackend, got {type(sim).__name__}")
    if sim.info.fingerprint != rec.fingerprint:
        raise SnapshotMismatchError(
            f"sim: its model (fingerprint {sim.info.fingerprint}) is not the recorded one"
            f" ({rec.fingerprint}); build it with Recording.make_backend"
        )
    pos = rec.env_positions(envs)
    if pos.size > sim.num_envs:
        raise InvalidArgumentError(f"sim: {pos.size} envs to replay need num_envs >= {pos.size}, got {sim.num_envs}")
    return pos


def kinematic_replay(
    recording: Recording, sim: Any, envs: Any = None, *, rows: Any = None, every: int = 1
) -> Iterator[int]:
    """Set env ``i`` of ``sim`` to the recorded state of the ``i``-th replayed env, row by row.

    Args:
        recording: an open :class:`Recording`.
        sim: a backend of the recorded model (any engine) with at least as many envs as replayed.
        envs: recorded env ids to replay (``None``: all recorded).
        rows: the rows to show (a slice; default all).
        every: show every ``every``-th of those rows.

    Yields:
        The row index, after ``sim``'s first envs hold that row's state (render them then).
    """
    rec = _open(recording)
    pos = _check(rec, sim, envs)
    every = checks.integer(every, "every", minimum=1)
    span = range(len(rec))[rows if rows is not None else slice(None)][::every]
    ids = np.arange(pos.size)
    block = 256
    for start in range(0, len(span), block):
        chunk = list(span[start : start + block])
        qpos = rec.rows("qpos", chunk, pos)
        qvel = rec.rows("qvel", chunk, pos)
        for t, r in enumerate(chunk):
            sim.set_state(ids, qpos[t], qvel[t])
            yield r


@dataclass(frozen=True)
class ReplayReport:
    """What :func:`dynamic_replay` measured.

    Attributes:
        recorded_backend, replay_backend: the engines.
        exact_start: the replay started from snapshots (same backend), not named states.
        envs: the recorded env ids replayed.
        rows: ``(T,)`` the stepped rows compared.
        time: ``(T, e)`` recorded time of those rows, s.
        qpos_error, qvel_error: ``(T, e)`` largest |difference| per row and env
            (quaternions compared up to sign).
        first_parting_row: ``(e,)`` the first row where an error leaves the
            tolerance, -1 where none does (an error that is NaN leaves it).
        qpos_tolerance, qvel_tolerance: the tolerances used.
    """

    recorded_backend: str
    replay_backend: str
    exact_start: bool
    envs: np.ndarray
    rows: np.ndarray
    time: np.ndarray
    qpos_error: np.ndarray
    qvel_error: np.ndarray
    first_parting_row: np.ndarray
    qpos_tolerance: float
    qvel_tolerance: float

    @property
    def parted(self) -> bool:
        return bool((self.first_parting_row >= 0).any())

    def summary(self) -> str:
        """A few lines for people: per env, the first row and time of parting and the largest errors."""
        lines = [
            f"dynamic replay of a {self.recorded_backend} recording on {self.replay_backend}"
            f" ({'exact snapshots' if self.exact_start else 'named states'} at resets), {self.rows.size} stepped"
            f" rows; tolerance qpos {self.qpos_tolerance:g}, qvel {self.qvel_tolerance:g}"
        ]
        for i, env in enumerate(self.envs):
            r = int(self.first_parting_row[i])
            if r < 0:
                where = "stays within tolerance"
            else:
                t = float(self.time[np.flatnonzero(self.rows == r)[0], i])
                where = f"parts at row {r} (t = {t:.4f} s)"
            qe = float(self.qpos_error[:, i].max(initial=0.0))
            ve = float(self.qvel_error[:, i].max(initial=0.0))
            lines.append(f"  env {int(env)}: {where}; largest error qpos {qe:.3g}, qvel {ve:.3g}")
        return "\n".join(lines)


def _quat_columns(rec: Recording) -> np.ndarray:
    starts = [int(a) + (3 if t == 0 else 0) for a, t in zip(rec.joint_qposadr, rec.joint_type) if t in (0, 1)]
    return np.asarray(starts, np.int64)


def _qpos_error(rec: Recording, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(e,)`` largest |a - b| per row, quaternions compared up to sign."""
    diff = np.abs(a - b)
    for q in _quat_columns(rec):
        same = np.abs(a[:, q : q + 4] - b[:, q : q + 4]).max(1)
        flipped = np.abs(a[:, q : q + 4] + b[:, q : q + 4]).max(1)
        diff[:, q : q + 4] = np.minimum(same, flipped)[:, None]
    return diff.max(1, initial=0.0)


def dynamic_replay(
    recording: Recording,
    sim: Any,
    envs: Any = None,
    *,
    qpos_tolerance: float = 1e-3,
    qvel_tolerance: float | None = None,
    progress: Any = None,
) -> ReplayReport:
    """Replay the recorded controls on ``sim`` and measure where it parts from the recording.

    Env ``i`` of ``sim`` replays the ``i``-th env of ``envs``. At every write
    row of the recording (its start, resets, randomizations) the envs the
    write touched get the recorded state: the exact snapshot when ``sim`` is
    the recording's backend and the recording holds snapshots, else the named
    state (qpos, qvel, per-env parameters). At every stepped row, every
    replayed env steps with its recorded controls and ``nsteps``, and its
    qpos/qvel are compared with the recording's: an env parts at the first
    row where an error is not within the tolerance (NaN never is). The
    recording's values were checked when it was opened (finite, every shape
    as its header and model give it; :class:`Recording`).

    Args:
        recording: an open :class:`Recording`.
        sim: a backend of the recorded model with at least as many envs as replayed.
        envs: recorded env ids (``None``: all).
        qpos_tolerance: largest |qpos| difference within tolerance (m, rad).
        qvel_tolerance: the same for qvel (m/s, rad/s; default 100 x ``qpos_tolerance``).
        progress: a callable ``progress(done, total)`` called every 64 rows, or ``None``.
    """
    rec = _open(recording)
    pos = _check(rec, sim, envs)
    qpos_tolerance = checks.real(qpos_tolerance, "qpos_tolerance", minimum=0.0, above=True)
    qvel_tolerance = checks.real(qvel_tolerance, "qvel_tolerance", minimum=0.0, above=True, allow_none=True)
    qvel_tol = 100.0 * qpos_tolerance if qvel_tolerance is None else float(qvel_tolerance)
    e = pos.size
    exact = sim.name == rec.backend and rec.snapshot_width > 0 and bool(sim.capabilities.snapshot_restore)
    events = rec.events()
    by_row: dict[int, list[tuple[int, int]]] = {}
    where = {int(p): i for i, p in enumerate(pos)}
    for k, (row, env) in enumerate(zip(events["row"], events["env"])):
        if int(env) in where:
            by_row.setdefault(int(row), []).append((k, where[int(env)]))
    stepped = np.flatnonzero(rec.nsteps > 0)
    T = stepped.size
    qpos_err, qvel_err = np.zeros((T, e)), np.zeros((T, e))
    times = np.zeros((T, e))
    first = np.full(e, -1, np.int64)
    device = sim.device
    t_index = 0
    block = 256
    for start in range(0, len(rec), block):
        stop = min(start + block, len(rec))
        qpos = rec.rows("qpos", slice(start, stop), pos)
        qvel = rec.rows("qvel", slice(start, stop), pos)
        ctrl = rec.rows("ctrl", slice(start, stop), pos)
        tm = rec.rows("time", slice(start, stop), pos)
        for r in range(start, stop):
            n = int(rec.nsteps[r])
            if n == 0:
                hits = by_row.get(r, [])
                if hits:
                    index = [k for k, _ in hits]
                    ids = np.array([i for _, i in hits], np.int64)
                    if exact:
                        sim.set_physics_state(ids, rec.event_snapshot(index))
                    else:
                        sim.set_named_state(ids, rec.event_state(index))
                continue
            full = torch.zeros((sim.num_envs, sim.num_actuators), dtype=torch.float32)
            full[:e] = torch.as_tensor(ctrl[r - start])
            sim.step(full.to(device), nsteps=n)
            got_q = sim.get_qpos()[:e].cpu().numpy().astype(np.float64)
            got_v = sim.get_qvel()[:e].cpu().numpy().astype(np.float64)
            qpos_err[t_index] = _qpos_error(rec, got_q, qpos[r - start].astype(np.float64))
            qvel_err[t_index] = np.abs(got_v - qvel[r - start]).max(1, initial=0.0)
            times[t_index] = tm[r - start]
            # "not within": NaN (a non-finite state of the replaying engine) is outside every tolerance
            out = ~((qpos_err[t_index] <= qpos_tolerance) & (qvel_err[t_index] <= qvel_tol))
            first = np.where((first < 0) & out, r, first)
            t_index += 1
            if progress is not None and t_index % 64 == 0:
                progress(t_index, T)
    if progress is not None:
        progress(T, T)
    return ReplayReport(
        rec.backend,
        sim.name,
        exact,
        rec.env_ids[pos],
        stepped,
        times,
        qpos_err,
        qvel_err,
        first,
        float(qpos_tolerance),
        qvel_tol,
    )


__all__ = ["ReplayReport", "dynamic_replay", "kinematic_replay"]
