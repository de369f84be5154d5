"""The MuJoCo reference engine, on ``mujoco.batch.Batch`` (mujoco >= 4.0).

Every env is one row of the batch's integration state; ``step`` runs them on the
batch's thread pool. Design points (see docs/architecture.md):

* State arrays (qpos, qvel, ctrl, xfrc_applied) are live views of the rows;
  derived arrays (xpos, xquat, cvel, site_xpos, sensordata, ...) are bound
  lazily, on first use, and copied out by the batch after every call.
* Derived quantities are computed on demand: a call that changes the state
  (``step``, ``set_state``) marks them stale, and the first getter that needs
  one runs the position and velocity stages (``mjSTAGE_ACC`` if a sensor
  needs it) for every env at the current state. Every getter thus describes
  the current instant, never the state one substep back as plain ``mj_step``
  leaves it, and a caller who reads only qpos/qvel pays nothing for it.
* Divergence: ``step`` reports MuJoCo's own failures, its bad-state warnings
  (counted per call) and ``mujoco.batch.SimulationError``; the front end adds
  the contract's rule on the state rows. MuJoCo's automatic reset is disabled
  on the engine's copy of the model; ``revert`` gives envs back the whole
  integration state they had before the call. MuJoCo prints its warnings (and
  appends them to ``MUJOCO_LOG.TXT`` in the working directory).
* Body forces are given at the body frame origin; MuJoCo's ``xfrc_applied``
  acts at the centre of mass, so the torque is shifted by ``(xpos - xipos) x F``
  at the pose of every substep.
* Long calls step in chunks of :data:`STEP_CHUNK` substeps, so Ctrl-C
  (``KeyboardInterrupt``) is seen between chunks; the front end then reverts
  every env to its pre-call state.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import torch
from mujoco import batch as mjbatch

from simbackend.capabilities import Capabilities
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import InvalidArgumentError
from simbackend.math import cross, quat_apply, quat_mul, quat_normalize
from simbackend.model_info import JOINT_FREE
from simbackend.options import EngineOption, check_bool, check_choice, check_positive_float, optional

from .pipeline import (
    ALL_SENSOR_TYPES,
    DR_CAPABILITIES,
    DR_FIELDS,
    SETCONST_FIELDS,
    ActuatorTables,
    apply_options,
    compiled_model_fields,
    contact_probe_model,
    dr_index,
    fold_disabled_gravity,
)

_NONE = int(mujoco.mjtStage.mjSTAGE_NONE)
_VEL = int(mujoco.mjtStage.mjSTAGE_VEL)
_ACC = int(mujoco.mjtStage.mjSTAGE_ACC)
#: MuJoCo's reports of a failed state: bad qacc/qpos/qvel, and a ctrl too large to apply (which it zeroes)
_BAD_WARNINGS = np.array(
    [
        int(getattr(mujoco.mjtWarning, w))
        for w in ("mjWARN_BADQACC", "mjWARN_BADQPOS", "mjWARN_BADQVEL", "mjWARN_BADCTRL")
    ]
)
_XYZ, _WXYZ = np.arange(3), np.arange(4)
#: the same warnings as one slice of ``Batch.warning`` (adjacent in mjtWarning), so zeroing their counts is cheap
_BAD_SLICE = slice(int(_BAD_WARNINGS.min()), int(_BAD_WARNINGS.max()) + 1)
if _BAD_SLICE.stop - _BAD_SLICE.start != _BAD_WARNINGS.size:
    raise ImportError(f"mujoco {mujoco.__version__}: the bad-state warnings are no longer adjacent in mjtWarning")
#: substeps per call into the batch: a long ``step`` checks for Ctrl-C between chunks
STEP_CHUNK = 64
_INTEGRATORS = {
    "euler": "mjINT_EULER",
    "rk4": "mjINT_RK4",
    "implicit": "mjINT_IMPLICIT",
    "implicitfast": "mjINT_IMPLICITFAST",
}
_SOLVERS = {"pgs": "mjSOL_PGS", "cg": "mjSOL_CG", "newton": "mjSOL_NEWTON"}
#: a model whose static bodies hold at least this many geoms (a generated terrain's boxes: 1,124 on the
#: default rough terrain) runs a persistent batch with MuJoCo's sleeping on, so that static geoms are posed
#: once instead of at every step (docs/terrains.md measures it); below it, one MjData a thread is cheaper
PERSISTENT_STATIC_GEOMS = 100
_SLEEP = int(mujoco.mjtEnableBit.mjENBL_SLEEP)
_IPC = int(mujoco.mjtEnableBit.mjENBL_IPC)


def persistent_batch(model: Any, choice: bool | None) -> bool:
    """Whether the batch keeps one MjData per env (``mujoco.persistent``; ``None``: when the model enables
    sleep or IPC, which a shared MjData cannot run, or holds :data:`PERSISTENT_STATIC_GEOMS` static geoms),
    and make ``model`` fit: a persistent batch turns MuJoCo's sleeping on with every tree's policy "never".
    No tree ever sleeps, on this engine as on every other (sleep's bookkeeping is not part of the state
    that ``set_state``, snapshots and recordings restore); what sleeping gives is that static bodies' geoms
    are posed once, not at every step. Results are bit-identical either way. A shared batch clears the
    model's sleep flag, which then changes nothing, and refuses IPC."""
    flags = int(model.opt.enableflags)
    if choice is None:
        static = int(np.count_nonzero(np.asarray(model.body_weldid)[np.asarray(model.geom_bodyid)] == 0))
        choice = bool(flags & (_SLEEP | _IPC)) or static >= PERSISTENT_STATIC_GEOMS
    if choice:
        model.opt.enableflags = flags | _SLEEP
        model.tree_sleep_policy[:] = int(mujoco.mjtSleepPolicy.mjSLEEP_NEVER)
    elif flags & _IPC:
        raise InvalidArgumentError(
            "mujoco.persistent: False, but the model enables IPC, which needs a persistent batch"
        )
    else:
        model.opt.enableflags = flags & ~_SLEEP
    return choice


