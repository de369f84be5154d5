"""The SAPIEN 3 / PhysX 5 backend: the same compiled model, the same contract.

The model is compiled by MuJoCo and converted by :mod:`.plan` into PhysX
articulations (names, order and kinematics agree with MuJoCo by construction).
Two physics paths share one index/packing layer (:mod:`.layout`):

* ``device="cpu"``: ``num_envs`` scenes, each a ``sapien.Scene`` holding only a
  ``PhysxCpuSystem`` (no render system: no GPU or Vulkan needed). State is
  read per scene into buffers of PhysX's GPU layout, lazily: a getter reads
  only the links it needs, once per state.
* ``device="cuda"``: one ``PhysxGpuSystem`` with one sub-scene per env (see
  :mod:`.gpu`), zero-copy torch views of PhysX's CUDA buffers.

PhysX defaults MuJoCo does not have, and the value this backend sets:

* link linear/angular damping: 0; joint friction coefficient: 0;
* sleeping: off (sleep threshold 0); body and joint speed limits: 1e16;
* restitution: 0; static = dynamic friction = MuJoCo's sliding friction;
* solver: PGS by default (``solver`` option), ``solver_position_iterations``
  (default 32) and ``solver_velocity_iterations`` (default 4);
* contact offset 0.01 m and rest offset 0 (SAPIEN's defaults); enhanced
  determinism on.

Divergence: an env whose PhysX state, before or after a call, holds a
non-finite value, a value above 1e10, or a speed above 1e5 m/s or rad/s
(PhysX clamps a blown-up articulation's speeds to about 1e6 instead of letting
them grow) is reported and gets back its pre-call state (PhysX's own
serialisation of the scene).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
import torch

from simbackend.capabilities import CORE_SENSOR_TYPES, Capabilities
from simbackend.contract import SimBackend
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError, UnsupportedFeatureError
from simbackend.math import cross, quat_apply, quat_apply_inverse, quat_conj, quat_mul
from simbackend.models import compile_model, model_info

from .layout import Layout
from .plan import build_plan

_OPTIONS = ("solver", "solver_position_iterations", "solver_velocity_iterations", "spacing")
_SENSOR_TYPES = frozenset(CORE_SENSOR_TYPES)
_OBJ = mujoco.mjtObj


def _capabilities(gpu: bool) -> Capabilities:
    return Capabilities(
        gpu=gpu,
        joint_types=frozenset({"free", "hinge", "slide"}),
        actuator_kinds=frozenset({"motor", "position", "velocity"}),
        sensor_types=_SENSOR_TYPES,
        body_forces=not gpu,
        rendering=False,
    )


class SapienBackend(SimBackend):
    """SAPIEN/PhysX backend.

    Args:
        model: MJCF/URDF path, ``mujoco.MjSpec``, ``mujoco.MjModel`` or built-in name.
        num_envs: number of simulations N.
        device: ``"cpu"`` (default: CPU PhysX, one scene per env) or ``"cuda"``
            (GPU PhysX, one sub-scene per env).
        seed: seed of the backend's random streams.
        solver: ``"pgs"`` (default) or ``"tgs"``, PhysX's solver. TGS reports
            joint velocities that stay biased at rest under load (1.7e-2 rad/s
            on ``arm7`` held by its position actuators, where PGS gives 3e-5).
        solver_position_iterations: PhysX position iterations (default 32).
        solver_velocity_iterations: PhysX velocity iterations (default 4).
        spacing: distance between sub-scene origins on the GPU (metres); default
            from the model's extent.

    Raises:
        ModelLoadError: the model holds something PhysX cannot represent (the
            message names the element).
    """

    name = "sapien"

    def __init__(self, model: Any, num_envs: int, *, device: Any = None, seed: int = 0, **options: Any):
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ArgumentTypeError(f"unknown option(s) for backend 'sapien': {unknown}; accepted: {list(_OPTIONS)}")
        iters = []
        for key, default in (("solver_position_iterations", 32), ("solver_velocity_iterations", 4)):
            v = options.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 255:
                raise InvalidArgumentError(f"{key}: expected an integer in [1, 255], got {v!r}")
            iters.append(v)
        solver = options.get("solver", "pgs")
        if solver not in ("pgs", "tgs"):
            raise InvalidArgumentError(f"solver: expected 'pgs' or 'tgs', got {solver!r}")
        spacing = options.get("spacing")
        if spacing is not None and (isinstance(spacing, bool) or not isinstance(spacing, (int, float)) or not spacing > 0):
            raise InvalidArgumentError(f"spacing: expected a positive number of metres, got {spacing!r}")
        device = torch.device("cpu" if device is None else device)
        if device.type not in ("cpu", "cuda"):
            raise InvalidArgumentError(f"device: expected 'cpu' or 'cuda', got {str(device)!r}")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise SimBackendError("device 'cuda' requested, but torch sees no CUDA device")
        m = compile_model(model)
        info = model_info(m)
        plan = build_plan(m, info)
        super().__init__(info, num_envs, device=device, seed=seed)
        self.model, self.plan = m, plan
        if device.type == "cuda":
            from .gpu import GpuPhysx

            self.engine = GpuPhysx(plan, self.num_envs, tuple(iters), solver == "tgs", device, spacing)
        else:
            from .cpu import CpuPhysx

            self.engine = CpuPhysx(plan, self.num_envs, tuple(iters), solver == "tgs")
        self._gpu = device.type == "cuda"
        e = self.engine
        site_pose = np.concatenate([np.asarray(m.site_pos, np.float64), np.asarray(m.site_quat, np.float64)], 1)
        self.layout = Layout(plan, e.rows, e.link_col, e.dof_col, e.origins, site_pose, device)
        self._sensor_frames = self._sensor_tables(m)
        if self._gpu:  # place every env at qpos0 through the CUDA buffers (links start at their entity poses)
            ids = np.arange(self.num_envs)
            q0 = np.tile(np.asarray(info.qpos0, np.float64), (self.num_envs, 1))
            self._set_state(ids, q0, np.zeros((self.num_envs, info.nv)))

    @property
    def capabilities(self) -> Capabilities:
        return _capabilities(self._gpu)

    @property
    def notes(self) -> tuple[str, ...]:
        """What the conversion approximates (nothing unsupported is dropped silently)."""
        return tuple(self.plan.notes)

    # ------------------------------------------------------------------
    # model fields
    # ------------------------------------------------------------------
    def get_body_mass(self) -> torch.Tensor:
        mass = self.engine.body_masses(self.plan)
        return self._tensor(np.broadcast_to(mass, (self.num_envs, mass.size)))

    def get_gravity(self) -> torch.Tensor:
        return self._tensor(np.broadcast_to(self.engine.gravity(), (self.num_envs, 3)))

    def model_fields(self) -> dict[str, np.ndarray]:
        """What PhysX holds, read back from the first env's links (see the contract)."""
        return self.engine.model_fields(self.plan, self.model)

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------
    def _free_links(self, velocities: bool) -> torch.Tensor:
        self._check_open()
        ids = self.layout.free_body
        return self.layout.gather(self.engine.link_data(ids, velocities=velocities), ids)

    def get_qpos(self) -> torch.Tensor:
        self._check_open()
        free = self._free_links(False) if self.layout.free_joints.size else None
        return self._out(self.layout.qpos(self.engine.art_qpos(), free))

    def get_qvel(self) -> torch.Tensor:
        self._check_open()
        free = self._free_links(True) if self.layout.free_joints.size else None
        return self._out(self.layout.qvel(self.engine.art_qvel(), free))

    def _out(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(device=self._device, dtype=torch.float32)

    def _links(self, ids: np.ndarray) -> torch.Tensor:
        self._check_open()
        return self.layout.gather(self.engine.link_data(ids), ids)

    def _body_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._links(ids)[..., :3])

    def _body_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._links(ids)[..., 3:7])

    def _body_vel_w(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        self._check_open()
        qvel = self.get_qvel().to(torch.float64)
        arts = np.unique(self.plan.body_link[ids, 0])
        data = self.engine.link_data(ids, arts=arts[arts >= 0])
        return self.layout.body_velocities(data, qvel, ids)

    def _body_lin_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._body_vel_w(ids)[0])

    def _body_ang_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._body_vel_w(ids)[1])

    def _site_frames(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        bodies = self.layout.site_body[ids]
        return self.layout.frames(self._links(bodies), self.layout.site_local[torch.as_tensor(ids, device=self._device)])

    def _site_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._site_frames(ids)[0])

    def _site_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._site_frames(ids)[1])

    def _site_jacobian_w(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        self._check_open()
        art = self.plan.body_link[self.layout.site_body[site_id], 0]
        data = self.engine.link_data(None, arts=np.array([art]) if art >= 0 else None)  # joint frames of its tree
        jacp, jacr = self.layout.site_jacobian(data, site_id, cols)
        return self._out(jacp), self._out(jacr)

    # ------------------------------------------------------------------
    # sensors: computed from the state with MuJoCo's meaning
    # ------------------------------------------------------------------
    def _sensor_tables(self, m: mujoco.MjModel) -> dict[int, tuple]:
        """sensor id -> (obj body, obj local pose (7,), ref body or -1, ref local pose)."""
        def frame(objtype: int, objid: int) -> tuple[int, np.ndarray]:
            if objtype == int(_OBJ.mjOBJ_XBODY):
                return objid, np.array([0, 0, 0, 1.0, 0, 0, 0])
            if objtype == int(_OBJ.mjOBJ_BODY):
                return objid, np.concatenate([m.body_ipos[objid], m.body_iquat[objid]])
            if objtype == int(_OBJ.mjOBJ_SITE):
                return int(m.site_bodyid[objid]), np.concatenate([m.site_pos[objid], m.site_quat[objid]])
            if objtype == int(_OBJ.mjOBJ_GEOM):
                return int(m.geom_bodyid[objid]), np.concatenate([m.geom_pos[objid], m.geom_quat[objid]])
            return -2, np.zeros(7)  # cameras and others: not supported

        out = {}
        for s in range(m.nsensor):
            ob, ol = frame(int(m.sensor_objtype[s]), int(m.sensor_objid[s]))
            rb, rl = (-1, np.zeros(7)) if m.sensor_refid[s] < 0 else frame(int(m.sensor_reftype[s]), int(m.sensor_refid[s]))
            out[s] = (ob, ol, rb, rl, float(m.sensor_cutoff[s]), int(m.sensor_objid[s]))
        return out

    def _frame_state(self, body: int, local: np.ndarray) -> tuple[torch.Tensor, ...]:
        """(pos, quat, lin vel of the frame's point, ang vel) ``(N, ·)`` of a frame fixed on ``body``."""
        ids = np.array([body])
        link = self._links(ids)
        loc = torch.as_tensor(local, dtype=torch.float64, device=self._device)[None]
        pos, quat = self.layout.frames(link, loc)
        v0, w = (t[:, 0] for t in self._body_vel_w(ids))
        v = v0 + cross(w, pos[:, 0] - link[:, 0, :3])
        return pos[:, 0], quat[:, 0], v, w

    def _sensor_data(self, sensor_id: int) -> torch.Tensor:
        stype = self._info.sensor_type[sensor_id]
        ob, ol, rb, rl, cutoff, objid = self._sensor_frames[sensor_id]
        if stype in ("jointpos", "jointvel"):
            q = self.get_qpos() if stype == "jointpos" else self.get_qvel()
            adr = (self._info.joint_qposadr if stype == "jointpos" else self._info.joint_dofadr)[objid]
            val = q[:, adr:adr + 1].to(torch.float64)
        else:
            if ob == -2 or rb == -2:
                raise UnsupportedFeatureError(self.name, "sensor object type",
                                              f"sensor {self.sensor_names[sensor_id]!r} is attached to a camera")
            p, q, v, w = self._frame_state(ob, ol)
            if stype == "gyro":
                val = quat_apply_inverse(q, w)
            elif stype == "velocimeter":
                val = quat_apply_inverse(q, v)
            elif rb < 0:
                val = {"framepos": p, "framequat": q, "framelinvel": v, "frameangvel": w}[stype]
            else:
                rp, rq, rv, rw = self._frame_state(rb, rl)
                if stype == "framepos":
                    val = quat_apply_inverse(rq, p - rp)
                elif stype == "framequat":
                    val = quat_mul(quat_conj(rq), q)
                elif stype == "framelinvel":
                    val = quat_apply_inverse(rq, v - rv - cross(rw, p - rp))
                else:
                    val = quat_apply_inverse(rq, w - rw)
        if cutoff > 0 and stype != "framequat":
            val = val.clamp(-cutoff, cutoff)
        return self._out(val)

    # ------------------------------------------------------------------
    # mutation
    # ------------------------------------------------------------------
    def _set_state(self, env_ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        packed = self.layout.pack_state(env_ids, qpos, qvel, self.engine.max_dof)
        self.engine.write_state(env_ids, packed)

    def _step(self, ctrl: np.ndarray, nsteps: int) -> np.ndarray:
        drive = self.layout.pack_ctrl(ctrl)
        forces = None
        if self._force_bodies.size:
            b = self._force_bodies
            forces = (b, self._force[:, b], self._torque[:, b])
        return self.engine.step(drive, nsteps, forces)

    def _close(self) -> None:
        self.engine.close()
