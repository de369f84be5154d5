"""Snapshots and named states: save and restore the exact state of some envs.

:class:`Snapshots` is the front end's snapshot service: it assembles rows from
the front end's bookkeeping (time, controls), the randomization service's
per-env values and the engine's own block (``Engine.save_state``), and
restores them in the same order.

A **snapshot** (``get_physics_state``) is one float64 row per env, ``(n, S)``:
everything needed so that restoring it (``set_physics_state``) and stepping
with the same controls reproduces the trajectory. Its columns, in order
(:class:`SnapshotLayout`; ``describe_snapshot`` reads a header):

====================  =====================================================
header (6)            magic, layout version, backend code (CRC-32 of the
                      backend's name), model fingerprint (two 32-bit
                      halves), row width S: small integers, exact in float64
time (1)              simulated time, s (``get_time``)
ctrl (nu)             the controls last applied (``get_ctrl``)
default qpos (nq)     each env's default configuration (``joint_default_pos``)
held forces           (nbody, 6) world force and torque of ``body_force`` terms,
                      and (nbody,) seconds left (-1: until replaced)
latency (1)           the env's action latency, substeps (``action_latency``)
pending ctrl (nu)     the ``ctrl`` of the last ``step`` call, which a delayed
                      env applies first in the next one (clamped; the
                      controls last applied while no env has a latency)
per-env parameters    every per-env model field of domain randomization,
                      flattened in :data:`simbackend.randomization.FIELDS` order
                      (masses, centres of mass, inertias, friction, gains,
                      actuator strength, damping, armature, frictionloss,
                      gravity)
engine (k)            the engine's own state: on MuJoCo its integration state
                      (qpos, qvel, act, warm start, ...), on CPU PhysX its own
                      serialisation and the memory of MuJoCo-computed forces;
                      opaque
====================  =====================================================

``set_physics_state`` checks every column before it writes anything, against the
bounds the same value has where it comes in otherwise: a time that is finite,
>= 0 and advanced by a substep; ctrl, pending ctrl and held forces within
float32 (``step``, ``apply_body_force``); a default qpos within the divergence
rule's ``MAX_QPOS``; held-force times >= 0 or -1; a latency that is a whole
number of substeps in [0, 1e6] (the ``action_latency`` term's); per-env
parameters within their plan terms' bounds.

Rows are plain tensors: slice them, stack them, save them with anything. A
row only goes back into the backend and model that made it (same name, same
model fingerprint, same layout version): anything else raises
:class:`~simbackend.errors.SnapshotMismatchError`. To move a state between
engines, use ``qpos``/``qvel`` (every backend accepts them through
``set_state``) or the **named state** (``get_named_state`` /
``set_named_state``, :class:`simbackend.state.NamedState`), which matches
bodies, joints and actuators by name and carries the per-env parameters.

What a snapshot does not hold: forces from ``apply_body_force`` (inputs of the
next ``step``, like the ``ctrl`` given to it), a pre-step control function,
and the draw counters of randomization plans (a plan applied after a restore
draws the values the env's next draw would have had, not the ones it drew
after the snapshot was taken).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.divergence import MAX_QPOS
from simbackend.engine import Engine
from simbackend.errors import (
    ArgumentTypeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    SnapshotMismatchError,
    UnknownNameError,
    ValueRangeError,
)
from simbackend.frontend.bookkeeping import EnvBook
from simbackend.frontend.names import joint_columns
from simbackend.model_info import JOINT_BALL, JOINT_FREE, ModelInfo
from simbackend.randomization.apply import FIELDS, MAX_LATENCY, Prepared, Randomizer
from simbackend.state import NamedState

#: "SBSNAP" as a 48-bit integer: marks a snapshot row (exact in float64)
MAGIC = 0x534253_4E4150
#: the column layout described in the module docstring
LAYOUT_VERSION = 2  # 2: action latency and the pending command
HEADER_WIDTH = 6


class SnapshotHeader(NamedTuple):
    """What a snapshot row's header says."""

    magic_ok: bool
    layout_version: int
    backend_code: int
    fingerprint: str
    width: int


