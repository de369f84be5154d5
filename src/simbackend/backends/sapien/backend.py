"""The SAPIEN 3 / PhysX 5 engine: the same compiled model, behind the same contract.

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

Divergence: ``step`` reports PhysX's own failures, joint accelerations a
substep cannot integrate (``|qacc| dt > MAX_QVEL``: PhysX answers such a step
by zeroing the velocities, a finite state no threshold sees); the front end
adds the contract's rule on the qpos/qvel the engine reads (a non-finite
serialised state decodes to non-finite values). ``revert`` gives envs back
their pre-call state (PhysX's own serialisation on the CPU, masked device
writes on the GPU).

Contact forces (``contact_sensing``): computed on demand for each env's last
substep, friction included (:mod:`.contact`; stepping only keeps the links'
velocities from before the last substep, and the forces applied in it): PhysX reports
only the normal impulses of its contact points, so the net force on a moving
link is read from the solver's result, ``m dv/dt - m g`` less its incoming and
outgoing joint forces and the forces applied to it; a link reads it in a
substep where PhysX reports a contact impulse on it (zero otherwise). Every
MuJoCo body with geoms is its own PhysX link (the
intermediate links of multi-joint bodies and the anchors of hinged roots carry
no shapes), so a link's contacts are its body's; bodies welded to the world are
root links of fixed-root articulations and read their contacts' normal impulses
only (no equation of motion to read friction from); world-body geoms are
the static actor, and the world body reads zero. Bodies MuJoCo fuses at
compile time (``fuse_static``) are not bodies of the compiled model: their
geoms, and so their contacts, are their parent's.

Delegated physics: where PhysX has no counterpart for a model feature
(equalities, frictionloss on a driven joint, tendon forces, fluid, actuators
without a PhysX drive), MuJoCo computes the force each CPU substep
(:mod:`.mujoco_forces`). ``capabilities.delegated`` names every such element;
``sapien={"delegate": False}`` refuses those models instead, naming the element.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simbackend.capabilities import CORE_SENSOR_TYPES, Capabilities, KnownDifference
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import InvalidArgumentError, ModelLoadError, UnsupportedFeatureError, ValueRangeError
from simbackend.options import EngineOption, check_bool, check_choice, check_int, check_positive_float, optional

from .layout import Layout
from .mujoco_forces import MujocoForces
from .plan import build_plan
from .randomize import CPU_TERMS, EnvParams

_SENSOR_TYPES = frozenset(CORE_SENSOR_TYPES)
#: PhysX position iterations when ``solver_iterations`` is not given
DEFAULT_POSITION_ITERATIONS = 32
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: renderers the engine has but does not offer here (``get_play_capabilities().absent``)
_RENDERERS_ABSENT = (
    (
        "sapien",
        "SAPIEN's renderer needs a Vulkan GPU and is not wired to this backend;"
        " MuJoCo's renderer draws its state on any machine",
    ),
)


def _capabilities(gpu: bool, delegated: tuple[str, ...], known: tuple[KnownDifference, ...] = ()) -> Capabilities:
    from .cpu import MAX_CPU_SCENES

    return Capabilities(
        gpu=gpu,
        joint_types=frozenset({"free", "hinge", "slide"}),
        # CPU: other gain/bias laws (without activation dynamics) are computed by MuJoCo (.mujoco_forces)
        actuator_kinds=frozenset({"motor", "position", "velocity"} | (set() if gpu else {"other"})),
        sensor_types=_SENSOR_TYPES,
        body_forces=not gpu,
        ray_casting=not gpu,  # CPU: rays against the plan's shapes at the links' current poses (.raycast)
        # CPU: every env its own scene, so every per-env value its own PhysX object (.randomize);
        # GPU: SAPIEN fixes masses, materials and drives at gpu_init (declared absent, never ignored)
        domain_randomization=frozenset()
        if gpu
        else frozenset(f"{t}:{p}" for t in CPU_TERMS for p in ("init", "reset", "interval")),
        rendering=True,  # MuJoCo's renderer draws the compiled model (simbackend.playback); SAPIEN's is not used
        # CPU: PhysX's own serialisation of each env's scene, restored into a fresh scene (.cpu); PhysX
        # does not serialise its contact caches, so the continuation agrees to float32 rounding, not bit for bit
        snapshot_restore=not gpu,
        snapshot_exact=False,
        max_envs=None if gpu else MAX_CPU_SCENES,  # CPU: one scene per env, SAPIEN's cap (see .cpu)
        # the last substep's net contact force, friction included, derived on demand from the solver's result
        # (.contact; which links touch: PhysX's contact report on the CPU, SAPIEN's body-impulse query on the GPU)
        contact_forces=True,
        delegated=frozenset(delegated),
        renderers_absent=_RENDERERS_ABSENT,
        # what PhysX cannot hold as compiled (massless bodies get MIN_MASS): the parity suite's KNOWN rows
        known_differences=known,
    )


class SapienEngine(Engine):
    """SAPIEN/PhysX engine.

    Devices: ``"cpu"`` (default: CPU PhysX, one scene per env, at most
    ``capabilities.max_envs`` per process) or ``"cuda"`` (GPU PhysX, one
    sub-scene per env).

    Options: the common ones (:mod:`simbackend.options`): ``solver_iterations``
    (PhysX position iterations, default 32), ``timestep``, the model options,
    and ``nthread``, an upper bound: CPU PhysX steps its scenes one after
    another on the calling thread (SAPIEN holds the GIL in ``system.step()``),
    so it uses one thread. The block ``sapien={...}`` takes ``solver``
    (``"pgs"``, the default, or ``"tgs"``: TGS reports joint velocities that stay
    biased at rest under load, 1.7e-2 rad/s on ``arm7`` held by its position
    actuators where PGS gives 3e-5), ``solver_velocity_iterations`` (default 4),
    ``spacing`` (distance between sub-scene origins on the GPU, metres; default
    from the model's extent) and ``delegate`` (default ``True``; ``False``
    refuses models whose physics MuJoCo would compute, naming the element).

    Raises:
        ModelLoadError: the model holds something PhysX cannot represent (the
            message names the element).
    """

    name = "sapien"
    devices = ("cpu", "cuda")
    distributions = ("sapien",)
    options = {
        "solver": EngineOption("pgs", check_choice("pgs", "tgs"), "PhysX solver"),
        "solver_velocity_iterations": EngineOption(
            4, lambda v, a: check_int(v, a, minimum=1, maximum=255), "PhysX velocity iterations"
        ),
        "spacing": EngineOption(
            None, optional(check_positive_float), "GPU sub-scene spacing, m (from the model if unset)"
        ),
        "delegate": EngineOption(True, check_bool, "let MuJoCo compute what PhysX lacks (False: refuse such models)"),
    }

    def __init__(self, build: EngineBuild):
        super().__init__(build)
        opts = build.options
        e = opts.engine
        position_iters = DEFAULT_POSITION_ITERATIONS if opts.solver_iterations is None else opts.solver_iterations
        if position_iters > 255:
            raise InvalidArgumentError(
                f"solver_iterations: PhysX takes at most 255 position iterations, got {position_iters}"
            )
        iters = (position_iters, e["solver_velocity_iterations"])
        m = build.info.compiled
        plan = build_plan(m, build.info)
        if not e["delegate"] and plan.delegated:
            more = f" (and {len(plan.delegated) - 1} more)" if len(plan.delegated) > 1 else ""
            raise ModelLoadError(
                f"sapien.delegate=False: {plan.delegated[0]}{more}; PhysX has no counterpart and"
                " this backend would take the force from MuJoCo each substep"
            )
        self.model, self.plan = m, plan
        self.solver = e["solver"]
        self._gpu = self.device.type == "cuda"
        if self._gpu:
            from .gpu import GpuPhysx

            self.physx: Any = GpuPhysx(plan, self.num_envs, iters, self.solver == "tgs", self.device, e["spacing"])
        else:
            from .cpu import CpuPhysx

            self.physx = CpuPhysx(plan, self.num_envs, iters, self.solver == "tgs")
        self.physx.contact_sensing = opts.contact_sensing
        #: MuJoCo's forces for what PhysX lacks (delegated physics); holds nothing where nothing is delegated
        self.mujoco_forces = MujocoForces(m, plan, self.num_envs)
        #: (qpos, qvel) float64 numpy decoded from the CPU states the last step serialised; None when stale
        self._decoded: tuple[np.ndarray, np.ndarray] | None = None
        p = self.physx
        site_pose = np.concatenate([np.asarray(m.site_pos, np.float64), np.asarray(m.site_quat, np.float64)], 1)
        self.layout = Layout(plan, p.rows, p.cols, p.origins, site_pose, self.device)
        self._params = None if self._gpu else EnvParams(self)
        self._ray_caster: Any = None
        #: (N,) whether each env has stepped since it was last written or reverted (contact forces);
        #: numpy on the CPU, a bool tensor on the device on the GPU (no host read)
        self._stepped: Any = (
            torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
            if self._gpu
            else np.zeros(self.num_envs, bool)
        )
        #: envs a revert put back, which read their contact forces from before the step (``_reading_before``,
        #: every body's) until they step or are written
        self._kept: Any = torch.zeros_like(self._stepped) if self._gpu else np.zeros(self.num_envs, bool)
        self._reading_before: Any = None
        if self._gpu:  # place every env at qpos0 through the CUDA buffers (links start at their entity poses)
            ids = np.arange(self.num_envs)
            q0 = torch.as_tensor(
                np.tile(np.asarray(build.info.qpos0, np.float64), (self.num_envs, 1)), device=self.device
            )
            self.write_state(
                ids, q0, torch.zeros((self.num_envs, build.info.nv), dtype=torch.float64, device=self.device)
            )

    @property
    def capabilities(self) -> Capabilities:
        return _capabilities(self._gpu, self.mujoco_forces.elements, tuple(self.plan.known_differences))

    @property
    def notes(self) -> tuple[str, ...]:
        """What the conversion approximates (nothing unsupported is dropped silently), and the solver in use."""
        solver = {"pgs": "PGS (projected Gauss-Seidel)", "tgs": "TGS (temporal Gauss-Seidel)"}[self.solver]
        return tuple(self.plan.notes) + (f"solver: PhysX {solver}",)

    # ------------------------------------------------------------------
    # model fields
    # ------------------------------------------------------------------
    def read_params(self, field: str) -> np.ndarray | None:
        """What PhysX holds: the first env's objects until a field is randomized, then every env's."""
        read = None if self._params is None else self._params.read(field)
        if read is not None:
            return read
        if field == "body_mass":
            return np.broadcast_to(self.physx.body_masses(), (self.num_envs, self.info.nbody))
        if field == "gravity":
            return np.broadcast_to(self.physx.gravity(), (self.num_envs, 3))
        return None

    def write_params(self, env_ids: np.ndarray, values: Any) -> None:
        if self._params is None:
            raise UnsupportedFeatureError(self.name, "domain randomization on the GPU")
        self._stale()
        self._params.write(env_ids, values)

    def model_fields(self) -> dict[str, np.ndarray]:
        """What PhysX holds, read back from the first env's links (see the contract)."""
        return self.physx.model_fields(self.model)

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------
    def _free_links(self, velocities: bool) -> torch.Tensor:
        ids = self.layout.free_body
        return self.layout.gather(self.physx.link_data(ids, velocities=velocities), ids)

    def read_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._decoded is not None:  # decoded from the states the last step serialised anyway
            return torch.from_numpy(self._decoded[0]), torch.from_numpy(self._decoded[1])
        if not self._gpu and self.physx.reached is not None:
            self._decoded = self.layout.state_from_pack(self.physx.reached)
            return torch.from_numpy(self._decoded[0]), torch.from_numpy(self._decoded[1])
        lay = self.layout
        has_free = bool(lay.free_joints.size)
        qpos = lay.qpos(self.physx.art_qpos(), self._free_links(False) if has_free else None)
        qvel = lay.qvel(self.physx.art_qvel(), self._free_links(True) if has_free else None)
        return qpos, qvel

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        self._stale()
        self._unstep(env_ids)
        packed = self.layout.pack_state(env_ids, qpos, qvel)
        self.physx.write_state(env_ids, packed)
        self.mujoco_forces.forget(env_ids)  # a fresh scene has no previous substep

    def _unstep(self, env_ids: np.ndarray) -> None:
        """Envs ``env_ids`` (host ids) are written: they read no contact force until they step."""
        self._stepped[self.layout.ids(env_ids) if self._gpu else env_ids] = False
        self._kept[self.layout.ids(env_ids) if self._gpu else env_ids] = False

    def _stale(self) -> None:
        """The state changes: the states serialised by the last step no longer describe it."""
        self._decoded = None
        self.physx.reached = None

    # ------------------------------------------------------------------
    # frames
    # ------------------------------------------------------------------
    def _links(self, ids: np.ndarray) -> torch.Tensor:
        return self.layout.gather(self.physx.link_data(ids), ids)

    def body_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        links = self._links(ids)
        return links[..., :3], links[..., 3:7]

    def body_velocity(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        qvel = self.read_state()[1]
        arts = np.unique(self.plan.body_link[ids, 0])
        data = self.physx.link_data(ids, arts=arts[arts >= 0])
        return self.layout.body_velocities(data, qvel, ids)

    def site_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        bodies = self.layout.site_body[ids]
        return self.layout.frames(self._links(bodies), self.layout.site_local[self.layout.ids(ids)])

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        art = self.plan.body_link[self.layout.site_body[site_id], 0]
        data = self.physx.link_data(None, arts=np.array([art]) if art >= 0 else None)  # joint frames of its tree
        return self.layout.site_jacobian(data, site_id, cols)

    def contact_forces(self, body_ids: np.ndarray) -> Any:
        """The last substep's net contact force (see the module docstring): float64 numpy on
        the CPU, a device tensor on the GPU; zero for the world body and for envs written since their
        last step; for envs a revert put back, the forces from before the step (PhysX keeps the report of
        the step undone)."""
        world = body_ids == 0
        kept = self._reading_before
        if self._gpu:
            force = self.physx.contact_forces(self.layout.ids(body_ids))
            if world.any():
                force[:, self.layout.ids(np.flatnonzero(world))] = 0.0
            force = torch.where(self._stepped[:, None, None], force, 0.0)
            if kept is None:
                return force
            return torch.where(self._kept[:, None, None], kept[:, self.layout.ids(body_ids)], force)
        force = self.physx.contact_forces(body_ids)
        force[:, world] = 0.0
        force[~self._stepped] = 0.0
        if kept is not None and self._kept.any():
            force[self._kept] = kept[self._kept][:, body_ids]
        return force

    # ------------------------------------------------------------------
    # stepping
    # ------------------------------------------------------------------
    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> Any:
        drive = self.layout.pack_ctrl(ctrl)
        forces_tuple = None if forces is None else (forces.bodies, forces.force, forces.torque)
        delegated = self.mujoco_forces
        if self.physx.contact_sensing:  # what a revert gives back
            self._reading_before = self.contact_forces(np.arange(self.info.nbody))
            self._kept[:] = False
        self._stale()
        if delegated.active:
            delegated.set_ctrl(ctrl.cpu().numpy())
            delegated.save()
        failed = self.physx.step(drive, nsteps, forces_tuple, self._mujoco_qfrc if delegated.active else None)
        self._stepped[:] = True  # envs the front end reverts next read zero again
        return failed

    def _mujoco_qfrc(self, states: np.ndarray) -> np.ndarray:
        """The per-substep hook of the CPU path: MuJoCo's forces for the serialised states PhysX is in."""
        return self.mujoco_forces.qfrc(*self.layout.state_from_pack(states))

    def revert(self, envs: torch.Tensor) -> None:
        mask: Any = envs if self._gpu else envs.cpu().numpy()
        self._stale()  # restored envs no longer hold the states the step reached
        if self.physx.revert(mask):  # and their contact forces from before the step
            self._kept |= mask.to(torch.bool) if self._gpu else np.asarray(mask, bool)
        if not self._gpu:
            self.mujoco_forces.restore(np.asarray(mask, bool))

    # ------------------------------------------------------------------
    # snapshots (CPU): PhysX's own serialisation of each env's scene, and the memory of MuJoCo's forces
    # ------------------------------------------------------------------
    @property
    def state_width(self) -> int:
        if self._gpu:
            raise UnsupportedFeatureError(self.name, "snapshot_restore", "on the GPU")
        return int(self.physx.cols.pack_size) + self.mujoco_forces.memory_width

    def save_state(self, env_ids: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [self.physx.serialised(env_ids).astype(np.float64), self.mujoco_forces.memory(env_ids)], axis=1
        )

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        packed = rows.cpu().numpy()[:, : self.physx.cols.pack_size]
        big = (np.abs(packed) > _FLOAT32_MAX).any(1)
        if big.any():
            raise ValueRangeError("state", env_ids[big], _FLOAT32_MAX)
        return self.layout.state_from_pack(packed.astype(np.float32))

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        self._stale()
        self._unstep(env_ids)
        r = rows.cpu().numpy()
        width = self.physx.cols.pack_size
        self.physx.restore_serialised(env_ids, r[:, :width].astype(np.float32))
        self.mujoco_forces.load_memory(env_ids, r[:, width:])

    # ------------------------------------------------------------------
    # rays, resources
    # ------------------------------------------------------------------
    def cast_rays(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> torch.Tensor:
        from .raycast import RayCaster  # rays against the shapes at the links' current poses (see .raycast)

        if self._ray_caster is None:
            self._ray_caster = RayCaster(self.plan, self.physx)
        caster = self._ray_caster
        ids = caster.bodies
        pos, quat = self.body_pose(ids)
        return caster.cast(origins, directions, exclude_body, pos, quat)

    def close(self) -> None:
        self.physx.close()
