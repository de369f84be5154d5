"""The MuJoCo reference backend, on ``mujoco.batch.Batch`` (mujoco >= 4.0).

Every env is one row of the batch's integration state; ``step`` runs them on the
batch's thread pool. Design points (see docs/ARCHITECTURE.md):

* State arrays (qpos, qvel, ctrl, xfrc_applied) are live views of the rows;
  derived arrays (xpos, xquat, cvel, site_xpos, sensordata, ...) are bound
  lazily, on first use, and copied out by the batch after every call.
* Derived quantities are computed on demand: a call that changes the state
  (``step``, ``set_state``) marks them stale, and the first getter that needs
  one runs the position and velocity stages (``mjSTAGE_ACC`` if a sensor
  needs it) for every env at the current state. Every getter thus describes
  the current instant, never the state one substep back as plain ``mj_step``
  leaves it, and a caller who reads only qpos/qvel pays nothing for it.
* Divergence: the contract's rule (:mod:`simbackend.divergence`) on the state
  rows after the call, plus MuJoCo's own reports: its bad-state warnings
  (counted per call) and ``mujoco.batch.SimulationError``. MuJoCo's automatic
  reset is disabled on the backend's copy of the model; diverged envs get back
  the state they had before the call. MuJoCo prints its warnings (and appends
  them to ``MUJOCO_LOG.TXT`` in the working directory).
* Body forces are given at the body frame origin; MuJoCo's ``xfrc_applied``
  acts at the centre of mass, so the torque is shifted by ``(xpos - xipos) x F``
  at the pose of every substep.
* Long calls step in chunks of :data:`STEP_CHUNK` substeps, so Ctrl-C
  (``KeyboardInterrupt``) is seen between chunks; an interrupted call restores
  every env's pre-call state.
"""

from __future__ import annotations

import copy
from typing import Any

import mujoco
import numpy as np
import torch
from mujoco import batch as mjbatch

from simbackend.capabilities import Capabilities
from simbackend.contract import SimBackend
from simbackend.divergence import diverged_rows
from simbackend.errors import InvalidArgumentError
from simbackend.math import cross, quat_apply, quat_mul, quat_normalize, quat_to_matrix
from simbackend.models import compile_model, model_info
from simbackend.options import EngineOption, check_choice, check_positive_float

_VEL = int(mujoco.mjtStage.mjSTAGE_VEL)
_ACC = int(mujoco.mjtStage.mjSTAGE_ACC)
#: MuJoCo's reports of a failed state: bad qacc/qpos/qvel, and a ctrl too large to apply (which it zeroes)
_BAD_WARNINGS = np.array([int(getattr(mujoco.mjtWarning, w)) for w in
                          ("mjWARN_BADQACC", "mjWARN_BADQPOS", "mjWARN_BADQVEL", "mjWARN_BADCTRL")])
_ALL_SENSOR_TYPES = frozenset(
    name[len("mjSENS_"):].lower()
    for name in mujoco.mjtSensor.__members__
    if name.startswith("mjSENS_") and name not in ("mjSENS_USER", "mjSENS_PLUGIN")
)
#: substeps per call into the batch: a long ``step`` checks for Ctrl-C between chunks
STEP_CHUNK = 64
_INTEGRATORS = {"euler": "mjINT_EULER", "rk4": "mjINT_RK4", "implicit": "mjINT_IMPLICIT",
                "implicitfast": "mjINT_IMPLICITFAST"}
_SOLVERS = {"pgs": "mjSOL_PGS", "cg": "mjSOL_CG", "newton": "mjSOL_NEWTON"}
#: the contract's per-env model fields -> MuJoCo's model fields (actuator gains: gainprm/biasprm)
_DR_FIELDS = {"body_mass": "body_mass", "body_com": "body_ipos", "body_inertia": "body_inertia",
              "geom_friction": "geom_friction", "dof_damping": "dof_damping", "dof_armature": "dof_armature",
              "dof_frictionloss": "dof_frictionloss", "gravity": "opt.gravity"}
#: fields whose derived constants mj_setConst computes
_SETCONST_FIELDS = frozenset({"body_mass", "body_com", "body_inertia", "dof_armature"})
_DR_TERMS = ("body_mass", "body_com", "body_inertia", "geom_friction", "actuator_kp", "actuator_kv",
             "joint_damping", "joint_armature", "joint_frictionloss", "gravity")