_CAPABILITIES = Capabilities(
    gpu=False,
    domain_randomization=DR_CAPABILITIES,
    actuator_kinds=frozenset({"motor", "position", "velocity", "other"}),
    sensor_types=ALL_SENSOR_TYPES,
    rendering=True,  # MuJoCo's renderer draws the compiled model (simbackend.playback)
    ray_casting=True,
    snapshot_restore=True,
    snapshot_exact=True,
    contact_forces=True,
)


class _Pair(Sequence):
    """The ``(a, b)`` a frame member returns, each computed when first read: a getter wanting positions
    (``body_pose(ids)[0]``) does not pay for the orientations. A sequence: unpacks, indexes and pickles (to
    a shard's caller) as a tuple."""

    __slots__ = ("_make", "_done")

    def __init__(self, first: Any, second: Any):
        self._make = (first, second)
        self._done: list[Any] = [None, None]

    def __getitem__(self, i: int) -> Any:
        v = self._done[i]
        if v is None:
            v = self._done[i] = self._make[i]()
        return v

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Any:
        return iter((self[0], self[1]))

    def __reduce__(self) -> Any:
        return (tuple, ((self[0], self[1]),))


class MuJoCoEngine(Engine):
    """MuJoCo reference engine: every env one row of a ``mujoco.batch.Batch``.

    Options: the common ones (:mod:`simbackend.options`): ``nthread`` (worker
    threads of the batch, 0 for all CPUs), ``solver_iterations``
    (``opt.iterations``), ``timestep`` (``opt.timestep``) and the model
    options; and the block ``mujoco={...}`` with ``integrator`` (euler, rk4,
    implicit, implicitfast), ``solver`` (pgs, cg, newton) and ``tolerance``
    (``opt.tolerance``), each replacing the model's value, and ``persistent``
    (:func:`persistent_batch`). Physics runs on the CPU; ``device="cuda"``
    places the returned tensors there.
    """

    name = "mujoco"
    devices = ("cpu", "cuda")
    distributions = ("mujoco",)
    options = {
        "integrator": EngineOption(None, check_choice(*_INTEGRATORS), "numerical integrator (model's if unset)"),
        "solver": EngineOption(None, check_choice(*_SOLVERS), "constraint solver (model's if unset)"),
        "tolerance": EngineOption(None, check_positive_float, "solver tolerance (model's if unset)"),
        "persistent": EngineOption(
            None, optional(check_bool), "one MjData per env (unset: for sleep, IPC or 100+ static geoms)"
        ),
    }

    def __init__(self, build: EngineBuild):
        super().__init__(build)
        opts = build.options
        # the batch keeps a pointer to the model: keep our own copy, immune to caller edits
        self.model = copy.copy(build.info.compiled)
        if opts.contact_sensing:
            self.model = contact_probe_model(self.model, build.source, opts.model)
        apply_options(self.model, opts, _INTEGRATORS, _SOLVERS)
        # MuJoCo would silently reset an env whose state blows up (even inside set_state's
        # forward pass); the contract instead reports it and restores the pre-call state.
        self.model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_AUTORESET)
        fold_disabled_gravity(self.model)  # ModelInfo.gravity is zero there: the field holds what is applied
        self.persistent = persistent_batch(self.model, opts.engine["persistent"])
        try:
            self.batch = mjbatch.Batch(self.model, self.num_envs, nthread=opts.nthread, persistent=self.persistent)
        except (MemoryError, ValueError, RuntimeError, TypeError, OverflowError) as e:
            raise InvalidArgumentError(
                f"num_envs: {self.num_envs} simulations of this model cannot be allocated ({' '.join(str(e).split())})"
            ) from e
        self.nthread = self.batch.nthread
        self._actuators = ActuatorTables(build.info, self.model, self.num_envs)
        b = self.batch
        # the model's own sensors decide (a contact probe is evaluated inside every substep anyway)
        self._stage = _ACC if (np.asarray(build.info.compiled.sensor_needstage) >= _ACC).any() else _VEL
        self._state = b.state
        self._derived: dict[str, np.ndarray] = {}
        self._stale = False  # derived fields describe an older state than the rows
        self._sensors_stale = False  # the acceleration stage's sensors do (the other derived fields are current)
        self._qpos = b.bind("qpos")
        self._qvel = b.bind("qvel")
        self._ctrl = b.bind("ctrl")
        self._xfrc = b.bind("xfrc_applied")
        self._warmstart = b.bind("qacc_warmstart")
        self._prev_state = np.empty_like(self._state)
        self._warn = b.warning
        self._bad_counts = b.warning[:, _BAD_SLICE, 1]  # a view: the per-call counts of the bad-state warnings
        self._ctrl_lo, self._ctrl_hi = self.info.actuator_ctrl_range.T.copy()
        self._site_quat_local = np.array(self.model.site_quat, dtype=np.float64)
        self._site_body = np.array(self.model.site_bodyid, dtype=np.int64)
        #: (nbody, 2) qpos and qvel address of the free joint of each free root body, -1 for the others
        self._free_root = np.full((self.info.nbody, 2), -1, np.int64)
        for j in np.flatnonzero(np.asarray(self.info.joint_type) == JOINT_FREE):
            body = int(self.info.joint_body[j])
            if self.info.body_parent[body] == 0:
                self._free_root[body] = (self.info.joint_qposadr[j], self.info.joint_dofadr[j])
        self._any_free_root = bool((self._free_root[:, 0] >= 0).any())
        self._free_cols: dict[bytes, tuple] = {}
        self._ray_geoms: Any = None
        self._saved = False  # whether _prev_state holds the pre-call state of the last step
        #: contact sensing: per-body constraint forces of the last substep (``cfrc_ext``; a later forward
        #: pass recomputes them at the state reached), and every env's contact reading ``(N, nbody, 3)``:
        #: taken from them at the end of each step (zero for envs written since), and the one from before
        #: the last step, which a revert gives back
        self._cfrc = b.bind("cfrc_ext") if opts.contact_sensing else None
        nread = self.info.nbody if opts.contact_sensing else 0
        self._reading = np.zeros((self.num_envs, nread, 3))
        self._reading_before = np.zeros_like(self._reading)
        b.reset(stage=int(mujoco.mjtStage.mjSTAGE_NONE))  # derived fields are computed when first read

    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    # -- derived fields, bound lazily -----------------------------------
    def _field(self, name: str) -> np.ndarray:
        """Derived field ``name``, (N, ...), current with the state rows."""
        arr = self._derived.get(name)
        if arr is None:
            # a field bound between calls holds zeros until the next call
            arr = self._derived[name] = self.batch.bind(name)
            self._stale = True
        if self._stale or (self._sensors_stale and name == "sensordata"):
            self._forward(None)
            self._stale = self._sensors_stale = False
        return arr

    def _forward(self, ids: np.ndarray | None) -> None:
        try:
            self.batch.forward(ids, stage=self._stage)
        except mjbatch.SimulationError:
            pass  # those envs' derived fields stay as they were; their state is untouched

    # -- state -------------------------------------------------------------
    def read_state(self) -> tuple[np.ndarray, np.ndarray]:
        return self._qpos, self._qvel

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        self._qpos[env_ids] = qpos.cpu().numpy()
        self._qvel[env_ids] = qvel.cpu().numpy()
        self._warmstart[env_ids] = 0.0
        self._reading[env_ids] = 0.0
        if self._derived and not self._stale:
            self._forward(env_ids)  # the other envs' derived fields are current: keep them

    # -- frames ------------------------------------------------------------
    # A body on a free joint hung from the world moves with that joint: its pose and velocity are the
    # joint's qpos/qvel (MuJoCo's kinematics copies them). While the derived fields are stale (after a
    # step), such bodies are read from the state rows, with no forward pass: a task reading only a
    # floating base's pose and velocity pays nothing for the kinematics of the rest.
    def _free_rows(self, ids: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """If every one of bodies ``ids`` is a free root body and the derived fields are stale: the qpos
        columns of their positions ``(B, 3)`` and quaternions ``(B, 4)``, and the qvel columns of their
        linear and angular velocities ``(B, 3)`` each; else ``None``. Kept per ids (a task reads the same
        bodies every step)."""
        if not self._stale or not self._any_free_root or not ids.size:
            return None
        key = ids.tobytes()
        cols = self._free_cols.get(key)
        if cols is None:
            adr = self._free_root[ids]
            if (adr[:, 0] < 0).any():
                cols = ()
            else:
                q, v = adr[:, 0][:, None], adr[:, 1][:, None]
                cols = (q + _XYZ, q + 3 + _WXYZ, v + _XYZ, v + 3 + _XYZ)
            if len(self._free_cols) >= 64:
                self._free_cols.clear()
            self._free_cols[key] = cols
        return cols or None

    def body_pose(self, ids: np.ndarray) -> Any:
        free = self._free_rows(ids)
        if free is not None:
            pos, quat = free[0], free[1]
            return _Pair(lambda: self._qpos[:, pos], lambda: quat_normalize(self._qpos[:, quat]))
        return _Pair(lambda: self._field("xpos")[:, ids], lambda: self._field("xquat")[:, ids])

    def body_velocity(self, ids: np.ndarray) -> Any:
        """World velocities of the body frame origins: MuJoCo's ``cvel`` is ``[ang, lin]`` at the subtree
        centre of mass of each body's root; shifted to the frame origin."""
        free = self._free_rows(ids)
        if free is not None:
            quat, lin, ang = free[1], free[2], free[3]
            return _Pair(
                lambda: self._qvel[:, lin],
                lambda: quat_apply(quat_normalize(self._qpos[:, quat]), self._qvel[:, ang]),
            )
        cvel = self._field("cvel")[:, ids]
        com = self._field("subtree_com")[:, self.info.body_root[ids]]
        ang = cvel[..., :3]
        return cvel[..., 3:] + cross(ang, self._field("xpos")[:, ids] - com), ang

    def site_pose(self, ids: np.ndarray) -> Any:
        return _Pair(
            lambda: self._field("site_xpos")[:, ids],
            lambda: quat_mul(self._field("xquat")[:, self._site_body[ids]], self._site_quat_local[ids]),
        )

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        point = self._field("site_xpos")[:, site_id]
        jacp, jacr = self.batch.jac(int(self._site_body[site_id]), point)
        return jacp[:, :, cols], jacr[:, :, cols]

    def contact_forces(self, body_ids: np.ndarray) -> np.ndarray:
        """The reading :meth:`_take_reading` took at the end of the last step."""
        assert self._cfrc is not None  # the front end calls this only with contact_sensing
        return self._reading[:, body_ids]

    def _take_reading(self, applied: tuple[np.ndarray, np.ndarray] | None) -> None:
        """Every env's contact reading from ``cfrc_ext``'s force part (world frame; MuJoCo fills it in every
        substep for the contact probe, :func:`.pipeline.contact_probe_model`), less the body forces
        ``applied`` ``(bodies, (N, B, 3))`` in the last substep; the world body reads zero (every contact's
        other side). Taken when the step ends: a forward pass a getter runs later recomputes ``cfrc_ext``
        at the state reached, without the applied forces."""
        assert self._cfrc is not None
        np.copyto(self._reading, self._cfrc[:, :, 3:])
        if applied is not None:
            bodies, force = applied
            self._reading[:, bodies] -= force
        self._reading[:, 0] = 0.0

    def sensor(self, sensor_id: int) -> np.ndarray:
        adr, dim = int(self.info.sensor_adr[sensor_id]), int(self.info.sensor_dim[sensor_id])
        return self._field("sensordata")[:, adr : adr + dim]

    # -- domain randomization: per-env model fields through Batch.expand --------
    def write_params(self, env_ids: np.ndarray, values: Any) -> None:
        b, info = self.batch, self.info
        if self._actuators.update(env_ids, values):  # gains and strength, composed (see ActuatorTables)
            force_range = b.expand("actuator_forcerange") if "actuator_strength" in self._actuators.tables else None
            self._actuators.write(b.expand("actuator_gainprm"), b.expand("actuator_biasprm"), force_range, env_ids)
        for name, rows in values.items():
            if name not in ("actuator_kp", "actuator_kv", "actuator_strength"):
                b.expand(DR_FIELDS[name])[dr_index(name, env_ids)] = rows
        if "body_com" in values:
            # a body compiled as "simple" has its centre of mass at its frame; one that moves off it no longer is
            moved = np.flatnonzero((values["body_com"] != info.body_com).any(axis=(0, 2)))
            if moved.size:
                b.expand("body_simple")[np.ix_(env_ids, moved)] = 0
                b.expand("body_sameframe")[np.ix_(env_ids, moved)] = 0
        if SETCONST_FIELDS.intersection(values):
            # derived constants (body_subtreemass, dof_invweight0, ...) follow the new inertias
            b.set_const(env_ids)
        self._stale = True

    def read_params(self, field: str) -> Any:
        b = self.batch
        if field in ("actuator_kp", "actuator_kv", "actuator_strength"):
            return self._actuators.read(field)
        held = b.expanded(DR_FIELDS[field])
        return None if held is None else held[dr_index(field, slice(None))]

    def model_fields(self) -> dict[str, np.ndarray]:
        """The compiled model's physical fields (see :meth:`simbackend.contract.SimBackend.model_fields`)."""
        return compiled_model_fields(self.model, self.info)

    def cast_rays(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> np.ndarray:
        """``Batch.ray`` from the state rows, corrected to see exactly the collision geoms (see .rays)."""
        from .rays import RayGeoms

        if self._ray_geoms is None:
            self._ray_geoms = RayGeoms(self.model, self.batch)
        return self._ray_geoms.cast(
            self.batch.ray,
            origins.cpu().numpy().astype(np.float64),
            directions.cpu().numpy().astype(np.float64),
            exclude_body,
        )

    # -- snapshots: the batch's integration state rows ---------------------------
    @property
    def state_width(self) -> int:
        return int(self.batch.nstate)

    def _state_columns(self, name: str) -> slice:
        """Columns of state field ``name`` (``qpos``, ``qvel``, ...) in an integration state row."""
        view = {"qpos": self._qpos, "qvel": self._qvel}[name]
        start = (view.ctypes.data - self._state.ctypes.data) // self._state.itemsize
        return slice(start, start + view.shape[1])

    def save_state(self, env_ids: np.ndarray) -> np.ndarray:
        """Every field MuJoCo integrates (mjSTATE_INTEGRATION: time, qpos, qvel, act, warm start,
        ctrl, applied forces, mocap, ...), as the batch holds them."""
        return self._state[env_ids].copy()

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        r = rows.cpu().numpy()
        return r[:, self._state_columns("qpos")], r[:, self._state_columns("qvel")]

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        self._state[env_ids] = rows.cpu().numpy()
        self._reading[env_ids] = 0.0
        if self._derived and not self._stale:
            self._forward(env_ids)  # the other envs' derived fields are current: keep them

    # -- stepping ------------------------------------------------------------
    def _write_xfrc(self, bodies: np.ndarray, force: np.ndarray, torque: np.ndarray) -> None:
        """Shift origin forces ``(N, B, 3)`` to MuJoCo's centre-of-mass convention, at the current pose."""
        lever = self._field("xpos")[:, bodies] - self._field("xipos")[:, bodies]
        self._xfrc[:, bodies, :3] = force
        self._xfrc[:, bodies, 3:] = torque + cross(lever, force)

    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> np.ndarray:
        self._saved = False  # a step interrupted before the copy below changed no state: nothing to revert
        np.copyto(self._prev_state, self._state)  # before the new controls: a revert restores the old ones too
        np.copyto(self._reading_before, self._reading)  # and the contact readings
        self._saved = True
        # clamped here as the contract says, so MuJoCo's own check sees only unlimited controls
        c = ctrl.numpy() if ctrl.device.type == "cpu" else ctrl.cpu().numpy()
        np.minimum(np.maximum(c, self._ctrl_lo, out=self._ctrl), self._ctrl_hi, out=self._ctrl)
        bad: np.ndarray | None = None
        posed = not self._stale  # the derived fields hold the pose the first substep starts from
        self._stale = True
        applied: tuple[np.ndarray, np.ndarray] | None = None
        # a persistent batch that a caller reads derived fields from computes them at the end of the substep
        # before a read, and its next step continues from there: the forward pass a read would run is then
        # free (up to the velocity stage with contact sensing: the acceleration stage would overwrite the last
        # substep's forces, cfrc_ext, which the reading takes; sensors of that stage wait for a read)
        eager = _NONE
        if self.persistent and (self._derived or forces is not None):
            eager = _VEL if self._cfrc is not None else self._stage
        if forces is not None:
            eager = min(eager, _VEL)  # the acceleration stage would see the forces, which the step then clears
            b = forces.bodies
            force, torque = forces.force.cpu().numpy(), forces.torque.cpu().numpy()
            self._stale = not posed  # nothing has moved yet: the first lever arm needs no forward pass
            try:  # the lever arm moves with the body: re-shift at the pose of every substep (read: xpos, xipos)
                for _ in range(nsteps):
                    self._write_xfrc(b, force, torque)
                    bad = self._advance(1, bad, eager)
                    self._stale = eager == _NONE or bad is not None
            finally:
                self._xfrc[:, b] = 0.0
            applied = (b, force)
        else:
            left = nsteps
            while left:
                chunk = min(left, STEP_CHUNK)
                left -= chunk
                bad = self._advance(chunk, bad, eager if not left else _NONE)
            self._stale = eager == _NONE or bad is not None
        self._sensors_stale = eager < self._stage
        if self._cfrc is not None:
            self._take_reading(applied)
        return bad

    def _advance(self, nsteps: int, bad: np.ndarray | None, stage: int = _NONE) -> np.ndarray | None:
        """One call into the batch (then the forward stages up to ``stage`` at the new state); returns
        ``bad`` (``None``: no env so far) with the envs MuJoCo failed or warned about added."""
        counts = self._bad_counts
        counts[...] = 0  # the batch counts warnings per call from here
        try:
            self.batch.step(nstep=nsteps, stage=stage)
        except mjbatch.SimulationError as e:
            failed = np.zeros(self.num_envs, dtype=bool)
            failed[np.asarray(e.ids)] = True
            bad = failed if bad is None else bad | failed
        if counts.any():
            warned = (counts > 0).reshape(self.num_envs, -1).any(axis=1)
            bad = warned if bad is None else bad | warned
        return bad

    def revert(self, envs: torch.Tensor) -> None:
        if not self._saved:
            return
        mask = envs.cpu().numpy()
        if mask.all():
            self._state[...] = self._prev_state
        else:
            ids = np.flatnonzero(mask)
            self._state[ids] = self._prev_state[ids]
        self._reading[mask] = self._reading_before[mask]  # the reading from before the step, as the state
        self._stale = True

    def close(self) -> None:
        for k in (
            "batch",
            "_state",
            "_qpos",
            "_qvel",
            "_ctrl",
            "_xfrc",
            "_warmstart",
            "_prev_state",
            "_warn",
            "_bad_counts",
            "_derived",
            "_ray_geoms",
            "_reading",
            "_reading_before",
        ):
            self.__dict__.pop(k, None)
