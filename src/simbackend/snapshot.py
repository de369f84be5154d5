"""Snapshots and named states: save and restore the exact state of some envs.

:class:`SnapshotMixin` is part of :class:`~simbackend.contract.SimBackend`.

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
per-env parameters    every per-env model field of domain randomization,
                      flattened in :data:`simbackend.randomization.FIELDS` order
                      (masses, centres of mass, inertias, friction, gains,
                      damping, armature, frictionloss, gravity)
engine (k)            the engine's own state: on MuJoCo its integration state
                      (qpos, qvel, act, warm start, ...), on CPU PhysX its own
                      serialisation; opaque
====================  =====================================================

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

import weakref
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.divergence import MAX_QPOS, MAX_QVEL
from simbackend.errors import (
    ArgumentTypeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    SnapshotMismatchError,
    UnknownNameError,
    UnsupportedFeatureError,
    ValueRangeError,
)
from simbackend.model_info import JOINT_BALL, JOINT_FREE
from simbackend.randomization.apply import FIELDS, _Prepared
from simbackend.randomization.plan import TERM_KINDS
from simbackend.state import NamedState

#: "SBSNAP" as a 48-bit integer: marks a snapshot row (exact in float64)
MAGIC = 0x534253_4E4150
#: the column layout described in the module docstring
LAYOUT_VERSION = 1
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
    from simbackend.registry import available_backends

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
    fields: dict  # field name -> (slice, shape per env)
    engine: slice
    width: int

    @classmethod
    def of(cls, sim: Any, engine_width: int) -> "SnapshotLayout":
        info = sim.info
        col = HEADER_WIDTH
        parts = {}
        for name, size in (("time", 1), ("ctrl", info.nu), ("default_qpos", info.nq), ("force", info.nbody * 6),
                           ("force_left", info.nbody)):
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


class SnapshotMixin:
    """Time, controls, snapshots and named states: members of :class:`~simbackend.contract.SimBackend`."""

    # ------------------------------------------------------------------
    # time and controls
    # ------------------------------------------------------------------
    def get_time(self, env_ids: Any = None) -> torch.Tensor:
        """``(n,)`` float64 simulated time of envs ``env_ids`` (``None``: all N), s.

        Starts at 0; every ``step`` adds ``nsteps * physics_dt`` to the envs it
        advanced (a diverged env keeps its time with its state). ``set_state``
        leaves it; ``set_physics_state`` and ``set_named_state`` restore it.
        float64, unlike the contract's other reals: float32 cannot count 2 ms
        substeps past a few hours.
        """
        self._check_open()
        if env_ids is None:
            return self._time.clone()
        return self._time[self._row_index(env_ids)]

    def get_ctrl(self, env_ids: Any = None) -> torch.Tensor:
        """``(n, nu)`` float32 controls last applied to envs ``env_ids`` (``None``: all N), by ``step``
        or a pre-step control function, clamped to each ctrl range as the engine applied them;
        zeros before the first step."""
        self._check_open()
        lo, hi = self._ctrl_bounds()
        ctrl = self._last_ctrl if env_ids is None else self._last_ctrl[self._row_index(env_ids)]
        return torch.clamp(ctrl.to(torch.float64), lo, hi).to(torch.float32)

    def _row_index(self, env_ids: Any) -> torch.Tensor:
        """Validated env ids (any accepted form) as an index tensor on the device. An id tensor the
        backend made (``_id_tensor``) is validated once, until it is edited in place: a recorder
        passes the same one every step."""
        memo = self.__dict__.setdefault("_row_memo", {})
        if isinstance(env_ids, torch.Tensor):
            hit = memo.get(id(env_ids))
            if hit is not None and hit[0]() is env_ids and hit[1] == env_ids._version:
                return hit[2]
        index = torch.as_tensor(V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids), device=self._device)
        if isinstance(env_ids, torch.Tensor) and self._host_ids.lookup(env_ids) is not None:
            if len(memo) >= 64:
                memo.clear()
            memo[id(env_ids)] = (weakref.ref(env_ids), env_ids._version, index)
        return index

    def _ctrl_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        bounds = self._index_cache.get("ctrl_bounds")
        if bounds is None:
            r = torch.as_tensor(np.array(self._info.actuator_ctrl_range), dtype=torch.float64, device=self._device)
            bounds = self._index_cache["ctrl_bounds"] = torch.stack([r[:, 0], r[:, 1]])
        return bounds[0], bounds[1]

    def _state_rows(self, env_ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, nq)``, ``(n, nv)`` float32 qpos and qvel of validated host ``env_ids``, as
        ``get_qpos``/``get_qvel`` give them: for readers of a few rows every step (the recorder).
        Backends may override it with a cheaper path; the result must be bit-equal."""
        rows = torch.as_tensor(env_ids, device=self._device)
        return self.get_qpos()[rows], self.get_qvel()[rows]

    def _rows_now(self, env_ids: np.ndarray) -> tuple[np.ndarray, ...]:
        """Host copies of ``(time (n,), qpos (n, nq), qvel (n, nv), ctrl (n, nu))`` of validated host
        ``env_ids``, equal to ``get_time``/``get_qpos``/``get_qvel``/``get_ctrl``'s rows: the few
        rows a recorder reads every step, with the fewest tensor operations (they dominate its
        cost). Reads the device on a GPU backend."""
        qpos, qvel = self._state_rows(env_ids)
        bounds = self._index_cache.get("ctrl_bounds_host")
        if bounds is None:
            bounds = self._index_cache["ctrl_bounds_host"] = np.array(self._info.actuator_ctrl_range).T
        ctrl = np.clip(self._last_ctrl.cpu().numpy()[env_ids].astype(np.float64), bounds[0], bounds[1])
        return (self._time.cpu().numpy()[env_ids], qpos.cpu().numpy(), qvel.cpu().numpy(),
                ctrl.astype(np.float32))

    def _snapshot_init(self) -> None:
        try:
            self._time = torch.zeros(self.num_envs, dtype=torch.float64, device=self._device)
            self._last_ctrl = torch.zeros((self.num_envs, self._info.nu), dtype=self.hook_dtype, device=self._device)
        except (RuntimeError, MemoryError) as e:  # torch reports an impossible allocation as a RuntimeError
            raise InvalidArgumentError(f"num_envs: {self.num_envs} envs cannot be allocated"
                                       f" ({' '.join(str(e).split())[:160]})") from None
        self._snap_layout: Optional[SnapshotLayout] = None

    def _advance_time(self, seconds: float, diverged: torch.Tensor) -> None:
        """Add ``seconds`` to the envs not in ``diverged`` (``(N,)`` bool on the device)."""
        if self._defers_checks:  # a GPU backend: no host read of the mask
            self._time.add_((~diverged).to(torch.float64), alpha=seconds)
        elif bool(diverged.any()):
            self._time[~diverged] += seconds
        else:
            self._time += seconds

    # ------------------------------------------------------------------
    # snapshots
    # ------------------------------------------------------------------
    @property
    def snapshot_layout(self) -> SnapshotLayout:
        """The column layout of this backend's snapshot rows."""
        self._require("snapshot_restore")
        if self._snap_layout is None:
            self._snap_layout = SnapshotLayout.of(self, int(self._physics_state_width()))
        return self._snap_layout

    def get_physics_state(self, env_ids: Any = None) -> torch.Tensor:
        """``(n, S)`` float64 snapshots of envs ``env_ids`` (``None``: all), rows in the order given.

        Restoring a row with :meth:`set_physics_state` and stepping with the
        same controls reproduces the trajectory: bit for bit where the backend
        declares ``capabilities.snapshot_exact``, otherwise up to the engine's
        caches it cannot serialise (the backend's documentation gives the
        measured size). The layout is in :mod:`simbackend.snapshot`; float64
        so that nothing is rounded.
        """
        self._check_open()
        L = self.snapshot_layout
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        n, dev = ids.size, self._device
        out = torch.zeros((n, L.width), dtype=torch.float64, device=dev)
        if not n:
            return out
        rows = torch.as_tensor(ids, device=dev)
        out[:, :HEADER_WIDTH] = self._snapshot_header(L.width).to(dev)
        out[:, L.time] = self._time[rows, None]
        out[:, L.ctrl] = self.get_ctrl()[rows].to(torch.float64)
        default = self._dr_default_qpos
        out[:, L.default_qpos] = torch.as_tensor(
            np.tile(self._info.qpos0, (n, 1)) if default is None else default[ids], device=dev)
        if self._dr_force is not None:
            out[:, L.force] = torch.as_tensor(self._dr_force[ids].reshape(n, -1), device=dev)
            left = self._dr_force_left[ids]
            out[:, L.force_left] = torch.as_tensor(np.where(np.isinf(left), -1.0, left), device=dev)
        for name, (cols, shape) in L.fields.items():
            table = self._dr_values.get(name)
            values = (np.broadcast_to(self._dr_model_value(name), (n,) + shape) if table is None else table[ids])
            out[:, cols] = torch.as_tensor(np.array(values).reshape(n, -1), device=dev)
        out[:, L.engine] = torch.as_tensor(self._get_physics_state(ids), dtype=torch.float64).to(dev)
        return out

    def set_physics_state(self, env_ids: Any, state: Any) -> None:
        """Restore snapshots: row i of ``state`` ``(n, S)`` into env ``env_ids[i]``.

        Everything the snapshot holds is restored (state, time, controls,
        per-env parameters, held forces) and the getters describe it at once.
        Envs not named are untouched.

        Raises:
            SnapshotMismatchError: a row made by another backend, another model or
                another layout version (move states between engines with
                ``set_state`` or :meth:`set_named_state`).
            InputShapeError / InputDTypeError: not ``(n, S)`` float64.
            NonFiniteError: NaN or inf in a row (naming the env ids).
            ValueRangeError: a state the divergence rule would flag at once, or
                per-env parameters out of their physical bounds.
        """
        self._enter_mutation("set_physics_state")
        L = self.snapshot_layout
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        rows = self._snapshot_rows(state, ids.size, L)
        order = np.argsort(ids, kind="stable")
        ids, rows = ids[order], rows[torch.as_tensor(order)]
        n = ids.size
        if not n:
            return
        bad = ~torch.isfinite(rows).all(1)
        if bool(bad.any()):
            raise NonFiniteError("state", ids[bad.numpy()])
        prepared = self._snapshot_params(ids, {name: rows[:, cols].numpy().reshape((n,) + shape)
                                               for name, (cols, shape) in L.fields.items()}, "state")
        time = rows[:, L.time.start]
        if bool((time < 0).any()):
            raise ValueRangeError("state (time)", ids[(time < 0).numpy()], 0.0, problem="negative time")
        left = rows[:, L.force_left].numpy()
        if (left < -1).any() or ((left < 0) & (left != -1)).any():
            raise ValueRangeError("state (held force time)", ids[((left < 0) & (left != -1)).any(1)], 0.0,
                                  problem="held-force times that are neither >= 0 nor -1")
        dev = self._device
        engine_rows = rows[:, L.engine].to(dev)
        self._check_physics_state(ids, engine_rows)
        # everything is checked: write
        self._dr_commit(prepared)
        default = rows[:, L.default_qpos].numpy()
        if self._dr_default_qpos is not None or not (default == self._info.qpos0).all():
            if self._dr_default_qpos is None:
                self._dr_default_qpos = np.broadcast_to(self._info.qpos0, (self.num_envs, self.nq)).copy()
            self._dr_default_qpos[ids] = default
        force, left = rows[:, L.force].numpy().reshape(n, -1, 6), rows[:, L.force_left].numpy()
        if self._dr_force is not None or force.any():
            if self._dr_force is None:
                self._dr_force = np.zeros((self.num_envs, self._info.nbody, 6))
                self._dr_force_left = np.zeros((self.num_envs, self._info.nbody))
            self._dr_force[ids] = force
            self._dr_force_left[ids] = np.where(left == -1, np.inf, left)
        dev_ids = torch.as_tensor(ids, device=dev)
        self._time[dev_ids] = time.to(dev)
        self._last_ctrl[dev_ids] = rows[:, L.ctrl].to(device=dev, dtype=self.hook_dtype)
        self._set_physics_state(ids, engine_rows)
        self._notify_write(ids, "set_physics_state")

    def _snapshot_header(self, width: int) -> torch.Tensor:
        """``(6,)`` float64: the header of this backend's snapshot rows."""
        fp = self._info.fingerprint
        return torch.tensor([MAGIC, LAYOUT_VERSION, backend_code(self.name), int(fp[:8], 16), int(fp[8:], 16),
                             width], dtype=torch.float64)

    def _snapshot_rows(self, state: Any, n: int, L: SnapshotLayout) -> torch.Tensor:
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
        want = self._snapshot_header(L.width)
        head = t[:, :HEADER_WIDTH]

        def rows_where(bad: torch.Tensor) -> str:
            return f"state (rows {np.flatnonzero(bad.numpy())[:8].tolist()})"

        bad = head[:, 0] != want[0]
        if bool(bad.any()):
            raise SnapshotMismatchError(f"{rows_where(bad)}: not simbackend snapshots (no header);"
                                        " rows come from get_physics_state")
        bad = head[:, 1] != want[1]
        if bool(bad.any()):
            got = describe_snapshot(t[int(np.flatnonzero(bad.numpy())[0])]).layout_version
            raise SnapshotMismatchError(f"{rows_where(bad)}: snapshot layout version {got}; this simbackend reads"
                                        f" version {LAYOUT_VERSION}")
        bad = head[:, 2] != want[2]
        if bool(bad.any()):
            code = describe_snapshot(t[int(np.flatnonzero(bad.numpy())[0])]).backend_code
            maker = _backend_named(code)
            raise SnapshotMismatchError(
                f"{rows_where(bad)}: made by {f'backend {maker!r}' if maker else 'another backend'}, not"
                f" {self.name!r}; a snapshot holds one engine's own state: move states between engines with"
                " set_state(qpos, qvel) or set_named_state")
        bad = (head[:, 3] != want[3]) | (head[:, 4] != want[4])
        if bool(bad.any()):
            fp = describe_snapshot(t[int(np.flatnonzero(bad.numpy())[0])]).fingerprint
            raise SnapshotMismatchError(f"{rows_where(bad)}: made from another model (fingerprint {fp or '?'});"
                                        f" this backend's model is {self._info.fingerprint}")
        if t.shape[1] != L.width or bool((head[:, 5] != want[5]).any()):
            raise InputShapeError("state", (n, L.width), tuple(t.shape))
        return t

    def _snapshot_params(self, ids: np.ndarray, values: dict, argument: str) -> _Prepared:
        """The per-env fields of ``values`` (``(n, ...)`` each) that differ from what the envs hold,
        checked (bounds, backend support) and ready for ``_dr_commit``; nothing is written."""
        p = _Prepared(ids=ids)
        support = self._dr_support()
        for name, rows in values.items():
            rows = np.asarray(rows, np.float64)
            table = self._dr_values.get(name)
            current = (np.broadcast_to(self._dr_model_value(name), rows.shape) if table is None else table[ids])
            if rows.shape != current.shape:
                raise InputShapeError(f"{argument} ({name})", current.shape, rows.shape)
            if np.array_equal(rows, current):
                continue
            terms = [k for k, spec in TERM_KINDS.items() if spec.field == name]
            if not any(f"{k}:{phase}" in support for k in terms for phase in ("init", "reset", "interval")):
                raise UnsupportedFeatureError(self.name, f"per-env {name}",
                                              f"{argument} holds per-env values of {name} this backend cannot apply")
            p.fields[name] = rows.copy()
        self._dr_validate(p)
        return p

    # ------------------------------------------------------------------
    # named states
    # ------------------------------------------------------------------
    def get_named_state(self, env_ids: Any = None) -> NamedState:
        """The :class:`~simbackend.state.NamedState` of envs ``env_ids`` (``None``: all): every body,
        joint and actuator by name, the time and the per-env model parameters."""
        self._check_open()
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        rows = torch.as_tensor(ids, device=self._device)
        info = self._info
        bodies = np.arange(1, info.nbody)
        qpos, qvel = self.get_qpos()[rows], self.get_qvel()[rows]
        pos_cols = {j: self._joint_columns([j], velocity=False) for j in info.joint_names}
        vel_cols = {j: self._joint_columns([j], velocity=True) for j in info.joint_names}
        ctrl = self.get_ctrl()[rows]
        n = ids.size
        params = {}
        for name in FIELDS:
            table = self._dr_values.get(name)
            model = self._dr_model_value(name)
            values = np.broadcast_to(model, (n,) + model.shape) if table is None else table[ids]
            params[name] = torch.as_tensor(np.array(values), device=self._device)
        return NamedState(
            time=self._time[rows].clone(), body_names=tuple(info.body_names[1:]),
            body_pos=self._body_pos_w(bodies)[rows], body_quat=self._body_quat_w(bodies)[rows],
            body_lin_vel=self._body_lin_vel_w(bodies)[rows], body_ang_vel=self._body_ang_vel_w(bodies)[rows],
            joint_pos={j: qpos[:, torch.as_tensor(c, device=self._device)] for j, c in pos_cols.items()},
            joint_vel={j: qvel[:, torch.as_tensor(c, device=self._device)] for j, c in vel_cols.items()},
            actuator_ctrl={a: ctrl[:, k] for k, a in enumerate(info.actuator_names)},
            params=params, fingerprint=info.fingerprint,
        )

    def set_named_state(self, env_ids: Any, state: NamedState, *, params: bool = True) -> None:
        """Import a :class:`~simbackend.state.NamedState` into envs ``env_ids``, matching by name.

        The joints' positions and velocities become the envs' state (as
        ``set_state``: getters reflect it at once); time and controls are
        restored; with ``params``, the per-env model parameters the state
        carries are applied where they differ from what the envs hold (a
        backend that cannot apply one raises ``UnsupportedFeatureError``).
        Body poses are not inputs: they follow from the joints. The state must
        name exactly this model's joints and actuators (a state from another
        model raises ``UnknownNameError`` or ``InvalidArgumentError``).
        """
        self._enter_mutation("set_named_state")
        if not isinstance(state, NamedState):
            raise ArgumentTypeError(f"state: expected a NamedState, got {type(state).__name__}"
                                    " (NamedState.from_dict reads a dict)")
        if not isinstance(params, bool):
            raise ArgumentTypeError(f"params: expected a bool, got {type(params).__name__}")
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        info, n = self._info, ids.size
        if state.num_envs != n:
            raise InputShapeError("state (rows)", (n,), (state.num_envs,))
        for kind, given, known in (("joint", state.joint_names, info.joint_names),
                                   ("actuator", state.actuator_names, info.actuator_names)):
            for name in given:
                if name not in known:
                    raise UnknownNameError(kind, name, known)
            missing = [k for k in known if k not in set(given)]
            if missing:
                raise InvalidArgumentError(f"state: no {kind} values for {missing[:5]}; a named state must name"
                                           f" every {kind} of the model")
        qpos = torch.zeros((n, info.nq), dtype=torch.float64)
        qvel = torch.zeros((n, info.nv), dtype=torch.float64)
        for j in info.joint_names:
            for table, out, velocity, what in ((state.joint_pos, qpos, False, "joint_pos"),
                                               (state.joint_vel, qvel, True, "joint_vel")):
                cols = self._joint_columns([j], velocity=velocity)
                v = table[j].detach().to("cpu", torch.float64).reshape(n, -1)
                if v.shape[1] != cols.size:
                    t = int(info.joint_type[info.joint_names.index(j)])
                    kind = "free" if t == JOINT_FREE else "ball" if t == JOINT_BALL else "hinge/slide"
                    raise InputShapeError(f"state.{what}[{j!r}] ({kind} joint)", (n, cols.size), tuple(v.shape))
                out[:, torch.as_tensor(cols)] = v
        time = state.time.detach().to("cpu", torch.float64).reshape(-1)
        if not bool(torch.isfinite(time).all()) or bool((time < 0).any()):
            raise ValueRangeError("state.time", ids[(~torch.isfinite(time) | (time < 0)).numpy()], 0.0,
                                  problem="times that are not finite and >= 0")
        ctrl = torch.stack([state.actuator_ctrl[a].detach().to("cpu", torch.float64).reshape(n)
                            for a in info.actuator_names], 1) if info.nu else torch.zeros((n, 0), dtype=torch.float64)
        if not bool(torch.isfinite(ctrl).all()):
            raise NonFiniteError("state.actuator_ctrl", ids[(~torch.isfinite(ctrl).all(1)).numpy()])
        prepared = _Prepared(ids=np.sort(ids))
        if params and state.params:
            unknown = sorted(set(state.params) - set(FIELDS))
            if unknown:
                raise UnknownNameError("per-env parameter", unknown[0], FIELDS)
            order = np.argsort(ids, kind="stable")
            values = {k: v.detach().cpu().numpy().astype(np.float64)[order] for k, v in state.params.items()}
            prepared = self._snapshot_params(ids[order], values, "state.params")
        with self._quiet():  # one notification, for the whole import
            self.set_state(ids, qpos, qvel)  # validates the state before writing anything
        self._dr_commit(prepared)
        dev_ids = torch.as_tensor(ids, device=self._device)
        self._time[dev_ids] = time.to(self._device)
        self._last_ctrl[dev_ids] = ctrl.to(device=self._device, dtype=self.hook_dtype)
        self._notify_write(np.sort(ids), "set_named_state")

    # ------------------------------------------------------------------
    # backend hooks
    # ------------------------------------------------------------------
    def _physics_state_width(self) -> int:
        """Columns of the engine's block of a snapshot (backends declaring ``snapshot_restore``)."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")

    def _get_physics_state(self, env_ids: np.ndarray) -> Any:
        """``(n, k)`` float64 (numpy or tensor) engine state of sorted-or-not host ``env_ids``."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")

    def _check_physics_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        """Raise (naming the env ids) if engine rows ``(n, k)`` (finite, float64 on the device) cannot
        be restored: e.g. a state the divergence rule would flag at once. Writes nothing."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")

    def _check_snapshot_state(self, env_ids: np.ndarray, qpos: Any, qvel: Any) -> None:
        """For backends' :meth:`_check_physics_state`: the checks ``set_state`` applies (divergence
        bounds, zero quaternions) on a snapshot's ``qpos (n, nq)`` / ``qvel (n, nv)``."""
        dt = self.hook_dtype
        qpos = torch.as_tensor(qpos, dtype=dt, device=self._device)
        qvel = torch.as_tensor(qvel, dtype=dt, device=self._device)
        _, zero = self._normalised_quaternions(qpos)
        self._check_values(env_ids, [("state (qpos)", qpos, MAX_QPOS, None), ("state (qvel)", qvel, MAX_QVEL, None),
                                     ("state (qpos)", zero, "zero quaternion", None)])

    def _set_physics_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        """Restore checked engine rows ``(n, k)`` into sorted host ``env_ids``; make getters current.
        The per-env parameters are already restored (``_write_env_params``)."""
        raise UnsupportedFeatureError(self.name, "snapshot_restore")