def backend_code(name: str) -> int:
    """The 32-bit code of a backend name in snapshot headers (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(name.encode())


def _backend_named(code: int) -> str:
    """The registered backend whose name has ``code``, or ''."""
    from simbackend.plugins import available_backends

    return next((name for name in available_backends() if backend_code(name) == code), "")


def describe_snapshot(row: Any) -> SnapshotHeader:
    """Read the header of a snapshot row ``(S,)`` or the first row of ``(n, S)``."""
    a = np.asarray(row.detach().cpu() if isinstance(row, torch.Tensor) else row, dtype=np.float64)
    a = a.reshape(-1, a.shape[-1])[0] if a.ndim else a.reshape(1)
    if a.size < HEADER_WIDTH or not np.isfinite(a[:HEADER_WIDTH]).all():
        return SnapshotHeader(False, -1, -1, "", int(a.size))
    h = a[:HEADER_WIDTH]
    ints = [int(v) if float(v).is_integer() and 0 <= v < 2**53 else -1 for v in h]
    fingerprint = f"{ints[3]:08x}{ints[4]:08x}" if ints[3] >= 0 and ints[4] >= 0 else ""
    return SnapshotHeader(ints[0] == MAGIC, ints[1], ints[2], fingerprint, ints[5])


@dataclass(frozen=True)
class SnapshotLayout:
    """Column slices of one backend's snapshot rows (see the module docstring)."""

    time: slice
    ctrl: slice
    default_qpos: slice
    force: slice
    force_left: slice
    latency: slice
    pending_ctrl: slice
    fields: dict  # field name -> (slice, shape per env)
    engine: slice
    width: int

    @classmethod
    def of(cls, info: ModelInfo, engine_width: int) -> SnapshotLayout:
        col = HEADER_WIDTH
        parts = {}
        for name, size in (
            ("time", 1),
            ("ctrl", info.nu),
            ("default_qpos", info.nq),
            ("force", info.nbody * 6),
            ("force_left", info.nbody),
            ("latency", 1),
            ("pending_ctrl", info.nu),
        ):
            parts[name] = slice(col, col + size)
            col += size
        fields = {}
        for name, (attr, _, _) in FIELDS.items():
            shape = np.asarray(getattr(info, attr)).shape
            size = int(np.prod(shape))
            fields[name] = (slice(col, col + size), shape)
            col += size
        engine = slice(col, col + engine_width)
        return cls(fields=fields, engine=engine, width=engine.stop, **parts)


