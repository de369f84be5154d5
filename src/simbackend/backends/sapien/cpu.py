"""CPU PhysX: one ``sapien.Scene`` with only a ``PhysxCpuSystem`` per env.

Reads fill buffers of PhysX's GPU layout (see :mod:`.layout`), lazily and
only for what a getter needs: ``link_data`` reads the requested links of every
env once per state, ``art_qpos``/``art_qvel`` one call per articulation.

The scenes are stepped one after another on the calling thread (SAPIEN holds
the GIL in ``system.step()``), so Ctrl-C is seen between two scenes' steps.
The pre-call state of a step is PhysX's own serialisation of each scene
(``PhysxCpuSystem.pack()``), kept from the end of the previous call; the
states serialised after the call serve the divergence verdict and the next
call. ``set_state`` gives the named envs fresh scenes: PhysX keeps contact
and broad-phase state across a teleport, and even articulations removed and
built again inside a used scene do not replay bit for bit, so only a new
scene makes a replay from the same state reproduce the same trajectory.

One scene per env, and so SAPIEN's cap of :data:`MAX_CPU_SCENES` scenes per
process, because several envs in one scene cannot stay independent: envs
placed apart follow different float32 trajectories, and envs sharing the
origin (kept apart by collision bits, which does reproduce each env's
trajectory bit for bit) would need a new scene for all of them whenever one
is reset, which perturbs the others (measurements in docs/engines.md, "The CPU
scene cap").

Contact forces (:meth:`CpuPhysx.contact_forces`) are computed on demand for
the last ``system.step()`` (the last substep), friction included
(:mod:`.contact`): PhysX's contact report says which bodies touched and the
normal impulses; the net force is the solver's, from each link's velocity
change and incoming joint forces. While stepping, only the links' velocities
and masses and the forces applied before the last substep are kept.
"""

from __future__ import annotations

import weakref

import numpy as np
import sapien
import torch
from sapien import physx

from simbackend.errors import InvalidArgumentError, SimBackendError
from simbackend.math import quat_apply
from simbackend.model_info import JOINT_FREE, JOINT_HINGE, JOINT_SLIDE

from .contact import ContactDerivation, joint_frames
from .layout import Columns
from .paths import JointForces, PhysxPath, scene_config
from .plan import Plan
from .scene import MaterialCache, build_scene, pose

#: SAPIEN 3.0.3 aborts the interpreter ("Couldn't create autoTSSkey mapping") when more
#: than about 1000 CPU PhysX systems alive in one process are destroyed
MAX_CPU_SCENES = 1000
_alive = [0]


def _release(n: int) -> None:
    _alive[0] -= n


