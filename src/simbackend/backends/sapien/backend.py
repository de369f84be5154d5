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
* solver: PGS by default (``sapien={"solver": "tgs"}`` for TGS), 32 position
  iterations (the common ``solver_iterations`` option) and 4 velocity
  iterations (``sapien={"solver_velocity_iterations": k}``);
* contact offset 0.01 m and rest offset 0 (SAPIEN's defaults); enhanced
  determinism on.

Divergence: the contract's rule (:mod:`simbackend.divergence`) on the qpos/qvel
the backend reports, plus PhysX's own failures: a non-finite serialised state,
or joint accelerations a substep cannot integrate (``|qacc| dt > MAX_QVEL``:
PhysX answers such a step by zeroing the velocities, a finite state no
threshold sees). Diverged envs get back their pre-call state (PhysX's own
serialisation on the CPU, masked device writes on the GPU).
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import numpy as np
import torch

from simbackend.capabilities import CORE_SENSOR_TYPES, Capabilities
from simbackend.contract import SimBackend
from simbackend.divergence import diverged_rows
from simbackend.errors import UnsupportedFeatureError
from simbackend.models import compile_model, model_info
from simbackend.options import EngineOption, check_choice, check_int, optional

from .layout import Layout
from .plan import build_plan
from .randomize import CPU_TERMS, EnvParams

_SENSOR_TYPES = frozenset(CORE_SENSOR_TYPES)
#: PhysX position iterations when ``solver_iterations`` is not given
DEFAULT_POSITION_ITERATIONS = 32


def _positive_length(value: Any, argument: str) -> float:
    from simbackend.options import check_positive_float

    return check_positive_float(value, argument)


def _capabilities(gpu: bool) -> Capabilities:
    from .cpu import MAX_CPU_SCENES

    return Capabilities(
        gpu=gpu,
        joint_types=frozenset({"free", "hinge", "slide"}),
        # CPU: other gain/bias laws (without activation dynamics) are computed by MuJoCo (.constraints)
        actuator_kinds=frozenset({"motor", "position", "velocity"} | (set() if gpu else {"other"})),
        sensor_types=_SENSOR_TYPES,
        body_forces=not gpu,
        ray_casting=not gpu,  # CPU: rays against the plan's shapes at the links' current poses (.raycast)
        # CPU: every env its own scene, so every per-env value its own PhysX object (.randomize);
        # GPU: SAPIEN fixes masses, materials and drives at gpu_init (declared absent, never ignored)
        domain_randomization=frozenset() if gpu else frozenset(
            f"{t}:{p}" for t in CPU_TERMS for p in ("init", "reset", "interval")),
        rendering=True,  # MuJoCo's renderer draws the compiled model (simbackend.playback); SAPIEN's is not used
        # CPU: PhysX's own serialisation of each env's scene, restored into a fresh scene (.cpu); PhysX
        # does not serialise its contact caches, so the continuation agrees to float32 rounding, not bit for bit
        snapshot_restore=not gpu,
        snapshot_exact=False,
        max_envs=None if gpu else MAX_CPU_SCENES,  # CPU: one scene per env, SAPIEN's cap (see .cpu)
    )


class SapienBackend(SimBackend):
    """SAPIEN/PhysX backend.

    Args:
        model: MJCF/URDF path, ``mujoco.MjSpec``, ``mujoco.MjModel`` or built-in name.
        num_envs: number of simulations N.
        device: ``"cpu"`` (default: CPU PhysX, one scene per env, at most
            ``capabilities.max_envs`` per process) or ``"cuda"`` (GPU PhysX,
            one sub-scene per env).
        seed: seed of the backend's random streams.
        **options: the common options (:mod:`simbackend.options`):
            ``solver_iterations`` (PhysX position iterations, default 32),
            ``timestep``, the model options, and ``nthread``, an upper bound:
            CPU PhysX steps its scenes one after another on the calling thread
            (SAPIEN holds the GIL in ``system.step()``), so it uses one thread.
            The block ``sapien={...}`` takes ``solver`` (``"pgs"``, the default,
            or ``"tgs"``: TGS reports joint velocities that stay biased at rest
            under load, 1.7e-2 rad/s on ``arm7`` held by its position actuators
            where PGS gives 3e-5), ``solver_velocity_iterations`` (default 4)
            and ``spacing`` (distance between sub-scene origins on the GPU,
            metres; default from the model's extent).

    Raises:
        ModelLoadError: the model holds something PhysX cannot represent (the
            message names the element).
    """

    name = "sapien"
    engine_options = {
        "solver": EngineOption("pgs", check_choice("pgs", "tgs"), "PhysX solver"),
        "solver_velocity_iterations": EngineOption(
            4, lambda v, a: check_int(v, a, minimum=1, maximum=255), "PhysX velocity iterations"),
        "spacing": EngineOption(None, optional(_positive_length), "GPU sub-scene spacing, m (from the model if unset)"),
    }

    def __init__(self, model: Any, num_envs: int, *, device: Any = None, seed: int = 0, **options: Any):
        opts = self.parse_options(options)
        e = opts.engine
        position_iters = DEFAULT_POSITION_ITERATIONS if opts.solver_iterations is None else opts.solver_iterations
        if position_iters > 255:
            from simbackend.errors import InvalidArgumentError

            raise InvalidArgumentError(f"solver_iterations: PhysX takes at most 255 position iterations, got {position_iters}")
        iters = (position_iters, e["solver_velocity_iterations"])
        device = self.resolve_device(device, allowed=("cpu", "cuda"))
        m = compile_model(model, **opts.model)
        if opts.timestep is not None:
            m = copy.copy(m)  # never edit a model the caller passed in
            m.opt.timestep = opts.timestep
        info = model_info(m)
        plan = build_plan(m, info)
        super().__init__(info, num_envs, device=device, seed=seed)
        self.model, self.plan = m, plan
        self.solver = e["solver"]
        if device.type == "cuda":
            from .gpu import GpuPhysx

            self.engine = GpuPhysx(plan, self.num_envs, iters, self.solver == "tgs", device, e["spacing"])
        else:
            from .cpu import CpuPhysx

            self.engine = CpuPhysx(plan, self.num_envs, iters, self.solver == "tgs")
        self._gpu = device.type == "cuda"
        #: (qpos, qvel) float64 numpy decoded from the CPU states the last step serialised; None when stale
        self._decoded: Optional[tuple[np.ndarray, np.ndarray]] = None
        e = self.engine
        site_pose = np.concatenate([np.asarray(m.site_pos, np.float64), np.asarray(m.site_quat, np.float64)], 1)
        self.layout = Layout(plan, e.rows, e.cols, e.origins, site_pose, device)
        self._params = None if self._gpu else EnvParams(self)
        if not self._gpu and plan.needs_mujoco:
            from .constraints import MujocoConstraints

            e.constraints = MujocoConstraints(m, plan, self.num_envs)
            e.decode = self.layout.state_from_pack
        if self._gpu:  # place every env at qpos0 through the CUDA buffers (links start at their entity poses)
            ids = np.arange(self.num_envs)
            q0 = torch.as_tensor(np.tile(np.asarray(info.qpos0, np.float64), (self.num_envs, 1)), device=device)
            self._set_state(ids, q0, torch.zeros((self.num_envs, info.nv), dtype=torch.float64, device=device))

    @property
    def capabilities(self) -> Capabilities:
        return _capabilities(self._gpu)

    @property
    def notes(self) -> tuple[str, ...]:
        """What the conversion approximates (nothing unsupported is dropped silently), and the solver in use."""
        solver = {"pgs": "PGS (projected Gauss-Seidel)", "tgs": "TGS (temporal Gauss-Seidel)"}[self.solver]
        return tuple(self.plan.notes) + (f"solver: PhysX {solver}",)

    # ------------------------------------------------------------------
    # model fields
    # ------------------------------------------------------------------
    def _read_env_params(self, name: str) -> np.ndarray:
        """What PhysX holds: the first env's objects until a field is randomized, then every env's."""
        read = None if self._params is None else self._params.read(name)
        if read is not None:
            return read
        if name == "body_mass":
            return np.broadcast_to(self.engine.body_masses(), (self.num_envs, self._info.nbody))
        if name == "gravity":
            return np.broadcast_to(self.engine.gravity(), (self.num_envs, 3))
        return super()._read_env_params(name)

    def _write_env_params(self, env_ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        if self._params is None:
            raise UnsupportedFeatureError(self.name, "domain randomization on the GPU")
        self._decoded = None
        self._params.write(env_ids, values)

    def model_fields(self) -> dict[str, np.ndarray]:
        """What PhysX holds, read back from the first env's links (see the contract)."""
        return self.engine.model_fields(self.model)

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------
    def _free_links(self, velocities: bool) -> torch.Tensor:
        ids = self.layout.free_body
        return self.layout.gather(self.engine.link_data(ids, velocities=velocities), ids)

    def _state64(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The contract's ``(qpos, qvel)``, float64, from the PhysX buffers."""
        return self._qpos64(), self._qvel64()

    def _qpos64(self) -> torch.Tensor:
        if self._decoded is not None:  # decoded from the states the last step serialised anyway
            return torch.from_numpy(self._decoded[0])
        free = self._free_links(False) if self.layout.free_joints.size else None
        return self.layout.qpos(self.engine.art_qpos(), free)

    def _qvel64(self) -> torch.Tensor:
        if self._decoded is not None:
            return torch.from_numpy(self._decoded[1])
        free = self._free_links(True) if self.layout.free_joints.size else None
        return self.layout.qvel(self.engine.art_qvel(), free)

    def get_qpos(self) -> torch.Tensor:
        return self._out(self._qpos64())

    def get_qvel(self) -> torch.Tensor:
        return self._out(self._qvel64())

    def _links(self, ids: np.ndarray) -> torch.Tensor:
        return self.layout.gather(self.engine.link_data(ids), ids)

    def _body_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._links(ids)[..., :3])

    def _body_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._links(ids)[..., 3:7])

    def _body_vel_w(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        qvel = self._qvel64()
        arts = np.unique(self.plan.body_link[ids, 0])
        data = self.engine.link_data(ids, arts=arts[arts >= 0])
        return self.layout.body_velocities(data, qvel, ids)

    def _body_lin_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._body_vel_w(ids)[0])

    def _body_ang_vel_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._body_vel_w(ids)[1])

    def _site_frames(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        bodies = self.layout.site_body[ids]
        return self.layout.frames(self._links(bodies), self.layout.site_local[self.layout.ids(ids)])

    def _site_pos_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._site_frames(ids)[0])

    def _site_quat_w(self, ids: np.ndarray) -> torch.Tensor:
        return self._out(self._site_frames(ids)[1])

    def _site_jacobian_w(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        art = self.plan.body_link[self.layout.site_body[site_id], 0]
        data = self.engine.link_data(None, arts=np.array([art]) if art >= 0 else None)  # joint frames of its tree
        jacp, jacr = self.layout.site_jacobian(data, site_id, cols)
        return self._out(jacp), self._out(jacr)

    # ------------------------------------------------------------------
    # mutation
    # ------------------------------------------------------------------
    def _set_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        self._decoded = None
        packed = self.layout.pack_state(env_ids, qpos, qvel)
        self.engine.write_state(env_ids, packed)

    def _step(self, ctrl: torch.Tensor, nsteps: int, hold: Optional[torch.Tensor] = None) -> Any:
        drive = self.layout.pack_ctrl(ctrl)
        if getattr(self.engine, "constraints", None) is not None and self.info.nu:
            self.engine.constraints.set_ctrl(ctrl.cpu().numpy())
        forces = None
        if self._force_bodies.size:
            b = self._force_bodies
            forces = (b, self._force[:, b], self._torque[:, b])
        self._decoded = None
        try:
            diverged = self.engine.step(drive, nsteps, forces, self._judge, hold)
        except BaseException:
            self._decoded = None  # the judge may have decoded the state the engine has just undone
            raise
        if self._decoded is not None and np.asarray(diverged).any():
            self._decoded = None  # restored envs no longer hold the decoded state
        return diverged

    def _judge(self, states: Optional[np.ndarray]) -> Any:
        """``(N,)`` envs the contract's divergence rule flags: from the serialised CPU states
        ``(N, pack_size)`` when given (no link read again), else from the PhysX buffers."""
        if states is not None:
            self._decoded = self.layout.state_from_pack(states)
            return diverged_rows(*self._decoded)
        return diverged_rows(*self._state64())

    def _play_renderers_absent(self) -> dict[str, str]:
        """SAPIEN's own renderer is not used: pictures come from MuJoCo's renderer (the core's)."""
        return {"sapien": "SAPIEN's renderer needs a Vulkan GPU and is not wired to this backend;"
                          " MuJoCo's renderer draws its state on any machine"}

    # ------------------------------------------------------------------
    # snapshots (CPU): PhysX's own serialisation of each env's scene
    # ------------------------------------------------------------------
    def _physics_state_width(self) -> int:
        if self._gpu:
            raise UnsupportedFeatureError(self.name, "snapshot_restore", "on the GPU")
        return int(self.engine.cols.pack_size)

    def _get_physics_state(self, env_ids: np.ndarray) -> np.ndarray:
        return self.engine.serialised(env_ids).astype(np.float64)

    def _check_physics_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        packed = rows.cpu().numpy()
        if (np.abs(packed) > np.finfo(np.float32).max).any():
            from simbackend.errors import ValueRangeError

            raise ValueRangeError("state", env_ids[(np.abs(packed) > np.finfo(np.float32).max).any(1)],
                                  float(np.finfo(np.float32).max))
        self._check_snapshot_state(env_ids, *self.layout.state_from_pack(packed.astype(np.float32)))

    def _set_physics_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        self._decoded = None
        self.engine.restore_serialised(env_ids, rows.cpu().numpy().astype(np.float32))

    def _ray_cast(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> torch.Tensor:
        from .raycast import RayCaster  # rays against the shapes at the links' current poses (see .raycast)

        caster = self.__dict__.get("_ray_caster") or self.__dict__.setdefault("_ray_caster", RayCaster(self.plan, self.engine))
        ids = caster.bodies
        return caster.cast(origins, directions, exclude_body, self._body_pos_w(ids), self._body_quat_w(ids))

    def _close(self) -> None:
        self.engine.close()
