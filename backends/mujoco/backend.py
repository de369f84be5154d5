"""The MuJoCo reference backend, on ``mujoco.batch.Batch`` (mujoco >= 4.0).

Every env is one row of the batch's integration state; ``step`` runs them on the
batch's thread pool. Design points (see DESIGN.md):

* State arrays (qpos, qvel, ctrl, xfrc_applied) are live views of the rows;
  derived arrays (xpos, xquat, cvel, site_xpos, sensordata, ...) are bound
  lazily, on first use, and copied out by the batch after every call.
* Derived quantities are computed on demand: a call that changes the state
  (``step``, ``set_state``) marks them stale, and the first getter that needs
  one runs the position and velocity stages (``mjSTAGE_ACC`` if a sensor
  needs it) for every env at the current state. Every getter thus describes
  the current instant, never the state one substep back as plain ``mj_step``
  leaves it, and a caller who reads only qpos/qvel pays nothing for it.
* Divergence: MuJoCo's automatic reset is disabled on the backend's copy of
  the model; an env whose qpos/qvel/qacc become non-finite or huge raises a
  MuJoCo warning (counted per call), and ``mujoco.batch.SimulationError``
  names envs where MuJoCo raised. Both are reported in ``info["diverged"]``
  and those envs get back the state they had before the call. MuJoCo prints
  its warning (and appends it to ``MUJOCO_LOG.TXT`` in the working directory).
* Body forces are given at the body frame origin; MuJoCo's ``xfrc_applied``
  acts at the centre of mass, so the torque is shifted by ``(xpos - xipos) x F``
  before every substep.
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
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError
from simbackend.math import cross, quat_apply, quat_mul, quat_normalize, quat_to_matrix
from simbackend.models import compile_model, model_info

_VEL = int(mujoco.mjtStage.mjSTAGE_VEL)
_ACC = int(mujoco.mjtStage.mjSTAGE_ACC)
_BAD_WARNINGS = np.array(
    [int(mujoco.mjtWarning.mjWARN_BADQACC), int(mujoco.mjtWarning.mjWARN_BADQPOS), int(mujoco.mjtWarning.mjWARN_BADQVEL)]
)
_ALL_SENSOR_TYPES = frozenset(
    name[len("mjSENS_"):].lower()
    for name in mujoco.mjtSensor.__members__
    if name.startswith("mjSENS_") and name not in ("mjSENS_USER", "mjSENS_PLUGIN")
)
_OPTIONS = ("nthread",)
_CAPABILITIES = Capabilities(
    gpu=False,
    actuator_kinds=frozenset({"motor", "position", "velocity", "other"}),
    sensor_types=_ALL_SENSOR_TYPES,
    rendering=False,
)


class MuJoCoBackend(SimBackend):
    """MuJoCo reference backend.

    Args:
        model: MJCF/URDF path, ``mujoco.MjSpec``, ``mujoco.MjModel`` or built-in name.
        num_envs: number of simulations N.
        device: torch device of returned tensors (physics runs on the CPU);
            default ``"cpu"``.
        seed: seed of the backend's random streams.
        nthread: worker threads of the batch, 0 for all CPUs (default).
    """

    name = "mujoco"

    def __init__(self, model: Any, num_envs: int, *, device: Any = None, seed: int = 0, **options: Any):
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ArgumentTypeError(f"unknown option(s) for backend 'mujoco': {unknown}; accepted: {list(_OPTIONS)}")
        nthread = options.get("nthread", 0)
        if isinstance(nthread, bool) or not isinstance(nthread, int) or nthread < 0:
            raise InvalidArgumentError(f"nthread: expected an integer >= 0 (0: all CPUs), got {nthread!r}")
        device = torch.device("cpu" if device is None else device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise SimBackendError("device 'cuda' requested, but torch sees no CUDA device")
        m = compile_model(model)
        # the batch keeps a pointer to the model: keep our own copy, immune to caller edits
        self.model = copy.copy(m)
        # MuJoCo would silently reset an env whose state blows up (even inside set_state's
        # forward pass); the contract instead reports it and restores the pre-call state.
        self.model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_AUTORESET)
        super().__init__(model_info(self.model), num_envs, device=device, seed=seed)
        self.batch = mjbatch.Batch(self.model, self.num_envs, nthread=nthread)  # 0: all CPUs
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
        self._site_quat_local = np.array(self.model.site_quat, dtype=np.float64)
        self._site_body = np.array(self.model.site_bodyid, dtype=np.int64)
        b.reset(stage=int(mujoco.mjtStage.mjSTAGE_NONE))  # derived fields are computed when first read

    # -- capabilities ----------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    @property
    def nthread(self) -> int:
        return self.batch.nthread

    # -- derived fields, bound lazily -----------------------------------
    def _out(self, name: str) -> np.ndarray:
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
    def _t(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        return t if self._device.type == "cpu" else t.to(self._device)

    def get_qpos(self) -> torch.Tensor:
        return self._t(self._qpos)

    def get_qvel(self) -> torch.Tensor:
        return self._t(self._qvel)

    def get_dof_pos(self) -> torch.Tensor:
        return self._t(self._qpos[:, self._info.dof_qpos_index])

    def get_dof_vel(self) -> torch.Tensor:
        return self._t(self._qvel[:, self._info.dof_qvel_index])

    # A floating base's pose and velocity are its free joint's qpos/qvel (MuJoCo's kinematics copies
    # them), so these read the state rows and need no deferred stages.
    def get_base_pos(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_pos()
        q = self._base_free[0]
        return self._t(self._qpos[:, q : q + 3])

    def get_base_quat(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_quat()
        q = self._base_free[0]
        return self._t(quat_normalize(self._qpos[:, q + 3 : q + 7]))

    def get_base_lin_vel(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_lin_vel()
        v = self._base_free[1]
        return self._t(self._qvel[:, v : v + 3])

    def get_base_ang_vel(self) -> torch.Tensor:
        if self._base_free is None:
            return super().get_base_ang_vel()
        q, v = self._base_free
        return self._t(quat_apply(quat_normalize(self._qpos[:, q + 3 : q + 7]), self._qvel[:, v + 3 : v + 6]))

    def _body_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._t(self._out("xpos")[:, ids])

    def _body_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._t(self._out("xquat")[:, ids])

    def _body_vel_w(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ang, lin) world velocities of the body frame origins, float64."""
        cvel = self._out("cvel")[:, ids]                       # (N, B, 6): [ang, lin] at subtree com of root
        com = self._out("subtree_com")[:, self._info.body_root[ids]]
        offset = self._out("xpos")[:, ids] - com
        ang = cvel[..., :3]
        return ang, cvel[..., 3:] + cross(ang, offset)

    def _body_lin_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._t(self._body_vel_w(ids)[1])

    def _body_ang_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._t(self._out("cvel")[:, ids, :3])

    def _site_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._t(self._out("site_xpos")[:, ids])

    def _site_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        body_q = self._out("xquat")[:, self._site_body[ids]]
        return self._t(quat_mul(body_q, self._site_quat_local[ids]))

    def _sensor_data(self, sensor_id: int) -> torch.Tensor:
        adr, dim = int(self._info.sensor_adr[sensor_id]), int(self._info.sensor_dim[sensor_id])
        return self._t(self._out("sensordata")[:, adr : adr + dim])

    def get_body_mass(self) -> torch.Tensor:
        per_env = self.batch.expanded("body_mass")
        return super().get_body_mass() if per_env is None else self._t(per_env)

    def get_gravity(self) -> torch.Tensor:
        per_env = self.batch.expanded("opt.gravity")
        return super().get_gravity() if per_env is None else self._t(per_env)

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

    def _site_jacobian_w(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        point = self._out("site_xpos")[:, site_id]
        jacp, jacr = self.batch.jac(int(self._site_body[site_id]), point)
        return self._t(jacp[:, :, cols]), self._t(jacr[:, :, cols])

    # -- mutation ----------------------------------------------------------
    def _set_state(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        self._qpos[env_ids] = qpos
        self._qvel[env_ids] = qvel
        self._warmstart[env_ids] = 0.0
        if self._derived and not self._stale:
            self._forward(env_ids)  # the other envs' derived fields are current: keep them

    def _clear_body_forces(self) -> None:
        self._xfrc[:, self._force_bodies] = 0.0
        super()._clear_body_forces()

    def _write_xfrc(self) -> None:
        """Shift pending origin forces to MuJoCo's centre-of-mass convention, at the current pose."""
        b = self._force_bodies
        f = self._force[:, b]
        lever = self._out("xpos")[:, b] - self._out("xipos")[:, b]
        self._xfrc[:, b, :3] = f
        self._xfrc[:, b, 3:] = self._torque[:, b] + cross(lever, f)

    def _step(self, ctrl: np.ndarray, nsteps: int) -> np.ndarray:
        self._ctrl[...] = ctrl
        np.copyto(self._prev_state, self._state)
        self._warn[:, _BAD_WARNINGS, 1] = 0  # the batch counts warnings per call from here
        failed = np.zeros(self.num_envs, dtype=bool)
        if self._force_bodies.size:
            # the lever arm moves with the body: re-shift before every substep
            for _ in range(nsteps):
                self._write_xfrc()
                failed |= self._advance(1)
        else:
            failed |= self._advance(nsteps)
        diverged = failed | (self._warn[:, _BAD_WARNINGS, 1] > 0).any(axis=1)
        diverged |= ~(np.isfinite(self._qpos).all(axis=1) & np.isfinite(self._qvel).all(axis=1))
        if diverged.any():
            ids = np.flatnonzero(diverged)
            self._state[ids] = self._prev_state[ids]
        self._stale = True
        return diverged

    def _advance(self, nsteps: int) -> np.ndarray:
        failed = np.zeros(self.num_envs, dtype=bool)
        try:
            self.batch.step(nstep=nsteps)
        except mjbatch.SimulationError as e:
            failed[np.asarray(e.ids)] = True
        return failed

    def __getattr__(self, name: str) -> Any:
        # only reached for missing attributes: after close(), the engine handles are gone
        if self.__dict__.get("_closed"):
            raise SimBackendError(f"backend {self.name!r} is closed")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _close(self) -> None:
        self.__dict__.pop("batch", None)
        for k in ("_state", "_qpos", "_qvel", "_ctrl", "_xfrc", "_warmstart", "_prev_state", "_warn"):
            self.__dict__.pop(k, None)
