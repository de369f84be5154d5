"""The MotrixSim engine: the SimBackend contract on Motrix's batched scene data.

One ``motrixsim.SceneData(batch=[N])`` holds every env; ``SceneModel.step``
advances them together on Motrix's thread pool (no Python loop over envs).
The model is compiled by MuJoCo, written back as MJCF and compiled again by
Motrix (:mod:`.loading`); names, orders and layouts are matched by name
(:mod:`.mapping`).

State: ``qpos``/``qvel`` are one column permutation of Motrix's ``dof_pos``/
``dof_vel`` (quaternions xyzw -> wxyz). ``set_state`` writes the named envs
through a view of the batch (``SceneData[DisjointIndices]``) with Motrix's
``reset`` and runs forward kinematics, so getters are current without a
step; a write of every env starts a fresh batch, since Motrix keeps contact
warm starts through ``reset``. Body poses and velocities come from
``get_link_poses``/``get_link_*_velocities`` (frame origins, world frame),
read for the bodies asked, once per state.

Contact forces (``contact_sensing=True``): Motrix's contact-force report
(``SceneModel.reports.contact_forces``), read with ``get_link_net_contact_forces``:
per env of the batch and per link, the net contact force on the link in world
frame, from the last substep of the last ``step``/``step_n`` (not summed over
them), contacts with both sides (link-link contacts count once for each link,
with its own sign), applied external forces excluded. Links are bodies one to
one (:mod:`.mapping`); welded static bodies have their own link and read the
reaction of what rests on them, as in MuJoCo. Motrix keeps a written env's
last report through ``reset``: rows of envs written since their last step are
zeroed here.

Divergence: Motrix never raises from a step and reports no per-env failure;
a blown-up env turns non-finite or huge, which the front end's rule
(:mod:`simbackend.divergence`) flags on the state read after the call; ``revert``
gives those envs their pre-call state back.

Everything is float32 (Motrix's real type), so the engine takes float32.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from simbackend.capabilities import CORE_SENSOR_TYPES, Capabilities
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import ModelLoadError, ValueRangeError
from simbackend.model_info import JOINT_BALL
from simbackend.models import describe_source, model_info
from simbackend.options import EngineOption, check_bool, check_positive_float, optional

from .loading import check_height_fields, load
from .mapping import WXYZ_FROM_XYZW, Mapping

#: domain-randomization terms applied through Motrix's per-instance overrides
DR_TERMS = (
    "body_mass",
    "body_com",
    "body_inertia",
    "geom_friction",
    "actuator_kp",
    "actuator_kv",
    "joint_armature",
    "joint_frictionloss",
    "gravity",
)
#: why ``geom_compliance`` (contact time constant and damping ratio) is not among them: motrixsim 0.10
#: sets a contact's spring-damper only in the scene description (``msd.PhysicsMaterial.contact_model``,
#: ``SpringDampCoeff``), when the model is built, for every instance of a batch; a ``Geom`` overrides
#: only its friction per instance (``set_friction_override``)
COMPLIANCE_NOTE = (
    "geom_compliance, geom_impedance not declared: Motrix sets contact stiffness/damping (PhysicsMaterial.contact_model)"
    " once per model when the scene is built, not per env; per env it overrides only friction"
)
#: Motrix's solver tolerance unless ``motrix={"solver_tolerance": ...}`` says otherwise. Motrix's own
#: default, 1e-4, leaves results depending on the solver's warm start by ~2e-6 (a restored state then
#: drifts from its twin beyond float32 precision); 1e-6 measured within one run's noise at N = 1024
#: (arm7 48k -> 44k, quadruped 55k -> 63k env-steps/s); 1e-8 cost 30 %.
DEFAULT_TOLERANCE = 1e-6
#: substeps per engine call when nothing must happen between substeps (a long call stays interruptible)
CHUNK = 32


def _is_panic(e: BaseException) -> bool:
    """A Rust panic inside Motrix, which pyo3 raises as ``PanicException`` (a ``BaseException``)."""
    return type(e).__name__ == "PanicException"


_pool_threads: int | None = None


def _thread_pool(nthread: int) -> int:
    """Start Motrix's per-process thread pool on first use; the number of threads it has."""
    global _pool_threads
    if _pool_threads is None:
        import os

        import motrixsim as mx

        try:
            mx.init_thread_pool(nthread or None)
            _pool_threads = nthread or (os.cpu_count() or 1)
        except RuntimeError:  # started already (a model was stepped before the first backend was built)
            _pool_threads = os.cpu_count() or 1
    return _pool_threads