class CpuPhysx(PhysxPath):
    """``num_envs`` CPU scenes; buffer row of env n's articulation a is ``n * A + a``.

    Args:
        plan: the build plan.
        num_envs: N.
        iterations: PhysX (position, velocity) solver iterations.
        tgs: TGS instead of PGS.
    """

    def __init__(self, plan: Plan, num_envs: int, iterations: tuple[int, int], tgs: bool):
        super().__init__(plan, num_envs)
        if _alive[0] + num_envs > MAX_CPU_SCENES:
            raise InvalidArgumentError(
                f"num_envs: {num_envs} CPU PhysX scenes with {_alive[0]} already alive in this process exceed"
                f" {MAX_CPU_SCENES}: SAPIEN {sapien.__version__} aborts the interpreter when it frees more;"
                " split the envs over processes with shards=K, about 500 envs a shard or fewer (command line:"
                " --shards K; each shard is a Ray actor, docs/sharding.md), close other sapien backends, or use"
                " device='cuda' (one GPU system holds every env)"
            )
        _alive[0] += num_envs
        self._finalizer = weakref.finalize(self, _release, num_envs)
        self._materials = MaterialCache()
        self._iterations, self._tgs = iterations, tgs
        #: (N, 3) per-env gravity once randomized; ``on_rebuild(env_ids)`` re-applies randomized parameters
        self.env_gravity: np.ndarray | None = None
        self.on_rebuild = None
        self.systems, self.scenes, self.arts, self.comps = [], [], [], []
        with scene_config(plan.gravity, tgs):
            for _ in range(num_envs):
                system, scene, arts, comps = self._build_env()
                self.systems.append(system)
                self.scenes.append(scene)
                self.arts.append(arts)
                self.comps.append(comps)
        #: (articulation, link, gravcomp) of the bodies MuJoCo compensates gravity on (moving links only)
        self._gravcomp = [
            (int(plan.body_link[b, 0]), int(plan.body_link[b, 1]), float(plan.gravcomp[b]))
            for b in np.flatnonzero(plan.gravcomp)
            if plan.body_link[b, 0] >= 0
        ]
        self.cols = cols = Columns.read(plan, self.arts[0], self.comps[0])
        got = len(self.systems[0].pack()) // 4
        if got != cols.pack_size:
            raise SimBackendError(
                f"sapien {sapien.__version__}: PhysX's serialised state has {got} values where {cols.pack_size} were"
                " expected; this SAPIEN version is not supported (use sapien>=3.0.3,<3.1)"
            )
        A = self.num_arts
        self.rows = np.arange(num_envs * A, dtype=np.int64).reshape(num_envs, A)
        self.origins = np.zeros((num_envs, 3))
        R = num_envs * A
        self._links = np.zeros((R, cols.max_links, 13))
        self._links[..., 3] = 1.0
        self._qpos = np.zeros((R, cols.max_dof))
        self._qvel = np.zeros((R, cols.max_dof))
        self._qacc_buf = np.zeros((R, cols.max_dof), np.float32)
        self._fresh_pose = np.zeros((A, cols.max_links), bool)
        self._fresh_vel = np.zeros((A, cols.max_links), bool)
        self._fresh_q = self._fresh_v = False
        p = plan
        self._pos_j = [j for j in p.drive_joints if p.stiffness[j] > 0]
        self._vel_j = [
            j for j in p.drive_joints if p.drive_damping(p.stiffness, p.damping)[j] > 0 and p.vel_gain[:, j].any()
        ]
        motor = np.flatnonzero(p.motor_gear.any(0))
        motor_art = p.joint_link[motor, 0]
        #: per articulation with motor joints: (its motor joints, their PhysX dof indices)
        self._motors = {
            int(a): (motor[motor_art == a], cols.joint_dof[motor[motor_art == a]]) for a in np.unique(motor_art)
        }
        self._joint_objs: list = [None] * num_envs
        self._packed: list = [None] * num_envs  # each env's serialised state as of the end of the last call
        self._before: list = []  # the pre-call states of the running step
        self._after: list = []  # the states it reached
        self._dof_arts = [a for a in range(A) if cols.art_dofs[a]]
        kinds = np.asarray(p.info.joint_type)
        self._scalar = np.flatnonzero(np.isin(kinds, (JOINT_HINGE, JOINT_SLIDE)))
        self._scalar_art = p.joint_link[self._scalar, 0]
        self._free = np.flatnonzero(kinds == JOINT_FREE)
        #: (N, D) joint forces of the running step's motors, per articulation that has motors
        self._qf: dict = {}
        #: per env, {link component: MuJoCo body} of the links that carry collision shapes (built on
        #: first use, dropped with the env's scene); a component not in it is the static world
        self._contact_body: list[dict | None] = [None] * num_envs
        #: the net contact force's tables (:mod:`.contact`); per step, before its last substep (with
        #: contact_sensing): ``(N, K, 3)`` link velocities and ``(N, K)`` masses of the bodies that can
        #: touch, and the ``(N, K, 3)`` forces applied outside the solver (None: none)
        self._contact = ContactDerivation(plan, cols, joint_frames(plan, self.comps[0]), torch.device("cpu"))
        self._v0: np.ndarray | None = None
        self._mass0: np.ndarray | None = None
        self._applied: np.ndarray | None = None
        self._recording = False
        #: {(articulation, plan link): body column} of the bodies whose force is derived
        self._k_of_link = {
            (int(self._contact.art[k]), int(plan.body_link[b, 1])): k
            for k, b in enumerate(self._contact.bodies)
            if self._contact.derived[k]
        }
        self._jf = np.zeros((num_envs * self.num_arts, cols.max_links, 6))
        #: envs given new scenes that keep their state (:meth:`regravitate`): the ``(nbody, 3)`` contact
        #: forces their old scene reported, read until the next step
        self._held: dict[int, np.ndarray] = {}
        #: ``(N, nbody, 3)`` contact forces of the last step, computed on the first read after it
        self._contact_cache: np.ndarray | None = None
        self._set_drives()
        for n in range(num_envs):
            self._cache_joints(n)

    def _build_env(self):
        system = physx.PhysxCpuSystem()
        system.timestep = self.plan.timestep
        scene = sapien.Scene([system])
        arts, comps = build_scene(self.plan, scene, self._materials, self._iterations)
        return system, scene, arts, comps

    def _cache_joints(self, n: int) -> None:
        """Env ``n``'s PhysX joint objects of position- and velocity-driven joints, looked up once."""
        jl = self.plan.joint_link
        comps = self.comps[n]
        self._joint_objs[n] = (
            [comps[jl[j, 0]][jl[j, 1]].joint for j in self._pos_j],
            [comps[jl[j, 0]][jl[j, 1]].joint for j in self._vel_j],
        )

    def _rebuild(self, env_ids: np.ndarray) -> None:
        """Fresh scenes for ``env_ids`` (see the module docstring), with each env's gravity and
        randomized parameters (``on_rebuild``)."""
        for n in env_ids:
            g = self.plan.gravity if self.env_gravity is None else self.env_gravity[n]
            with scene_config(g, self._tgs):
                self.systems[n], self.scenes[n], self.arts[n], self.comps[n] = self._build_env()
            self._packed[n] = None
            self._contact_body[n] = None
            self._held.pop(int(n), None)
            if self._contact_cache is not None:
                self._contact_cache[n] = 0.0  # a new scene has reported no contact
        self._set_drives(env_ids)
        for n in env_ids:
            self._cache_joints(n)
        if self.on_rebuild is not None:
            self.on_rebuild(env_ids)

    def regravitate(self, env_ids: np.ndarray, gravity: np.ndarray) -> None:
        """Give envs ``env_ids`` gravity ``gravity[n]`` ``(N, 3)``: PhysX fixes it when a scene is
        made, so they get new scenes carrying their state over (PhysX's serialisation)."""
        self.env_gravity = np.array(gravity, np.float64)
        states = [self.systems[n].pack() for n in env_ids]
        held = None
        if self.contact_sensing:  # a new scene has reported no contact: keep the old one's, until the next step
            ids = np.asarray(env_ids, np.int64)
            held = self._body_contact_forces(ids) if self._contact_cache is None else self._contact_cache[ids]
        self._rebuild(env_ids)
        for n, packed in zip(env_ids, states):
            self.systems[n].unpack(packed)
        if held is not None:
            self._held.update({int(n): f for n, f in zip(env_ids, held)})
            if self._contact_cache is not None:
                self._contact_cache[env_ids] = held
        self._stale()

    def serialised(self, env_ids: np.ndarray) -> np.ndarray:
        """``(n, pack_size)`` float32: PhysX's own serialisation of envs ``env_ids``' scenes."""
        states = [self._packed[n] if self._packed[n] is not None else self.systems[n].pack() for n in env_ids]
        return np.frombuffer(b"".join(states), np.float32).reshape(len(env_ids), self.cols.pack_size).copy()

    def restore_serialised(self, env_ids: np.ndarray, states: np.ndarray) -> None:
        """Fresh scenes for sorted ``env_ids`` (no contact or broad-phase cache from before), holding
        the serialised states ``(n, pack_size)`` float32 of :meth:`serialised`."""
        self._rebuild(env_ids)
        for n, row in zip(env_ids, states):
            packed = np.ascontiguousarray(row, np.float32).tobytes()
            self.systems[n].unpack(packed)
            self._packed[n] = packed
        self._stale()

    def static_shapes(self, n: int) -> list:
        """Env ``n``'s collision shapes of the static world actor, in plan order."""
        for e in self.scenes[n].entities:
            if e.name == "world":
                for c in e.components:
                    if isinstance(c, physx.PhysxRigidStaticComponent):
                        return list(c.collision_shapes)
        return []

    # ------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------
    def _stale(self) -> None:
        self._fresh_pose[:] = False
        self._fresh_vel[:] = False
        self._fresh_q = self._fresh_v = False

    def link_data(
        self,
        body_ids: np.ndarray | None,
        arts: np.ndarray | None = None,
        velocities: bool = False,
        links: np.ndarray | None = None,
    ) -> torch.Tensor:
        """The ``(R, L, 13)`` buffer with the poses (and, if asked, velocities) of the
        requested bodies' links, of every link of ``arts`` and of the ``(A, Lmax)`` plan links
        ``links``, current."""
        need = np.zeros_like(self._fresh_pose) if links is None else np.array(links, bool)
        if body_ids is not None:
            bl = self.plan.body_link[np.asarray(body_ids)]
            bl = bl[bl[:, 0] >= 0]
            need[bl[:, 0], bl[:, 1]] = True
        if arts is not None:
            for a in arts:
                need[a, : len(self.plan.articulations[a].links)] = True
        need_pose = need & ~self._fresh_pose
        need_vel = need & ~self._fresh_vel if velocities else np.zeros_like(need)
        buf = self._links
        if need_pose.any():
            pairs = [(int(a), int(l), int(self.cols.link_col[a, l])) for a, l in zip(*np.nonzero(need_pose))]
            for n, comps in enumerate(self.comps):
                base = n * self.num_arts
                for a, l, c in pairs:
                    p = comps[a][l].entity_pose
                    row = buf[base + a, c]
                    row[:3] = p.p
                    row[3:7] = p.q
            self._fresh_pose |= need_pose
        if need_vel.any():
            pairs = [(int(a), int(l), int(self.cols.link_col[a, l])) for a, l in zip(*np.nonzero(need_vel))]
            for n, comps in enumerate(self.comps):
                base = n * self.num_arts
                for a, l, c in pairs:
                    comp = comps[a][l]
                    row = buf[base + a, c]
                    row[7:10] = comp.linear_velocity
                    row[10:13] = comp.angular_velocity
            self._fresh_vel |= need_vel
        return torch.from_numpy(self._links)

    def _read_joints(self, buf: np.ndarray, getter: str) -> None:
        A = self.num_arts
        with_dofs = [(a, int(self.cols.art_dofs[a])) for a in self._dof_arts]
        for n, arts in enumerate(self.arts):
            for a, d in with_dofs:
                buf[n * A + a, :d] = getattr(arts[a], getter)()

    def art_qpos(self) -> torch.Tensor:
        if not self._fresh_q and self.cols.has_dofs:
            self._read_joints(self._qpos, "get_qpos")
            self._fresh_q = True
        return torch.from_numpy(self._qpos)

    def art_qvel(self) -> torch.Tensor:
        if not self._fresh_v and self.cols.has_dofs:
            self._read_joints(self._qvel, "get_qvel")
            self._fresh_v = True
        return torch.from_numpy(self._qvel)

    # ------------------------------------------------------------------
    # contact forces
    # ------------------------------------------------------------------
    def _contact_map(self, n: int) -> dict:
        """Env ``n``'s {link component: MuJoCo body} of the links with collision shapes."""
        found = self._contact_body[n]
        if found is None:
            comps = self.comps[n]
            found = self._contact_body[n] = {
                comps[a][l]: b
                for b, (a, l) in enumerate(self.plan.body_link)
                if a >= 0 and self.plan.articulations[a].links[l].shapes
            }
        return found

    def _body_contact_forces(self, envs: np.ndarray) -> np.ndarray:
        """``(len(envs), nbody, 3)`` float64 net contact force on every body, world frame, N, in the
        last ``system.step()`` of envs ``envs``' scenes, friction included: :meth:`reported` for the
        bodies that touch and fixed root links, derived from the solver's result for the moving
        links (:mod:`.contact`). Row 0 (the static world actor) is zero."""
        out, touching = self.reported(envs)
        d = self._contact
        if self._v0 is not None and touching[:, d.bodies].any():
            out[:, d.bodies] = self._derived(np.asarray(envs), out[:, d.bodies], touching[:, d.bodies])
        out[:, 0] = 0.0
        return out

    def reported(self, envs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """PhysX's contact report of envs ``envs``' last ``system.step()``: ``(len(envs), nbody, 3)`` the
        normal impulses on each body / dt, and ``(len(envs), nbody)`` bool, whether a contact point
        of the body carries a non-zero impulse.

        PhysX reports each contact between two rigid components with its points' impulses over the
        substep (along the normal only), acting on the first component (``contact.bodies[0]``) and
        opposite on the second. The Python work is one pass over the contacts (a scene reports only
        shape pairs within the contact offset); the sums are numpy.
        """
        nbody = self.plan.info.nbody
        pairs: list[int] = []  # per contact: flat (env, body) index of its first and second body
        counts: list[int] = []  # per contact: its points
        impulses: list = []  # per point
        for i, n in enumerate(envs):
            body_of = self._contact_map(int(n))
            base = i * nbody
            for c in self.systems[n].get_contacts():
                b0, b1 = c.bodies
                points = c.points
                impulses += [p.impulse for p in points]
                pairs += (base + body_of.get(b0, 0), base + body_of.get(b1, 0))
                counts.append(len(points))
        flat = np.zeros((len(envs) * nbody, 3))
        touching = np.zeros(len(envs) * nbody, bool)
        if impulses:
            imp = np.array(impulses, np.float64) / self.plan.timestep  # (M, 3)
            at = np.repeat(np.asarray(pairs).reshape(-1, 2), counts, axis=0)  # (M, 2)
            np.add.at(flat, at[:, 0], imp)
            np.subtract.at(flat, at[:, 1], imp)
            touching[at[imp.any(1)].reshape(-1)] = True
        return flat.reshape(len(envs), nbody, 3), touching.reshape(len(envs), nbody)

    def _derived(self, envs: np.ndarray, reported: np.ndarray, touching: np.ndarray) -> np.ndarray:
        """``(n, K, 3)`` :meth:`.contact.ContactDerivation.forces` of envs ``envs`` from the kept
        velocities, masses and applied forces, and the scenes' current link data and joint forces."""
        d, A = self._contact, self.num_arts
        jf = None
        joint_arts = np.intersect1d(d.joint_arts, np.flatnonzero(d.links_of(touching.any(0))[0].any(1)))
        if joint_arts.size:
            for n in envs:
                arts = self.arts[n]
                for a in joint_arts:
                    f = arts[a].get_link_incoming_joint_forces()  # rows: PhysX link index = buffer column
                    self._jf[n * A + a, : len(f)] = f
            jf = torch.from_numpy(self._jf)
        pose, vel = d.links_of(touching.any(0))
        self.link_data(None, links=pose)
        links = self.link_data(None, velocities=True, links=vel)
        g = np.array(
            np.broadcast_to(self.plan.gravity if self.env_gravity is None else self.env_gravity[envs], (len(envs), 3)),
            np.float64,
        )
        assert self._v0 is not None and self._mass0 is not None
        forces = d.forces(
            torch.from_numpy(self.rows[envs]),
            links,
            torch.from_numpy(self._v0[envs]),
            torch.from_numpy(self._mass0[envs]),
            torch.from_numpy(g),
            jf,
            None if self._applied is None else torch.from_numpy(self._applied[envs]),
            torch.from_numpy(reported),
            torch.from_numpy(touching),
            float(self.plan.timestep),
        )
        return forces.numpy()

    def _keep_contact_start(self) -> None:
        """Before the last substep: the velocities and masses of the links whose contact force is
        derived, and an empty table of the forces applied to them in the substep."""
        d = self._contact
        K = d.bodies.size
        v0 = self._v0 = np.zeros((self.num_envs, K, 3))
        mass = self._mass0 = np.zeros((self.num_envs, K))
        links = [(k, a, l) for (a, l), k in self._k_of_link.items()]
        for n, comps in enumerate(self.comps):
            for k, a, l in links:
                c = comps[a][l]
                v0[n, k] = c.linear_velocity
                mass[n, k] = c.mass
        self._applied = None
        self._recording = True

    def _record_applied(self, a: int, l: int, force: np.ndarray) -> None:
        """Forces ``(N, 3)`` applied to link ``(a, l)`` of every env outside the solver in the last substep."""
        k = self._k_of_link.get((int(a), int(l)))
        if k is None:
            return
        if self._applied is None:
            self._applied = np.zeros((self.num_envs, self._contact.bodies.size, 3))
        self._applied[:, k] += force

    def contact_forces(self, body_ids: np.ndarray) -> np.ndarray:
        """``(N, B, 3)`` float64 net contact force on bodies ``body_ids`` in every env's last substep
        (see :meth:`_body_contact_forces`), a new array; whether an env has stepped since it was
        written is the engine's to apply. Every body's forces are computed on the first read after
        a step and kept for the reads that follow it (a task reads feet and other bodies apart)."""
        cache = self._contact_cache
        if cache is None:
            cache = self._contact_cache = self._body_contact_forces(np.arange(self.num_envs))
            for n, held in self._held.items():
                cache[n] = held
        return cache[:, body_ids]

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def write_state(self, env_ids: np.ndarray, packed: dict) -> None:
        """Fresh scenes for ``env_ids``, then their state (``packed``: CPU tensors)."""
        A, floating = self.num_arts, [not art.fixed_root for art in self.plan.articulations]
        packed = {k: v.numpy().astype(np.float32) for k, v in packed.items() if k != "rows"}
        self._rebuild(env_ids)
        for i, n in enumerate(env_ids):
            for a, art in enumerate(self.arts[n]):
                k = i * A + a
                d = self.cols.art_dofs[a]
                if floating[a]:
                    art.set_root_pose(pose(packed["root_pose"][k]))
                    art.set_root_linear_velocity(packed["root_vel"][k, :3])
                    art.set_root_angular_velocity(packed["root_vel"][k, 3:])
                if d:  # after the root: PhysX updates the links' poses and velocities here
                    art.set_qpos(packed["qpos"][k, :d])
                    art.set_qvel(packed["qvel"][k, :d])
        self._stale()

    # ------------------------------------------------------------------
    # the pieces of PhysxPath.step
    # ------------------------------------------------------------------
    def _write_ctrl(self, drive: dict) -> None:
        targets = drive["target"][:, self._pos_j].tolist()
        vel_targets = drive["vel_target"][:, self._vel_j].tolist()
        self._qf = qfs = {}
        for a, (joints, dofs) in self._motors.items():
            qf = np.zeros((self.num_envs, int(self.cols.art_dofs[a])), np.float32)
            qf[:, dofs] = drive["force"][:, joints]
            qfs[a] = qf
        for n, (pos_joints, vel_joints) in enumerate(self._joint_objs):
            for joint, t in zip(pos_joints, targets[n]):
                joint.set_drive_target(t)
            for joint, t in zip(vel_joints, vel_targets[n]):
                joint.set_drive_velocity_target(t)
            for a, qf in qfs.items():
                self.arts[n][a].set_qf(qf[n])

    def _apply_forces(self, forces: tuple) -> None:
        bodies, f, t = forces
        f, t = np.asarray(f.cpu(), np.float32), np.asarray(t.cpu(), np.float32)
        bl = self.plan.body_link[bodies]
        zero = np.zeros(3, np.float32)
        if self._recording:
            for i, (a, l) in enumerate(bl):
                self._record_applied(a, l, f[:, i])
        for n, comps in enumerate(self.comps):
            for i, (a, l) in enumerate(bl):
                comp = comps[a][l]
                comp.add_force_at_point(f[n, i], comp.entity_pose.p)
                comp.add_force_torque(zero, t[n, i])

    def _save(self) -> None:
        self._held.clear()  # the step's own contacts replace what was held
        self._contact_cache = None
        # the state each env had at the end of the last call is its pre-call state now
        self._before = [b if b is not None else s.pack() for b, s in zip(self._packed, self.systems)]

    def _substep(self, forces: tuple | None, joint_forces: JointForces | None, last: bool = False) -> None:
        if last and self.contact_sensing:
            self._keep_contact_start()
        if forces is not None:
            self._apply_forces(forces)
        if self._gravcomp:
            self._compensate_gravity()
        if joint_forces is not None:
            self._apply_joint_forces(joint_forces)
        self._recording = False
        for s in self.systems:
            s.step()

    def _apply_joint_forces(self, joint_forces: JointForces) -> None:
        """Generalized forces computed outside PhysX for the state it is in (the per-substep hook: MuJoCo's
        forces, :mod:`.mujoco_forces`), before a substep: hinge/slide components added to the motors'
        joint forces, free-joint components as a force at the root's frame origin and a torque (the
        contract's free-joint torque is in the body frame)."""
        states = np.frombuffer(b"".join(s.pack() for s in self.systems), np.float32).reshape(self.num_envs, -1)
        qfrc = joint_forces(states)
        info, plan, cols = self.plan.info, self.plan, self.cols
        for a in self._dof_arts:
            qf = self._qf.get(a)
            qf = np.zeros((self.num_envs, int(cols.art_dofs[a])), np.float64) if qf is None else qf.astype(np.float64)
            mine = self._scalar[self._scalar_art == a]
            qf[:, cols.joint_dof[mine]] += qfrc[:, info.joint_dofadr[mine]]
            for env, row in zip(self.arts, qf.astype(np.float32)):
                env[a].set_qf(row)
        for j in self._free:
            dof = int(info.joint_dofadr[j])
            wrench = qfrc[:, dof : dof + 6]
            if not wrench.any():  # e.g. a free body no constraint touches
                continue
            a, l = plan.joint_link[j]
            comps = [env[a][l] for env in self.comps]
            frames = [c.entity_pose for c in comps]
            torque = quat_apply(np.array([f.q for f in frames], np.float64), wrench[:, 3:]).astype(np.float32)
            force = wrench[:, :3].astype(np.float32)
            if self._recording:
                self._record_applied(a, l, force)
            zero = np.zeros(3, np.float32)
            for comp, frame, f, t in zip(comps, frames, force, torque):
                comp.add_force_at_point(f, frame.p)
                comp.add_force_torque(zero, t)

    def _compensate_gravity(self) -> None:
        """MuJoCo's gravcomp: ``-gravcomp * mass * gravity`` at each body's centre of mass, from the
        link's current mass and the env's gravity (both randomizable), before every substep."""
        zero = np.zeros(3, np.float32)
        kept = np.zeros((len(self._gravcomp), self.num_envs, 3), np.float32) if self._recording else None
        for n, comps in enumerate(self.comps):
            g = self.plan.gravity if self.env_gravity is None else self.env_gravity[n]
            for i, (a, l, gc) in enumerate(self._gravcomp):
                comp = comps[a][l]
                force = np.asarray(-gc * comp.mass * np.asarray(g), np.float32)
                comp.add_force_torque(force, zero)
                if kept is not None:
                    kept[i, n] = force
        if kept is not None:
            for (a, l, _), force in zip(self._gravcomp, kept):
                self._record_applied(a, l, force)

    def _serialised(self) -> np.ndarray:
        self._stale()
        self._after = [s.pack() for s in self.systems]
        self._packed = self._after  # the next call's pre-call states, unless some envs are reverted
        return np.frombuffer(b"".join(self._after), np.float32).reshape(self.num_envs, self.cols.pack_size)

    def _qacc(self) -> np.ndarray:
        buf, A = self._qacc_buf, self.num_arts
        for a in self._dof_arts:  # rows n * A + a
            buf[a::A, : self.cols.art_dofs[a]] = np.stack([env[a].get_qacc() for env in self.arts])
        return buf

    def _restore(self, envs: np.ndarray) -> None:
        envs = np.asarray(envs, bool)
        if envs.all():  # after an exception too, when the states reached are not known
            for s, b in zip(self.systems, self._before):
                s.unpack(b)
            self._packed = list(self._before)
            self._stale()
            return
        after = self._after
        for n in np.flatnonzero(envs):
            self.systems[n].unpack(self._before[n])
            after[n] = self._before[n]
        self._packed = after
        if envs.any():  # reads made since the step (a shard's prefetched poses) describe the state undone
            self._stale()

    def close(self) -> None:
        self._finalizer()  # the scenes no longer count against MAX_CPU_SCENES
        self._held.clear()
        self._contact_cache = None
        self._v0 = self._mass0 = self._applied = None
        for held in (
            self._contact_body,
            self._joint_objs,
            self._packed,
            self._before,
            self._after,
            self.systems,
            self.scenes,
            self.arts,
            self.comps,
        ):
            held.clear()