class Snapshots:
    """Snapshots and named states of one backend (the public calls are ``SimBackend``'s).

    Args:
        sim: the front end (its public getters and ``set_state``).
        engine: the engine (``state_width``, ``save_state``, ``check_saved``, ``restore_state``).
        book: the front end's per-env time and controls.
        dr: the randomization service (per-env parameters, default poses, held forces).
        check_state: the front end's checks of a state ``(env_ids, qpos, qvel)`` (the ones
            ``set_state`` applies: finite values, divergence bounds, zero quaternions), raising at
            once (deferred checks or not) naming ``env_ids``.
    """

    def __init__(
        self,
        sim: Any,
        engine: Engine,
        book: EnvBook,
        dr: Randomizer,
        check_state: Callable[[np.ndarray, Any, Any], None],
    ):
        self.sim, self.engine, self.book, self.dr = sim, engine, book, dr
        self.info: ModelInfo = sim.info
        self.check_state = check_state
        self._layout: SnapshotLayout | None = None

    @property
    def layout(self) -> SnapshotLayout:
        """The column layout of this backend's snapshot rows."""
        if self._layout is None:
            self._layout = SnapshotLayout.of(self.info, int(self.engine.state_width))
        return self._layout

    # ------------------------------------------------------------------
    # snapshots
    # ------------------------------------------------------------------
    def get(self, ids: np.ndarray) -> torch.Tensor:
        """``(n, S)`` float64 snapshots of validated host ``ids``, rows in that order."""
        L = self.layout
        n, dev = ids.size, self.sim.device
        out = torch.zeros((n, L.width), dtype=torch.float64, device=dev)
        if not n:
            return out
        rows = torch.as_tensor(ids, device=dev)
        out[:, :HEADER_WIDTH] = self.header(L.width).to(dev)
        out[:, L.time] = self.book.time[rows, None]
        out[:, L.ctrl] = self.book.clamped_ctrl(rows).to(torch.float64)
        out[:, L.default_qpos] = torch.as_tensor(np.array(self.dr.env_default_qpos()[ids]), device=dev)
        if self.dr.held_force is not None and self.dr.held_left is not None:
            out[:, L.force] = torch.as_tensor(self.dr.held_force[ids].reshape(n, -1), device=dev)
            left = self.dr.held_left[ids]
            out[:, L.force_left] = torch.as_tensor(np.where(np.isinf(left), -1.0, left), device=dev)
        out[:, L.latency] = torch.as_tensor(self.dr.env_latency()[ids, None], dtype=torch.float64, device=dev)
        pending = self.dr.pending_ctrl
        if pending is None:  # no latency: the last command is the controls last applied
            out[:, L.pending_ctrl] = out[:, L.ctrl]
        else:
            out[:, L.pending_ctrl] = self.book.clamp(pending[rows]).to(torch.float64)
        for name, (cols, _shape) in L.fields.items():
            out[:, cols] = torch.as_tensor(np.array(self.dr.table_rows(name, ids)).reshape(n, -1), device=dev)
        out[:, L.engine] = torch.as_tensor(self.engine.save_state(ids), dtype=torch.float64).to(dev)
        return out

    def set(self, ids: np.ndarray, state: Any) -> np.ndarray:
        """Restore rows ``state`` into validated host ``ids`` (row i into ``ids[i]``); everything is
        checked before anything is written. Returns the sorted ids written."""
        L = self.layout
        rows = self.rows(state, ids.size, L)
        order = np.argsort(ids, kind="stable")
        ids, rows = ids[order], rows[torch.as_tensor(order)]
        n = ids.size
        if not n:
            return ids
        bad = ~torch.isfinite(rows).all(1)
        if bool(bad.any()):
            raise NonFiniteError("state", ids[bad.numpy()])
        prepared = self.dr.prepare_values(
            ids,
            {name: rows[:, cols].numpy().reshape((n,) + shape) for name, (cols, shape) in L.fields.items()},
            "state",
        )
        time = rows[:, L.time.start]
        self.check_time(ids, time, "state (time)")
        self.check_bounds(ids, rows, L)
        left = rows[:, L.force_left].numpy()
        if (left < -1).any() or ((left < 0) & (left != -1)).any():
            raise ValueRangeError(
                "state (held force time)",
                ids[((left < 0) & (left != -1)).any(1)],
                0.0,
                problem="held-force times that are neither >= 0 nor -1",
            )
        latency = rows[:, L.latency.start].numpy()
        bad = (latency < 0) | (latency > MAX_LATENCY) | (latency != np.rint(latency))
        if bad.any():  # the action_latency term's bounds, checked before the int64 cast (1e19 would wrap)
            raise ValueRangeError(
                "state (latency)",
                ids[bad],
                MAX_LATENCY,
                problem="latencies that are not a whole number of substeps in [0, 1e6] (the action_latency term's bounds)",
            )
        dev = self.sim.device
        engine_rows = rows[:, L.engine].to(dev)
        qpos, qvel = self.engine.check_saved(ids, engine_rows)
        self.check_state(ids, qpos, qvel)
        # everything is checked: write
        self.dr.commit(prepared)
        force = rows[:, L.force].numpy().reshape(n, -1, 6)
        self.dr.restore_rows(ids, rows[:, L.default_qpos].numpy(), force, np.where(left == -1, np.inf, left))
        dev_ids = torch.as_tensor(ids, device=dev)
        self.book.time[dev_ids] = time.to(dev)
        self.book.ctrl[dev_ids] = rows[:, L.ctrl].to(device=dev, dtype=self.book.dtype)
        self.dr.restore_latency(ids, latency.astype(np.int64), rows[:, L.pending_ctrl])
        self.engine.restore_state(ids, engine_rows)
        return ids

    def check_time(self, ids: np.ndarray, time: torch.Tensor, argument: str) -> None:
        """Refuse times ``(n,)`` float64 that are not finite and >= 0, or so large that a substep would no
        longer advance them."""
        bad = ~torch.isfinite(time) | (time < 0)
        if bool(bad.any()):
            raise ValueRangeError(argument, ids[bad.numpy()], 0.0, problem="times that are not finite and >= 0")
        stuck = (time + self.sim.physics_dt) == time
        if bool(stuck.any()):
            raise ValueRangeError(
                argument, ids[stuck.numpy()], float(time.max()), problem="times too large for a substep to advance"
            )

    def check_bounds(self, ids: np.ndarray, rows: torch.Tensor, L: SnapshotLayout) -> None:
        """Refuse rows whose controls, default configuration or held forces break the bounds the same
        values have where they come in otherwise: ``step``'s ctrl and ``apply_body_force``'s forces (float32
        magnitudes), ``set_state``'s qpos (the divergence rule's), the plan terms that set them."""
        for column, argument, limit in (
            (L.ctrl, "state (ctrl)", V.MAX_REAL_INPUT),
            (L.pending_ctrl, "state (pending ctrl)", V.MAX_REAL_INPUT),
            (L.default_qpos, "state (default qpos)", MAX_QPOS),
            (L.force, "state (held force)", V.MAX_REAL_INPUT),
        ):
            bad = V.rows_above(rows[:, column], limit)
            if bool(bad.any()):
                raise ValueRangeError(argument, ids[bad.numpy()], limit)

    def header(self, width: int) -> torch.Tensor:
        """``(6,)`` float64: the header of this backend's snapshot rows."""
        fp = self.info.fingerprint
        return torch.tensor(
            [MAGIC, LAYOUT_VERSION, backend_code(self.sim.name), int(fp[:8], 16), int(fp[8:], 16), width],
            dtype=torch.float64,
        )

    def rows(self, state: Any, n: int, L: SnapshotLayout) -> torch.Tensor:
        """``state`` as a float64 CPU tensor ``(n, S)``, every row's header checked against this backend."""
        if isinstance(state, torch.Tensor):
            V.check_tensor_storage(state, "state")
            if state.dtype != torch.float64:
                raise InputDTypeError(f"state: snapshots are float64 (get_physics_state's rows), got {state.dtype}")
            t = state.detach().cpu()
        else:
            a = state if isinstance(state, np.ndarray) else np.asarray(state)
            if a.dtype != np.float64:
                raise InputDTypeError(f"state: snapshots are float64 (get_physics_state's rows), got {a.dtype}")
            t = torch.from_numpy(np.array(a))
        if t.ndim != 2 or t.shape[0] != n or t.shape[1] < HEADER_WIDTH:
            raise InputShapeError("state", (n, L.width), tuple(t.shape))
        want = self.header(L.width)
        head = t[:, :HEADER_WIDTH]

        def rows_where(bad: torch.Tensor) -> str:
            return f"state (rows {np.flatnonzero(bad.numpy())[:8].tolist()})"

        bad = head[:, 0] != want[0]
        if bool(bad.any()):
            raise SnapshotMismatchError(
                f"{rows_where(bad)}: not simbackend snapshots (no header); rows come from get_physics_state"
            )
        bad = head[:, 1] != want[1]
        if bool(bad.any()):
            got = describe_snapshot(t[int(np.flatnonzero(bad.numpy())[0])]).layout_version
            raise SnapshotMismatchError(
                f"{rows_where(bad)}: snapshot layout version {got}; this simbackend reads version {LAYOUT_VERSION}"
            )
        bad = head[:, 2] != want[2]
        if bool(bad.any()):
            code = describe_snapshot(t[int(np.flatnonzero(bad.numpy())[0])]).backend_code
            maker = _backend_named(code)
            raise SnapshotMismatchError(
                f"{rows_where(bad)}: made by {f'backend {maker!r}' if maker else 'another backend'}, not"
                f" {self.sim.name!r}; a snapshot holds one engine's own state: move states between engines with"
                " set_state(qpos, qvel) or set_named_state"
            )
        bad = (head[:, 3] != want[3]) | (head[:, 4] != want[4])
        if bool(bad.any()):
            fp = describe_snapshot(t[int(np.flatnonzero(bad.numpy())[0])]).fingerprint
            raise SnapshotMismatchError(
                f"{rows_where(bad)}: made from another model (fingerprint {fp or '?'});"
                f" this backend's model is {self.info.fingerprint}"
            )
        if t.shape[1] != L.width or bool((head[:, 5] != want[5]).any()):
            raise InputShapeError("state", (n, L.width), tuple(t.shape))
        return t

    # ------------------------------------------------------------------
    # named states
    # ------------------------------------------------------------------
    def named(self, ids: np.ndarray) -> NamedState:
        """The :class:`~simbackend.state.NamedState` of validated host ``ids``."""
        sim, info = self.sim, self.info
        dev = sim.device
        rows = torch.as_tensor(ids, device=dev)
        bodies = np.arange(1, info.nbody)
        qpos, qvel = sim.get_qpos()[rows], sim.get_qvel()[rows]
        ctrl = self.book.clamped_ctrl(rows)
        params = {name: torch.as_tensor(np.array(self.dr.table_rows(name, ids)), device=dev) for name in FIELDS}
        return NamedState(
            time=self.book.time[rows].clone(),
            body_names=tuple(info.body_names[1:]),
            body_pos=sim.get_body_pos_w(bodies)[rows],
            body_quat=sim.get_body_quat_w(bodies)[rows],
            body_lin_vel=sim.get_body_lin_vel_w(bodies)[rows],
            body_ang_vel=sim.get_body_ang_vel_w(bodies)[rows],
            joint_pos={
                j: qpos[:, torch.as_tensor(joint_columns(info, k, False), device=dev)]
                for k, j in enumerate(info.joint_names)
            },
            joint_vel={
                j: qvel[:, torch.as_tensor(joint_columns(info, k, True), device=dev)]
                for k, j in enumerate(info.joint_names)
            },
            actuator_ctrl={a: ctrl[:, k] for k, a in enumerate(info.actuator_names)},
            params=params,
            fingerprint=info.fingerprint,
        )

    def set_named(self, ids: np.ndarray, state: Any, params: Any) -> np.ndarray:
        """Import a named state into validated host ``ids`` (see ``SimBackend.set_named_state``);
        returns the sorted ids written."""
        if not isinstance(state, NamedState):
            raise ArgumentTypeError(
                f"state: expected a NamedState, got {type(state).__name__} (NamedState.from_dict reads a dict)"
            )
        if not isinstance(params, bool):
            raise ArgumentTypeError(f"params: expected a bool, got {type(params).__name__}")
        info, n = self.info, ids.size
        if state.num_envs != n:
            raise InputShapeError("state (rows)", (n,), (state.num_envs,))
        for kind, given, known in (
            ("joint", state.joint_names, info.joint_names),
            ("actuator", state.actuator_names, info.actuator_names),
        ):
            for name in given:
                if name not in known:
                    raise UnknownNameError(kind, name, known)
            missing = [k for k in known if k not in set(given)]
            if missing:
                raise InvalidArgumentError(
                    f"state: no {kind} values for {missing[:5]}; a named state must name every {kind} of the model"
                )
        qpos = torch.zeros((n, info.nq), dtype=torch.float64)
        qvel = torch.zeros((n, info.nv), dtype=torch.float64)
        for k, j in enumerate(info.joint_names):
            for table, out, velocity, what in (
                (state.joint_pos, qpos, False, "joint_pos"),
                (state.joint_vel, qvel, True, "joint_vel"),
            ):
                cols = joint_columns(info, k, velocity)
                v = table[j].detach().to("cpu", torch.float64).reshape(n, -1)
                if v.shape[1] != cols.size:
                    t = int(info.joint_type[k])
                    kind = "free" if t == JOINT_FREE else "ball" if t == JOINT_BALL else "hinge/slide"
                    raise InputShapeError(f"state.{what}[{j!r}] ({kind} joint)", (n, cols.size), tuple(v.shape))
                out[:, torch.as_tensor(cols)] = v
        time = state.time.detach().to("cpu", torch.float64).reshape(-1)
        self.check_time(ids, time, "state.time")
        ctrl = (
            torch.stack(
                [state.actuator_ctrl[a].detach().to("cpu", torch.float64).reshape(n) for a in info.actuator_names], 1
            )
            if info.nu
            else torch.zeros((n, 0), dtype=torch.float64)
        )
        if not bool(torch.isfinite(ctrl).all()):
            raise NonFiniteError("state.actuator_ctrl", ids[(~torch.isfinite(ctrl).all(1)).numpy()])
        big = V.rows_above(ctrl, V.MAX_REAL_INPUT)  # step's bound on ctrl: float32 would hold inf
        if bool(big.any()):
            raise ValueRangeError("state.actuator_ctrl", ids[big.numpy()], V.MAX_REAL_INPUT)
        prepared = Prepared(ids=np.sort(ids))
        if params and state.params:
            unknown = sorted(set(state.params) - set(FIELDS))
            if unknown:
                raise UnknownNameError("per-env parameter", unknown[0], FIELDS)
            order = np.argsort(ids, kind="stable")
            values = {k: v.detach().cpu().numpy().astype(np.float64)[order] for k, v in state.params.items()}
            prepared = self.dr.prepare_values(ids[order], values, "state.params")
        self.check_state(ids, qpos, qvel)  # at once, deferred checks or not: a refused row writes nothing
        self.sim.set_state(ids, qpos, qvel)  # notified once, by the caller
        self.dr.commit(prepared)
        dev = self.sim.device
        dev_ids = torch.as_tensor(ids, device=dev)
        self.book.time[dev_ids] = time.to(dev)
        self.book.ctrl[dev_ids] = ctrl.to(device=dev, dtype=self.book.dtype)
        return np.sort(ids)