class MotrixEngine(Engine):
    """MotrixSim engine (CPU).

    Model sources: an MJCF/URDF path, a ``mujoco.MjSpec`` or a built-in name (a
    compiled ``mujoco.MjModel`` only if this process wrote it as MJCF before:
    Motrix compiles MJCF itself). Options: the common ones
    (:mod:`simbackend.options`): ``nthread`` sizes Motrix's thread pool, which
    Motrix creates once per process (the first Motrix backend of a process sets
    it; the trajectories are bit-identical for any count); ``solver_iterations``
    (Motrix's ``max_iterations``, default 100); ``timestep`` and the model
    options. The block ``motrix={...}`` takes ``solver_tolerance`` (default
    1e-6, :data:`DEFAULT_TOLERANCE`; Motrix's own is 1e-4) and
    ``native_hfield`` (default True: a colliding height field loads with
    Motrix's own height-field collision, which differs from MuJoCo's, and a
    note says so; False refuses it, :func:`.loading.check_height_fields`).
    ``contact_sensing`` turns on Motrix's contact-force report (the trajectories
    stay bit-identical). Rays (the height scanner) are MuJoCo's ``mj_ray`` on
    the compiled model posed at Motrix's state (:mod:`.rays`).

    Raises:
        ModelLoadError: the model holds something Motrix cannot represent
            (the message names the element) or that cannot be matched to the
            compiled MuJoCo model.
    """

    name = "motrix"
    dtype = torch.float32
    distributions = ("motrixsim",)
    options = {
        "solver_tolerance": EngineOption(None, optional(check_positive_float), "Motrix solver tolerance"),
        "native_hfield": EngineOption(
            True,
            check_bool,
            "load colliding height fields with Motrix's own height-field collision (it differs from MuJoCo's;"
            " False refuses them)",
        ),
    }

    def __init__(self, build: EngineBuild):
        super().__init__(build)
        opts = build.options
        threads = _thread_pool(opts.nthread)
        import motrixsim as mx

        m, mm, notes = load(build.source, opts.model)
        notes = notes + check_height_fields(
            m, self.info.geom_names, describe_source(build.source), opts.engine["native_hfield"]
        )
        o = mm.options
        if opts.timestep is not None:
            m = copy.copy(m)
            m.opt.timestep = opts.timestep
            o.timestep = opts.timestep
        if opts.solver_iterations is not None:
            o.max_iterations = opts.solver_iterations
        tol = opts.engine["solver_tolerance"]
        o.solver_tolerance = DEFAULT_TOLERANCE if tol is None else tol
        self._contact_sensing = bool(opts.contact_sensing)
        if self._contact_sensing:  # a model-wide switch; this engine's model is its own (loaded above)
            mm.reports.contact_forces = True
        info = self.info
        if model_info(m).fingerprint != info.fingerprint:  # the source compiled again must be the same model
            raise ModelLoadError(
                f"{describe_source(build.source)}: compiling it again for Motrix gave another model"
                " (a source that changed since the backend compiled it?)"
            )
        mapping = Mapping(info, mm, describe_source(build.source))
        self._mx = mx
        self.model, self.mx_model, self.map = m, mm, mapping
        self.data = mx.SceneData(mm, batch=[self.num_envs])
        self._notes = tuple(notes) + (
            f"thread pool: {threads} threads (one pool per process)",
            f"solver: Motrix, at most {o.max_iterations} iterations, tolerance {o.solver_tolerance:g}",
            COMPLIANCE_NOTE,
        )
        self._reads: dict[tuple, np.ndarray] = {}
        self._state: tuple[np.ndarray, np.ndarray] | None = None
        self._rays: Any = None  # .rays.RayCaster, made by the first cast
        self._threads = threads
        self._before: tuple[np.ndarray, np.ndarray] | None = None  # the pre-call state of the last step
        self._sites = [mm.sites[int(k)] for k in mapping.site_index]
        self._ctrl = np.zeros((self.num_envs, mm.num_actuators), np.float32)
        self._dr_written: set[str] = set()
        #: whether each env has stepped since it was last written (written envs read no contact force)
        self._stepped = np.zeros(self.num_envs, dtype=bool)
        #: envs a revert put back, which read their contact reading from before the step (``_kept_reading``,
        #: ``(N, nlink, 3)``) until they step or are written
        self._kept = np.zeros(self.num_envs, dtype=bool)
        self._kept_reading: np.ndarray | None = None
        #: bodies Motrix folds into its static world (welded to it: Motrix holds no mass for them)
        self._static = frozenset(
            b
            for b in range(1, info.nbody)
            if float(mm.links[int(mapping.body_link[b])].mass) == 0.0 and info.body_mass[b] > 0
        )
        every = np.arange(self.num_envs)
        q0 = torch.as_tensor(np.tile(info.qpos0.astype(np.float32), (self.num_envs, 1)))
        self.write_state(every, q0, torch.zeros((self.num_envs, info.nv)))

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            gpu=False,
            joint_types=frozenset({"free", "ball", "hinge", "slide"}),
            actuator_kinds=frozenset({"motor", "position", "velocity", "other"}),
            sensor_types=CORE_SENSOR_TYPES,
            rendering=True,  # MuJoCo's renderer draws the compiled model at this backend's state
            snapshot_restore=True,
            snapshot_exact=False,
            contact_forces=True,  # with contact_sensing: Motrix's contact-force report
            ray_casting=True,  # MuJoCo's mj_ray on the compiled model at Motrix's state (.rays)
            domain_randomization=frozenset(f"{t}:{p}" for t in DR_TERMS for p in ("init", "reset", "interval")),
            renderers_absent=(
                (
                    "motrix",
                    "Motrix's renderer needs a GPU window and is not wired to this backend;"
                    " MuJoCo's renderer draws its state on any machine",
                ),
            ),
        )

    @property
    def notes(self) -> tuple[str, ...]:
        """What Motrix ignores of the model (never anything the dynamics needs: that is rejected), and the solver."""
        return self._notes

    # ------------------------------------------------------------------
    # reads: one engine call per state, cached until the state changes
    # ------------------------------------------------------------------
    def _invalidate(self) -> None:
        self._reads: dict[tuple, np.ndarray] = {}
        self._state = None

    def _dofs(self) -> tuple[np.ndarray, np.ndarray]:
        if self._state is None:
            self._state = (self.data.dof_pos, self.data.dof_vel)
        return self._state

    def read_state(self) -> tuple[np.ndarray, np.ndarray]:
        pos, vel = self._dofs()
        return pos[:, self.map.qpos_src], vel[:, self.map.qvel_src]

    def _links(self, kind: str, ids: np.ndarray) -> np.ndarray:
        """``(N, B, ·)`` of bodies ``ids``: ``"pos"``, ``"quat"`` (wxyz), ``"lin"`` (velocity of the frame
        origin) or ``"ang"``, world frame; the world body at rest. Read for these links only, once per state."""
        key = (kind, ids.tobytes())
        hit = self._reads.get(key)
        if hit is not None:
            return hit
        links = self.map.body_link[ids]
        world = links < 0
        sel = np.where(world, 0, links).tolist()
        mm, data = self.mx_model, self.data
        if kind in ("pos", "quat"):
            pose = mm.get_link_poses(data, sel)
            self._reads[("pos", key[1])] = pos = np.ascontiguousarray(pose[..., :3])
            self._reads[("quat", key[1])] = quat = np.ascontiguousarray(pose[..., 3:][..., WXYZ_FROM_XYZW])
            if world.any():
                pos[:, world] = 0.0
                quat[:, world] = (1.0, 0.0, 0.0, 0.0)
            return self._reads[key]
        out = (mm.get_link_linear_velocities if kind == "lin" else mm.get_link_angular_velocities)(data, sel)
        if world.any():
            out[:, world] = 0.0
        self._reads[key] = out
        return out

    def body_pose(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._links("pos", ids), self._links("quat", ids)

    def body_velocity(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._links("lin", ids), self._links("ang", ids)

    def contact_forces(self, body_ids: np.ndarray) -> np.ndarray:
        """Motrix's per-link net contact force (world frame, last substep; the moment about the link's
        centre of mass is dropped), read for every link once per state. The world body has no link
        and reads zero; so do envs written since their last step (Motrix keeps their old report)."""
        assert self._contact_sensing  # the front end calls this only with contact_sensing
        every = self._link_contacts()
        links = self.map.body_link[body_ids]
        force = np.zeros((self.num_envs, links.size, 3), every.dtype)
        linked = links >= 0
        force[:, linked] = every[:, links[linked]]
        return force

    def _link_contacts(self) -> np.ndarray:
        """``(N, nlink, 3)`` every env's contact reading per link: Motrix's report of the last substep,
        zero for envs written since their last step, the reading from before the step for envs a revert
        put back (Motrix keeps the report of the step undone)."""
        every = self._reads.get(("contact",))
        if every is None:
            every = np.array(self.mx_model.get_link_net_contact_forces(self.data)[..., :3])
            every[~self._stepped] = 0.0
            if self._kept_reading is not None and self._kept.any():
                every[self._kept] = self._kept_reading[self._kept]
            self._reads[("contact",)] = every
        return every

    def _site_poses(self, ids: np.ndarray) -> np.ndarray:
        """``(N, S, 7)`` site poses (pos + xyzw) of sites ``ids``."""
        out = np.empty((self.num_envs, ids.size, 7), np.float32)
        for k, s in enumerate(ids):
            out[:, k] = self._sites[int(s)].get_pose(self.data)
        return out

    def site_pose(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        poses = self._site_poses(ids)
        return poses[..., :3], poses[..., 3:][..., WXYZ_FROM_XYZW]

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        site = self._sites[site_id]
        compact = site.get_jacobian(self.data)  # (N, 6, k): angular rows, then linear
        full = np.zeros((self.num_envs, 6, self.info.nv), np.float32)
        full[:, :, self.map.qvel_of_dof[np.asarray(site.dof_vel_indices, np.int64)]] = compact
        full = full[:, :, cols]
        return full[:, 3:], full[:, :3]

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def _view(self, env_ids: np.ndarray) -> Any:
        """The envs ``env_ids`` of the batch, as a Motrix data view that writes through."""
        if env_ids.size == self.num_envs:
            return self.data
        return self.data[self._mx.DisjointIndices(np.asarray(env_ids, np.int64))]

    def _write_dofs(
        self,
        env_ids: np.ndarray,
        dof_pos: np.ndarray,
        dof_vel: np.ndarray,
        exact: bool = False,
        keep_caches: bool = False,
    ) -> None:
        """Write Motrix-order rows of sorted envs: Motrix's reset of those envs (model overrides kept),
        then forward kinematics. ``exact``: the positions bit for bit (Motrix's reset normalises
        quaternions again, which moves their last bits; a restored state must not move).
        ``keep_caches``: an undone step (its envs go on as if it had not been called), not a new start."""
        if env_ids.size == self.num_envs and not keep_caches:
            self._fresh_data()
        self._stepped[env_ids] = False  # their last contact report describes another state
        self._kept[env_ids] = False
        if self.mx_model.num_dof_pos == 0:  # nothing moves (Motrix panics on a reset of no DoF): no state to write
            self._invalidate()
            return
        view = self._view(env_ids)
        dof_pos = np.ascontiguousarray(dof_pos, np.float32)
        view.reset(
            self.mx_model,
            dof_pos=dof_pos,
            dof_vel=np.ascontiguousarray(dof_vel, np.float32),
            forward_kinematic=not exact,
            reset_overrides=False,
        )
        if exact:  # the whole batch's positions, unchanged but for these rows (views take no raw writes)
            full = self.data.dof_pos
            full[env_ids] = dof_pos
            self.data.low.set_dof_positions_unchecked(full)
            self.mx_model.forward_kinematic(self.data)
        self._invalidate()

    def _fresh_data(self) -> None:
        """A new batch, with the randomized model values carried over: Motrix keeps contact warm starts
        through ``reset``, so only fresh data replays bit for bit (a subset write cannot clear them)."""
        carried = {name: self.read_params(name) for name in self._dr_written}
        self.data = self._mx.SceneData(self.mx_model, batch=[self.num_envs])
        if carried:
            self.write_params(np.arange(self.num_envs), carried)

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        n = env_ids.size
        dof_pos = np.empty((n, self.mx_model.num_dof_pos), np.float32)
        dof_vel = np.empty((n, self.mx_model.num_dof_vel), np.float32)
        dof_pos[:, self.map.qpos_src] = qpos.numpy()
        dof_vel[:, self.map.qvel_src] = qvel.numpy()
        self._write_dofs(env_ids, dof_pos, dof_vel)

    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> torch.Tensor | None:
        mm, data = self.mx_model, self.data
        self._before = None
        self._ctrl[:, self.map.actuator_src] = ctrl.numpy()  # Motrix clamps to the ctrl ranges itself
        before = self._dofs()
        if self._contact_sensing:  # what a revert gives back
            self._kept_reading = self._link_contacts()
        self._before = before
        self._kept[:] = False
        pending = self._pending_forces(forces)
        if self._ctrl.shape[1]:  # Motrix panics on an empty control array
            data.actuator_ctrls = self._ctrl
        self._invalidate()
        self._stepped[:] = True  # a step that raises from here is reverted, which clears it again
        failed = None
        try:
            self._substeps(data, nsteps, pending)
        except BaseException as e:
            if not _is_panic(e):
                raise
            failed = self._step_apart(nsteps, pending)
        mm.forward_kinematic(data)  # Motrix's link states after a step describe the state before its last substep
        self._invalidate()
        # Motrix reports no per-env failure: the front end's rule judges the state, but for envs whose
        # substeps made Motrix panic
        return failed

    def _substeps(self, data: Any, nsteps: int, pending: list) -> None:
        """``nsteps`` of Motrix's substeps on ``data`` (the batch or a view of some envs, ``pending``'s force
        rows being theirs)."""
        mm, done = self.mx_model, 0
        while done < nsteps:
            if pending:  # Motrix clears external forces after every substep: add them to each
                for link, f, t in pending:
                    link.add_external_force(data, f, local=False)
                    link.add_external_torque(data, t, local=False)
                mm.step(data)
                done += 1
            else:
                k = min(CHUNK, nsteps - done)
                mm.step_n(data, k) if k > 1 else mm.step(data)
                done += k

    def _step_apart(self, nsteps: int, pending: list) -> torch.Tensor:
        """After Motrix panicked on the batch's substeps (its solver's factorization fails on a blown-up
        state, e.g. under a 1e30 N push): every env back at its pre-call state, then each env stepped on
        its own (a view of one env: bit for bit what the batch gives it). Returns the ``(N,)`` mask of the
        envs that panic alone; the front end reverts and reports them as diverged."""
        pos, vel = self._before
        every = np.arange(self.num_envs)
        self._write_dofs(every, pos, vel, exact=True, keep_caches=True)
        if self._ctrl.shape[1]:  # Motrix's reset clears the controls
            self.data.actuator_ctrls = self._ctrl
        self._stepped[:] = True
        failed = torch.ones(self.num_envs, dtype=torch.bool)
        if self.num_envs == 1:
            return failed
        for i in range(self.num_envs):
            rows = [(link, f[i : i + 1], t[i : i + 1]) for link, f, t in pending]
            try:
                self._substeps(self._view(np.array([i])), nsteps, rows)
            except BaseException as e:
                if not _is_panic(e):
                    raise
                continue
            failed[i] = False
        return failed

    def revert(self, envs: torch.Tensor) -> None:
        if self._before is None:  # the step raised before it changed anything
            return
        mask = envs.cpu().numpy()
        pos, vel = self._before
        if mask.all():  # an undone step: its envs go on as if it had not been called
            self._write_dofs(np.arange(self.num_envs), pos, vel, exact=True, keep_caches=True)
        else:
            ids = np.flatnonzero(mask)
            self._write_dofs(ids, pos[ids], vel[ids], exact=True, keep_caches=True)
        self._kept |= mask  # and their contact readings from before the step

    def _pending_forces(self, forces: BodyForces | None) -> list:
        if forces is None:
            return []
        out = []
        for k, b in enumerate(forces.bodies):
            link = self.mx_model.links[int(self.map.body_link[b])]
            out.append(
                (
                    link,
                    np.ascontiguousarray(forces.force[:, k].numpy()),
                    np.ascontiguousarray(forces.torque[:, k].numpy()),
                )
            )
        return out

    # ------------------------------------------------------------------
    # model read back, domain randomization through Motrix's per-instance overrides
    # ------------------------------------------------------------------
    def model_fields(self) -> dict[str, np.ndarray]:
        """What Motrix holds (its links, joints, actuators and options), in the compiled model's order."""
        mm, info = self.mx_model, self.info
        nb = info.nbody
        mass, com, inertia = np.zeros(nb), np.zeros((nb, 3)), np.zeros((nb, 3, 3))
        pristine = self._mx.SceneData(mm, batch=[1])  # the model's values: no env's randomization
        for b in range(1, nb):
            if b in self._static:  # never moves: Motrix holds no mass for it; the model's values stand
                mass[b], com[b] = info.body_mass[b], info.body_com[b]
                inertia[b] = self._principal_to_tensor(b)
                continue
            link = mm.links[int(self.map.body_link[b])]
            mass[b] = float(link.mass)
            com[b] = np.asarray(link.center_of_mass, np.float64)
            inertia[b] = _inertia_matrix(np.asarray(link.get_inertia_override(pristine), np.float64).reshape(6))
        joint_range = np.tile([-np.inf, np.inf], (len(info.joint_names), 1))
        for j, k in enumerate(self.map.joint_index):
            if k >= 0 and info.joint_type[j] != JOINT_BALL:
                joint_range[j] = np.asarray(mm.joints[int(k)].range, np.float64).reshape(-1)[:2]
        acts = [mm.actuators[int(k)] for k in self.map.actuator_src]
        ctrl = np.array([_range(a.ctrl_range) for a in acts]).reshape(info.nu, 2)
        force = np.array([_range(a.force_range) for a in acts]).reshape(info.nu, 2)
        return {
            "body_mass": mass,
            "body_com": com,
            "body_inertia": inertia,
            "joint_range": joint_range,
            "actuator_ctrl_range": ctrl,
            "actuator_force_range": force,
            "timestep": np.asarray(float(mm.options.timestep)),
            "gravity": np.asarray(mm.options.gravity, np.float64).reshape(-1)[:3],
        }

    def _principal_to_tensor(self, b: int) -> np.ndarray:
        from simbackend.math import quat_to_matrix

        r = quat_to_matrix(torch.tensor(self.info.body_iquat[b])).numpy()
        return r @ np.diag(self.info.body_inertia[b]) @ r.T

    def write_params(self, env_ids: np.ndarray, values: Any) -> None:
        mm, info, view = self.mx_model, self.info, self._view(env_ids)
        self._dr_written |= set(values)
        f32 = lambda a: np.ascontiguousarray(a, np.float32)  # noqa: E731
        # bodies welded to the world are part of Motrix's static world (the core never randomizes them)
        links = [(b, mm.links[int(self.map.body_link[b])]) for b in range(1, info.nbody) if b not in self._static]
        if "body_mass" in values:
            for b, link in links:
                link.set_mass_override(view, f32(values["body_mass"][:, b]))
        if "body_com" in values:
            for b, link in links:
                link.set_center_of_mass_override(view, f32(values["body_com"][:, b]))
        if "body_inertia" in values:
            axes = info.body_iquat[:, [1, 2, 3, 0]]
            for b, link in links:
                rows = values["body_inertia"][:, b]
                link.set_principal_inertia_override(view, f32(rows), f32(np.broadcast_to(axes[b], (rows.shape[0], 4))))
        if "geom_friction" in values:
            for g, name in enumerate(info.geom_names):
                mm.get_geom(name).set_friction_override(view, f32(values["geom_friction"][:, g]))
        for field, setter in (
            ("dof_armature", "set_armature_override"),
            ("dof_frictionloss", "set_frictionloss_override"),
        ):
            if field in values:
                for j, k in enumerate(self.map.joint_index):
                    if k < 0:
                        continue
                    adr = int(info.joint_dofadr[j])
                    width = 3 if info.joint_type[j] == JOINT_BALL else 1
                    rows = values[field][:, adr : adr + width]
                    getattr(mm.joints[int(k)], setter)(view, f32(rows[:, 0] if width == 1 else rows))
        if "gravity" in values:
            mm.set_gravity_override(view, f32(values["gravity"]))
        if "actuator_kp" in values or "actuator_kv" in values:
            self._write_gains(view, values.get("actuator_kp"), values.get("actuator_kv"))
        self._invalidate()

    def _write_gains(self, view: Any, kp: np.ndarray | None, kv: np.ndarray | None) -> None:
        """Servo gains through the override each Motrix actuator class has. A general actuator's force
        is ``gain ctrl + bias - stiffness q - damping qdot``: a position servo's kp is its gain and its
        stiffness, kv its damping; a velocity servo's kv is its gain and its damping."""
        info = self.info
        for a, kind in enumerate(info.actuator_kind):
            act = self.mx_model.actuators[int(self.map.actuator_src[a])]
            k = None if kp is None else np.ascontiguousarray(kp[:, a], np.float32)
            d = None if kv is None else np.ascontiguousarray(kv[:, a], np.float32)
            if kind == "position":
                if k is not None:
                    if hasattr(act, "set_kp_override"):  # Motrix's PositionActuator
                        act.set_kp_override(view, k)
                    else:
                        act.set_gain_override(view, k)
                        act.set_stiffness_override(view, k)
                if d is not None:
                    act.set_damping_override(view, d)
            elif kind == "velocity" and d is not None:
                if hasattr(act, "set_kv_override"):  # Motrix's VelocityActuator
                    act.set_kv_override(view, d)
                else:
                    act.set_gain_override(view, d)
                    act.set_damping_override(view, d)

    def read_params(self, field: str) -> np.ndarray | None:
        name = field
        mm, info, data = self.mx_model, self.info, self.data
        n = self.num_envs
        moving = [b for b in range(1, info.nbody) if b not in self._static]
        if name == "body_mass":
            out = np.array(np.broadcast_to(info.body_mass, (n, info.nbody)))
            for b in moving:
                out[:, b] = mm.links[int(self.map.body_link[b])].get_mass_override(data)
            return out
        if name == "body_com":
            out = np.array(np.broadcast_to(info.body_com, (n, info.nbody, 3)))
            for b in moving:
                out[:, b] = mm.links[int(self.map.body_link[b])].get_center_of_mass_override(data)
            return out
        if name == "geom_friction":
            return np.stack(
                [np.asarray(mm.get_geom(g).get_friction_override(data), np.float64) for g in info.geom_names], axis=1
            ).reshape(n, info.ngeom, 3)
        if name == "gravity":
            return np.asarray(mm.get_gravity_override(data), np.float64).reshape(n, 3)
        if name == "body_inertia":  # the full tensors, seen in each body's principal axes
            from simbackend.math import quat_to_matrix

            out = np.array(np.broadcast_to(info.body_inertia, (n, info.nbody, 3)))
            axes = quat_to_matrix(torch.tensor(info.body_iquat)).numpy()
            for b in moving:
                rows = np.asarray(mm.links[int(self.map.body_link[b])].get_inertia_override(data), np.float64)
                out[:, b] = np.einsum("ji,njk,ki->ni", axes[b], _inertia_matrix(rows.reshape(n, 6)), axes[b])
            return out
        if name in ("actuator_kp", "actuator_kv"):
            out = np.array(np.broadcast_to(getattr(info, name), (n, info.nu)), np.float64)
            for a, kind in enumerate(info.actuator_kind):
                act = mm.actuators[int(self.map.actuator_src[a])]
                if kind == "position":
                    getter = (
                        ("get_kp_override" if hasattr(act, "get_kp_override") else "get_gain_override")
                        if name == "actuator_kp"
                        else ("get_kd_override" if hasattr(act, "get_kd_override") else "get_damping_override")
                    )
                elif kind == "velocity" and name == "actuator_kv":
                    getter = "get_kv_override" if hasattr(act, "get_kv_override") else "get_damping_override"
                else:
                    continue
                out[:, a] = np.asarray(getattr(act, getter)(data), np.float64).reshape(n)
            return out
        if name in ("dof_armature", "dof_frictionloss"):
            out = np.array(np.broadcast_to(getattr(info, name), (n, info.nv)), np.float64)
            getter = "get_armature_override" if name == "dof_armature" else "get_frictionloss_override"
            for j, k in enumerate(self.map.joint_index):
                if k >= 0:
                    adr = int(info.joint_dofadr[j])
                    width = 3 if info.joint_type[j] == JOINT_BALL else 1
                    out[:, adr : adr + width] = np.asarray(
                        getattr(mm.joints[int(k)], getter)(data), np.float64
                    ).reshape(n, width)
            return out
        return None

    # ------------------------------------------------------------------
    # snapshots: Motrix's own state (dof_pos, dof_vel) of each env
    # ------------------------------------------------------------------
    @property
    def state_width(self) -> int:
        return int(self.mx_model.num_dof_pos + self.mx_model.num_dof_vel)

    def save_state(self, env_ids: np.ndarray) -> np.ndarray:
        pos, vel = self._dofs()
        return np.concatenate([pos[env_ids], vel[env_ids]], axis=1).astype(np.float64)

    def _split(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = self.mx_model.num_dof_pos
        return rows[:, :p], rows[:, p:]

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        host = rows.cpu().numpy()
        pos, vel = self._split(host)
        big = (np.abs(host) > np.finfo(np.float32).max).any(1)
        if big.any():
            raise ValueRangeError("state", env_ids[big], float(np.finfo(np.float32).max))
        return pos[:, self.map.qpos_src], vel[:, self.map.qvel_src]

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        pos, vel = self._split(rows.cpu().numpy())
        self._write_dofs(env_ids, pos, vel, exact=True)

    # ------------------------------------------------------------------
    # rays: mj_ray on the compiled model posed at Motrix's state (see .rays for why not Motrix's own)
    # ------------------------------------------------------------------
    def cast_rays(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> np.ndarray:
        """Every env's rays against the collision geoms where Motrix holds the bodies now (:mod:`.rays`)."""
        from .rays import RayCaster

        if self._rays is None:
            self._rays = RayCaster(self.model, self.num_envs, self._threads)
        qpos = self.read_state()[0]
        return self._rays.cast(qpos, origins.cpu().numpy(), directions.cpu().numpy(), exclude_body)

    def close(self) -> None:
        self.data = None
        self._rays = None
        self._invalidate()


def _range(value: Any) -> np.ndarray:
    """``[low, high]`` from a Motrix range; ``None`` (unlimited) is ``[-inf, inf]``."""
    if value is None:
        return np.array([-np.inf, np.inf])
    return np.asarray(value, np.float64).reshape(-1)[:2]


def _inertia_matrix(rows: np.ndarray) -> np.ndarray:
    """``(..., 3, 3)`` from Motrix's ``(..., 6)`` ``[Ixx, Iyy, Izz, Ixy, Ixz, Iyz]``."""
    r = np.asarray(rows, np.float64)
    xx, yy, zz, xy, xz, yz = (r[..., k] for k in range(6))
    return np.stack([np.stack([xx, xy, xz], -1), np.stack([xy, yy, yz], -1), np.stack([xz, yz, zz], -1)], -2)


__all__ = ["MotrixEngine"]