_CAPABILITIES = Capabilities(
    gpu=False,
    domain_randomization=frozenset(f"{t}:{p}" for t in _DR_TERMS for p in ("init", "reset", "interval")),
    actuator_kinds=frozenset({"motor", "position", "velocity", "other"}),
    sensor_types=_ALL_SENSOR_TYPES,
    rendering=True,  # MuJoCo's renderer draws the compiled model (simbackend.playback)
    ray_casting=True,
    snapshot_restore=True,
    snapshot_exact=True,
)


class MuJoCoBackend(SimBackend):
    """MuJoCo reference backend.

    Args:
        model: MJCF/URDF path, ``mujoco.MjSpec``, ``mujoco.MjModel`` or built-in name.
        num_envs: number of simulations N.
        device: torch device of returned tensors (physics runs on the CPU);
            default ``"cpu"``.
        seed: seed of the backend's random streams.
        **options: the common options (:mod:`simbackend.options`): ``nthread``
            (worker threads of the batch, 0 for all CPUs), ``solver_iterations``
            (``opt.iterations``), ``timestep`` (``opt.timestep``) and the model
            options; and the block ``mujoco={...}`` with ``integrator``
            (euler, rk4, implicit, implicitfast), ``solver`` (pgs, cg, newton) and
            ``tolerance`` (``opt.tolerance``), each replacing the model's value.
    """

    name = "mujoco"
    engine_options = {
        "integrator": EngineOption(None, check_choice(*_INTEGRATORS), "numerical integrator (model's if unset)"),
        "solver": EngineOption(None, check_choice(*_SOLVERS), "constraint solver (model's if unset)"),
        "tolerance": EngineOption(None, check_positive_float, "solver tolerance (model's if unset)"),
    }

    def __init__(self, model: Any, num_envs: int, *, device: Any = None, seed: int = 0, **options: Any):
        opts = self.parse_options(options)
        device = self.resolve_device(device, allowed=("cpu", "cuda"))
        m = compile_model(model, **opts.model)
        # the batch keeps a pointer to the model: keep our own copy, immune to caller edits
        self.model = copy.copy(m)
        self._apply_options(opts)
        # MuJoCo would silently reset an env whose state blows up (even inside set_state's
        # forward pass); the contract instead reports it and restores the pre-call state.
        self.model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_AUTORESET)
        super().__init__(model_info(self.model), num_envs, device=device, seed=seed)
        try:
            self.batch = mjbatch.Batch(self.model, self.num_envs, nthread=opts.nthread)  # 0: all CPUs
        except (MemoryError, ValueError, RuntimeError, TypeError, OverflowError) as e:
            raise InvalidArgumentError(
                f"num_envs: {self.num_envs} simulations of this model cannot be allocated ({' '.join(str(e).split())})"
            ) from e
        self._nthread = self.batch.nthread
        b = self.batch
        self._stage = _ACC if (np.asarray(self.model.sensor_needstage) >= _ACC).any() else _VEL
        self._state = b.state
        self._derived: dict[str, np.ndarray] = {}
        self._stale = False  # derived fields describe an older state than the rows
        j = self._info.base_free_joint
        self._base_free = None if j < 0 else (int(self._info.joint_qposadr[j]), int(self._info.joint_dofadr[j]))
        self._qpos = b.bind("qpos")
        self._qvel = b.bind("qvel")
        self._ctrl = b.bind("ctrl")
        self._xfrc = b.bind("xfrc_applied")
        self._warmstart = b.bind("qacc_warmstart")
        self._prev_state = np.empty_like(self._state)
        self._warn = b.warning
        self._ctrl_lo, self._ctrl_hi = self._info.actuator_ctrl_range.T.copy()
        self._site_quat_local = np.array(self.model.site_quat, dtype=np.float64)
        self._site_body = np.array(self.model.site_bodyid, dtype=np.int64)
        b.reset(stage=int(mujoco.mjtStage.mjSTAGE_NONE))  # derived fields are computed when first read

    # -- capabilities ----------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    @property
    def nthread(self) -> int:
        """Worker threads of the batch."""
        return self._nthread

    def _apply_options(self, opts: Any) -> None:
        """Write the common and ``mujoco={...}`` options into the backend's model copy."""
        o = self.model.opt
        if opts.solver_iterations is not None:
            o.iterations = opts.solver_iterations
        if opts.timestep is not None:
            o.timestep = opts.timestep
        e = opts.engine
        if e["integrator"] is not None:
            o.integrator = int(getattr(mujoco.mjtIntegrator, _INTEGRATORS[e["integrator"]]))
        if e["solver"] is not None:
            o.solver = int(getattr(mujoco.mjtSolver, _SOLVERS[e["solver"]]))
        if e["tolerance"] is not None:
            o.tolerance = e["tolerance"]

    # -- derived fields, bound lazily -----------------------------------
    def _field(self, name: str) -> np.ndarray:
        """Derived field ``name``, (N, ...), current with the state rows."""
        arr = self._derived.get(name)
        if arr is None:
            # a field bound between calls holds zeros until the next call
            arr = self._derived[name] = self.batch.bind(name)
            self._stale = True
        if self._stale:
            self._forward(None)
            self._stale = False
        return arr

    def _forward(self, ids: np.ndarray | None) -> None:
        try:
            self.batch.forward(ids, stage=self._stage)
        except mjbatch.SimulationError:
            pass  # those envs' derived fields stay as they were; their state is untouched

    # -- getters ----------------------------------------------------------
    def get_qpos(self) -> torch.Tensor:
        return self._out(self._qpos)

    def get_qvel(self) -> torch.Tensor:
        return self._out(self._qvel)

    def _state_rows(self, env_ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return self._out(self._qpos[env_ids]), self._out(self._qvel[env_ids])

    def get_dof_pos(self) -> torch.Tensor:
        return self._out(self._qpos[:, self._info.dof_qpos_index])

    def get_dof_vel(self) -> torch.Tensor:
        return self._out(self._qvel[:, self._info.dof_qvel_index])

    # A floating base's pose and velocity are its free joint's qpos/qvel (MuJoCo's kinematics copies
    # them), so these read the state rows and need no deferred stages.
    def get_base_pos(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_pos()
        q = self._base_free[0]
        return self._out(self._qpos[:, q : q + 3])

    def get_base_quat(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_quat()
        q = self._base_free[0]
        return self._out(quat_normalize(self._qpos[:, q + 3 : q + 7]))

    def get_base_lin_vel(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_lin_vel()
        v = self._base_free[1]
        return self._out(self._qvel[:, v : v + 3])

    def get_base_ang_vel(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_ang_vel()
        q, v = self._base_free
        return self._out(quat_apply(quat_normalize(self._qpos[:, q + 3 : q + 7]), self._qvel[:, v + 3 : v + 6]))

    def _body_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._field("xpos")[:, ids])

    def _body_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._field("xquat")[:, ids])

    def _body_vel_w(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ang, lin) world velocities of the body frame origins, float64."""
        cvel = self._field("cvel")[:, ids]                       # (N, B, 6): [ang, lin] at subtree com of root
        com = self._field("subtree_com")[:, self._info.body_root[ids]]
        offset = self._field("xpos")[:, ids] - com
        ang = cvel[..., :3]
        return ang, cvel[..., 3:] + cross(ang, offset)

    def _body_lin_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._body_vel_w(ids)[1])

    def _body_ang_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._field("cvel")[:, ids, :3])

    def _site_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._field("site_xpos")[:, ids])

    def _site_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        body_q = self._field("xquat")[:, self._site_body[ids]]
        return self._out(quat_mul(body_q, self._site_quat_local[ids]))

    def _sensor_data(self, sensor_id: int) -> torch.Tensor:
        adr, dim = int(self._info.sensor_adr[sensor_id]), int(self._info.sensor_dim[sensor_id])
        return self._out(self._field("sensordata")[:, adr : adr + dim])

    # -- domain randomization: per-env model fields through Batch.expand --------
    def _write_env_params(self, env_ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        b, info = self.batch, self._info
        for name, rows in values.items():
            if name in ("actuator_kp", "actuator_kv"):
                gain, bias = b.expand("actuator_gainprm"), b.expand("actuator_biasprm")
                for a, kind in enumerate(info.actuator_kind):
                    if name == "actuator_kp" and kind == "position":
                        gain[env_ids, a, 0] = rows[:, a]
                        bias[env_ids, a, 1] = -rows[:, a]
                    elif name == "actuator_kv" and kind == "position":
                        bias[env_ids, a, 2] = -rows[:, a]
                    elif name == "actuator_kv" and kind == "velocity":
                        gain[env_ids, a, 0] = rows[:, a]
                        bias[env_ids, a, 2] = -rows[:, a]
            else:
                b.expand(_DR_FIELDS[name])[env_ids] = rows
        if "body_com" in values:
            # a body compiled as "simple" has its centre of mass at its frame; one that moves off it no longer is
            moved = np.flatnonzero((values["body_com"] != self._info.body_com).any(axis=(0, 2)))
            if moved.size:
                b.expand("body_simple")[np.ix_(env_ids, moved)] = 0
                b.expand("body_sameframe")[np.ix_(env_ids, moved)] = 0
        if _SETCONST_FIELDS.intersection(values):
            # derived constants (body_subtreemass, dof_invweight0, ...) follow the new inertias
            b.set_const(env_ids)
        self._stale = True

    def _read_env_params(self, name: str) -> np.ndarray:
        b = self.batch
        if name in ("actuator_kp", "actuator_kv"):
            gain, bias = b.expanded("actuator_gainprm"), b.expanded("actuator_biasprm")
            if gain is None:
                return super()._read_env_params(name)
            out = np.zeros((self.num_envs, self._info.nu))
            for a, kind in enumerate(self._info.actuator_kind):
                if name == "actuator_kp" and kind == "position":
                    out[:, a] = gain[:, a, 0]
                elif name == "actuator_kv" and kind in ("position", "velocity"):
                    out[:, a] = -bias[:, a, 2]
            return out
        per_env = b.expanded(_DR_FIELDS[name])
        return super()._read_env_params(name) if per_env is None else per_env

    def model_fields(self) -> dict[str, np.ndarray]:
        """The compiled model's physical fields (see :meth:`SimBackend.model_fields`)."""
        self._check_open()
        m = self.model
        nbody = int(m.nbody)
        # body_inertia holds the principal moments of the inertia frame body_iquat (relative to the body frame)
        rot = quat_to_matrix(np.array(m.body_iquat, dtype=np.float64).reshape(nbody, 4))
        principal = np.array(m.body_inertia, dtype=np.float64).reshape(nbody, 3)
        inertia = rot @ (principal[:, :, None] * np.swapaxes(rot, 1, 2))
        force_range = np.array(m.actuator_forcerange, dtype=np.float64).reshape(m.nu, 2)
        force_range[~np.asarray(m.actuator_forcelimited, dtype=bool)] = (-np.inf, np.inf)
        return {
            "body_mass": np.array(m.body_mass, dtype=np.float64),
            "body_com": np.array(m.body_ipos, dtype=np.float64).reshape(nbody, 3),
            "body_inertia": 0.5 * (inertia + np.swapaxes(inertia, 1, 2)),
            "joint_range": self._info.joint_range.copy(),
            "actuator_ctrl_range": self._info.actuator_ctrl_range.copy(),
            "actuator_force_range": force_range,
            "timestep": np.array(m.opt.timestep, dtype=np.float64),
            "gravity": np.array(m.opt.gravity, dtype=np.float64),
        }

    def _ray_cast(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> np.ndarray:
        """``Batch.ray`` from the state rows, corrected to see exactly the collision geoms (see .rays)."""
        from .rays import RayGeoms

        geoms = self.__dict__.get("_ray_geoms") or self.__dict__.setdefault("_ray_geoms", RayGeoms(self.model, self.batch))
        return geoms.cast(self.batch, origins.cpu().numpy().astype(np.float64),
                          directions.cpu().numpy().astype(np.float64), exclude_body)

    def _site_jacobian_w(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        point = self._field("site_xpos")[:, site_id]
        jacp, jacr = self.batch.jac(int(self._site_body[site_id]), point)
        return self._out(jacp[:, :, cols]), self._out(jacr[:, :, cols])

    # -- mutation ----------------------------------------------------------
    def _set_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        self._qpos[env_ids] = qpos.cpu().numpy()
        self._qvel[env_ids] = qvel.cpu().numpy()
        self._warmstart[env_ids] = 0.0
        if self._derived and not self._stale:
            self._forward(env_ids)  # the other envs' derived fields are current: keep them

    # -- snapshots: the batch's integration state rows ---------------------------
    def _physics_state_width(self) -> int:
        return int(self.batch.nstate)

    def _state_columns(self, name: str) -> slice:
        """Columns of state field ``name`` (``qpos``, ``qvel``, ...) in an integration state row."""
        view = {"qpos": self._qpos, "qvel": self._qvel}[name]
        start = (view.ctypes.data - self._state.ctypes.data) // self._state.itemsize
        return slice(start, start + view.shape[1])

    def _get_physics_state(self, env_ids: np.ndarray) -> np.ndarray:
        """Every field MuJoCo integrates (mjSTATE_INTEGRATION: time, qpos, qvel, act, warm start,
        ctrl, applied forces, mocap, ...), as the batch holds them."""
        return self._state[env_ids].copy()

    def _check_physics_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        r = rows.cpu().numpy()
        self._check_snapshot_state(env_ids, r[:, self._state_columns("qpos")], r[:, self._state_columns("qvel")])

    def _set_physics_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        self._state[env_ids] = rows.cpu().numpy()
        if self._derived and not self._stale:
            self._forward(env_ids)  # the other envs' derived fields are current: keep them

    def _clear_body_forces(self) -> None:
        self._xfrc[:, self._force_bodies] = 0.0
        super()._clear_body_forces()

    def _write_xfrc(self, force: np.ndarray, torque: np.ndarray) -> None:
        """Shift pending origin forces ``(N, B, 3)`` to MuJoCo's centre-of-mass convention, at the current pose."""
        b = self._force_bodies
        lever = self._field("xpos")[:, b] - self._field("xipos")[:, b]
        self._xfrc[:, b, :3] = force
        self._xfrc[:, b, 3:] = torque + cross(lever, force)

    def _step(self, ctrl: torch.Tensor, nsteps: int, hold: Any = None) -> np.ndarray:
        # clamped here as the contract says, so MuJoCo's own check sees only unlimited controls
        np.clip(ctrl.cpu().numpy(), self._ctrl_lo, self._ctrl_hi, out=self._ctrl)
        np.copyto(self._prev_state, self._state)
        failed = np.zeros(self.num_envs, dtype=bool)
        warned = np.zeros(self.num_envs, dtype=bool)
        try:
            if self._force_bodies.size:
                b = self._force_bodies
                force, torque = self._force[:, b].cpu().numpy(), self._torque[:, b].cpu().numpy()
                # the lever arm moves with the body: re-shift at the pose of every substep
                for _ in range(nsteps):
                    self._write_xfrc(force, torque)
                    failed |= self._advance(1, warned)
                    self._stale = True
            else:
                left = nsteps
                while left:
                    chunk = min(left, STEP_CHUNK)
                    failed |= self._advance(chunk, warned)
                    left -= chunk
            diverged = failed | warned | diverged_rows(self._qpos, self._qvel)
            if diverged.any():
                ids = np.flatnonzero(diverged)
                self._state[ids] = self._prev_state[ids]
        except BaseException:
            # interrupted (Ctrl-C between chunks, even while judging) or failed: every env back at its pre-call state
            self._state[...] = self._prev_state
            self._stale = True
            raise
        self._stale = True
        return diverged

    def _advance(self, nsteps: int, warned: np.ndarray) -> np.ndarray:
        """One call into the batch; returns envs MuJoCo failed, adds envs it warned about to ``warned``."""
        failed = np.zeros(self.num_envs, dtype=bool)
        self._warn[:, _BAD_WARNINGS, 1] = 0  # the batch counts warnings per call from here
        try:
            self.batch.step(nstep=nsteps)
        except mjbatch.SimulationError as e:
            failed[np.asarray(e.ids)] = True
        warned |= (self._warn[:, _BAD_WARNINGS, 1] > 0).any(axis=1)
        return failed

    def _close(self) -> None:
        self.__dict__.pop("batch", None)
        for k in ("_state", "_qpos", "_qvel", "_ctrl", "_xfrc", "_warmstart", "_prev_state", "_warn"):
            self.__dict__.pop(k, None)
