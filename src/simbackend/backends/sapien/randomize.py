"""Domain randomization on CPU PhysX: per-env link inertias, shape materials, drives, armature, gravity.

Every env has its own scene, so every per-env value has its own PhysX object:

* ``body_mass``/``body_com``/``body_inertia``: the link component's mass,
  centre-of-mass pose (the model's principal axes) and principal inertia.
  Bodies welded to the world are static shapes in PhysX: they cannot take them.
* ``geom_friction``: sliding friction through a PhysX material per value
  (materials are shared objects; each distinct value gets one). PhysX has no
  torsional or rolling friction, and it **averages** two touching materials'
  friction where MuJoCo takes the **maximum**: a randomized friction matches
  MuJoCo's contact exactly only against a surface of equal or lower friction
  whose value is the same on both sides of the average (docs/randomization.md).
* ``actuator_kp``/``actuator_kv``/``joint_damping``: the joint drives
  (stiffness, damping) and the per-env ctrl tables of the layout, recomputed
  from the model's tables plus the changes (:func:`drive_rows`).
* ``joint_armature``: the joint's armature.
* ``gravity``: PhysX fixes a scene's gravity when the scene is created, so an
  env whose gravity changes gets a new scene with its state carried over
  (PhysX's serialisation), as ``set_state`` does.

The values of every field written are kept per env and applied again to the
fresh scenes ``set_state`` builds. The GPU path declares none of these.

Not declared: ``geom_compliance`` (a contact's time constant and damping ratio, a
mass-normalized spring-damper). SAPIEN 3.0.3's ``physx.PhysxMaterial`` takes
only static and dynamic friction and restitution: neither PhysX's material
damping (``PxMaterial::setDamping``) nor its compliant-contact flags
(``eCOMPLIANT_CONTACT``, ``eCOMPLIANT_ACCELERATION_SPRING``) are reachable. A
negative restitution does act as a spring (measured: a 1 kg box of 0.2 m on the
ground, restitution -1e4, rests 0.3 mm deep, 4 kg 0.9 mm; restitution -1e3
still bounces 2.8 cm after 4 s), but as an undamped **force** spring per contact
point: its depth grows with the mass and the number of contact points, and its
damping ratio cannot be set (only the solver's numerical damping), so neither
half of the term's meaning can be honoured faithfully. A plan holding the term
is refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sapien import physx

from simbackend.errors import UnsupportedFeatureError
from simbackend.model_info import JOINT_HINGE, JOINT_SLIDE

#: the terms CPU PhysX applies, in every phase
CPU_TERMS = (
    "body_mass",
    "body_com",
    "body_inertia",
    "geom_friction",
    "actuator_kp",
    "actuator_kv",
    "joint_damping",
    "joint_armature",
    "gravity",
)


def drive_rows(
    plan: Any, info: Any, gear: np.ndarray, kp: np.ndarray, kv: np.ndarray, damping: np.ndarray
) -> dict[str, np.ndarray]:
    """Per-env drive tables ``(n, ...)`` for gains ``kp``/``kv`` ``(n, nu)`` and dof damping ``(n, nv)``.

    The model's tables (:class:`.plan.Plan`) plus what the changes add: a
    position actuator of gear g adds ``g^2 kp`` stiffness, ``g kp`` position
    gain and ``-g^2 kp q0`` bias; ``kv`` adds ``g^2 kv`` damping (and ``g kv``
    velocity gain for velocity actuators); joint damping adds itself.
    """
    n, nu, njnt = kp.shape[0], info.nu, len(info.joint_names)
    inc = np.zeros((nu, njnt))  # gear of each non-motor actuator on its joint
    is_vel = np.array([k == "velocity" for k in info.actuator_kind])
    for a in range(nu):
        j = int(info.actuator_joint[a])
        if info.actuator_kind[a] in ("position", "velocity") and j >= 0:
            inc[a, j] = gear[a]
    dkp = kp - info.actuator_kp
    dkv = kv - info.actuator_kv
    dd = np.zeros((n, njnt))
    scalar = np.flatnonzero(np.isin(info.joint_type, (JOINT_HINGE, JOINT_SLIDE)))
    dd[:, scalar] = (damping - info.dof_damping)[:, info.joint_dofadr[scalar]]
    sq = inc * inc
    return {
        "stiffness": plan.stiffness + dkp @ sq,
        "damping": plan.damping + dd + dkv @ sq,
        "pos_bias": plan.pos_bias - (dkp @ sq) * plan.joint_offset,
        "pos_gain": plan.pos_gain + dkp[:, :, None] * inc,
        "vel_gain": plan.vel_gain + (dkv * is_vel)[:, :, None] * inc,
    }


class EnvParams:
    """The per-env model fields of a CPU sapien engine (see the module docstring).

    Args:
        engine: the :class:`~.backend.SapienEngine` (its CPU PhysX path ``physx``, ``plan``, ``model``,
            ``layout`` and ``mujoco_forces``).
    """

    def __init__(self, engine: Any):
        self.owner = engine
        self.physx = engine.physx
        self.forces = engine.mujoco_forces
        self.plan, self.info, self.model = engine.plan, engine.info, engine.model
        self.values: dict[str, np.ndarray] = {}
        self.drives: dict[str, np.ndarray] | None = None
        self._materials: dict[float, physx.PhysxMaterial] = {}
        # geom -> where its collision shape lives: (articulation, link, shape index) or (-1, -1, static index)
        self.geom_shape: dict[int, tuple[int, int, int]] = {}
        for a, art in enumerate(self.plan.articulations):
            for l, lk in enumerate(art.links):
                for k, s in enumerate(lk.shapes):
                    self.geom_shape[int(s.geom)] = (a, l, k)
        for k, s in enumerate(self.plan.static_shapes):
            self.geom_shape[int(s.geom)] = (-1, -1, k)
        self.gear = np.array(self.model.actuator_gear[:, 0], np.float64)
        self.physx.on_rebuild = self.apply

    # checks -------------------------------------------------------------------
    def check(self, env_ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Raise for values PhysX cannot represent, before anything is written."""
        info, name = self.info, self.owner.name
        body_link = self.plan.body_link
        for field in ("body_mass", "body_com", "body_inertia"):
            rows = values.get(field)
            if rows is None:
                continue
            model = getattr(info, field)
            static = [b for b in range(1, info.nbody) if body_link[b, 0] < 0]
            for b in static:
                if not np.array_equal(rows[:, b], np.broadcast_to(model[b], rows[:, b].shape)):
                    raise UnsupportedFeatureError(
                        name,
                        f"domain randomization of {field}",
                        f"body {info.body_names[b]!r} is welded to the world (a static PhysX shape, no mass)",
                    )
        rows = values.get("geom_friction")
        if rows is not None and not np.array_equal(
            rows[..., 1:], np.broadcast_to(info.geom_friction[:, 1:], rows[..., 1:].shape)
        ):
            raise UnsupportedFeatureError(
                name, "domain randomization of torsional or rolling friction", "PhysX has sliding friction only"
            )
        rows = values.get("dof_damping")
        if rows is not None:
            changed = np.flatnonzero((rows != info.dof_damping).any(0))
            scalar = set(info.joint_dofadr[np.isin(info.joint_type, (JOINT_HINGE, JOINT_SLIDE))].tolist())
            # frictionloss modelled as a saturating drive (not the joints whose force the engine applies)
            forced = np.zeros(len(info.joint_names), bool)
            forced[self.plan.forced_friction] = True
            fl_joints = np.flatnonzero(
                ~forced
                & (info.dof_frictionloss[info.joint_dofadr] > 0)
                & np.isin(info.joint_type, (JOINT_HINGE, JOINT_SLIDE))
            )
            fl_dofs = set(info.joint_dofadr[fl_joints].tolist())
            for d in changed:
                if int(d) not in scalar:
                    raise UnsupportedFeatureError(
                        name,
                        "domain randomization of free or ball joint damping",
                        "PhysX's articulation root has no joint damping",
                    )
                if int(d) in fl_dofs:
                    raise UnsupportedFeatureError(
                        name,
                        "domain randomization of joint damping",
                        "the joint has frictionloss, which takes its PhysX drive",
                    )
        rows = values.get("dof_armature")
        if rows is not None:
            scalar = info.joint_dofadr[np.isin(info.joint_type, (JOINT_HINGE, JOINT_SLIDE))]
            other = np.setdiff1d(np.arange(info.nv), scalar)
            if other.size and (rows[:, other] != info.dof_armature[other]).any():
                raise UnsupportedFeatureError(
                    name,
                    "domain randomization of free or ball joint armature",
                    "PhysX's articulation root has no armature",
                )

    # writes -------------------------------------------------------------------
    def write(self, env_ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        self.check(env_ids, values)
        n_all = self.owner.num_envs
        for field, rows in values.items():
            table = self.values.get(field)
            if table is None:
                model = np.asarray(getattr(self.info, {"gravity": "gravity"}.get(field, field)), np.float64)
                table = self.values[field] = np.broadcast_to(model, (n_all,) + model.shape).copy()
            table[env_ids] = rows
        if {"actuator_kp", "actuator_kv", "dof_damping"}.intersection(values):
            self._update_drives()
        self.forces.set_inertia(self.values)  # MuJoCo's forces see the env's inertia
        if "gravity" in values:
            self.physx.regravitate(env_ids, self.values["gravity"])  # new scenes: on_rebuild applies the rest
            self.forces.forget(env_ids)  # a fresh scene has no previous substep
            rest = {k: v for k, v in values.items() if k != "gravity"}
        else:
            rest = values
        if rest:
            self.apply(env_ids, tuple(rest))

    def _update_drives(self) -> None:
        info, n = self.info, self.owner.num_envs

        def field(name: str, model: np.ndarray) -> np.ndarray:
            v = self.values.get(name)
            return np.broadcast_to(model, (n,) + model.shape) if v is None else v

        self.drives = drive_rows(
            self.plan,
            info,
            self.gear,
            field("actuator_kp", info.actuator_kp),
            field("actuator_kv", info.actuator_kv),
            field("dof_damping", info.dof_damping),
        )
        self.owner.layout.set_env_drives(self.drives)
        self.physx.env_drives = self.drives
        self.forces.set_gains(field("actuator_kp", info.actuator_kp), field("actuator_kv", info.actuator_kv))

    def apply(self, env_ids: Any, fields: tuple | None = None) -> None:
        """Write the stored per-env values of ``fields`` (default: all) into envs ``env_ids``' PhysX objects."""
        fields = tuple(self.values) if fields is None else fields
        if not fields:
            return
        plan, info, eng = self.plan, self.info, self.physx
        env_ids = np.asarray(env_ids)
        body_fields = [f for f in ("body_mass", "body_com", "body_inertia") if f in fields]
        if body_fields:
            bodies = [(b, int(a), int(l)) for b, (a, l) in enumerate(plan.body_link) if b > 0 and a >= 0]
            mass, com, inertia = (self.values.get(f) for f in ("body_mass", "body_com", "body_inertia"))
            for n in env_ids:
                for b, a, l in bodies:
                    c = eng.comps[n][a][l]
                    if mass is not None and "body_mass" in fields:
                        c.mass = float(mass[n, b])
                    if com is not None and "body_com" in fields:
                        c.cmass_local_pose = _pose(com[n, b], info.body_iquat[b])
                    if inertia is not None and ("body_inertia" in fields or "body_mass" in fields):
                        c.inertia = np.asarray(inertia[n, b], np.float32)
        if "geom_friction" in fields:
            fr = self.values["geom_friction"]
            for n in env_ids:
                static = eng.static_shapes(n)
                for g, (a, l, k) in self.geom_shape.items():
                    shape = static[k] if a < 0 else eng.comps[n][a][l].collision_shapes[k]
                    mu = 0.0 if self.model.geom_condim[g] == 1 else float(fr[n, g, 0])
                    shape.physical_material = self._material(mu)
        if "dof_armature" in fields:
            arm = self.values["dof_armature"]
            for j in np.flatnonzero(np.isin(info.joint_type, (JOINT_HINGE, JOINT_SLIDE))):
                a, l = plan.joint_link[j]
                d = int(info.joint_dofadr[j])
                for n in env_ids:
                    eng.comps[n][a][l].joint.armature = np.array([arm[n, d]], np.float32)
        if self.drives is not None and {"actuator_kp", "actuator_kv", "dof_damping"}.intersection(fields):
            eng.set_drives_of(env_ids)

    def _material(self, mu: float) -> physx.PhysxMaterial:
        mat = self._materials.get(mu)
        if mat is None:
            mat = self._materials[mu] = physx.PhysxMaterial(mu, mu, 0.0)
        return mat

    # reads ----------------------------------------------------------------------
    def read(self, field: str) -> np.ndarray | None:
        """``(N, ...)`` read back from the PhysX objects; None for the model's values (nothing written)."""
        if field not in self.values:
            return None
        plan, info, eng = self.plan, self.info, self.physx
        out = self.values[field].copy()
        n_all = self.owner.num_envs
        if field in ("body_mass", "body_com", "body_inertia"):
            for b, (a, l) in enumerate(plan.body_link):
                if b == 0 or a < 0:
                    continue
                for n in range(n_all):
                    c = eng.comps[n][a][l]
                    out[n, b] = (
                        c.mass if field == "body_mass" else c.cmass_local_pose.p if field == "body_com" else c.inertia
                    )
        elif field == "geom_friction":
            for n in range(n_all):
                static = eng.static_shapes(n)
                for g, (a, l, k) in self.geom_shape.items():
                    shape = static[k] if a < 0 else eng.comps[n][a][l].collision_shapes[k]
                    if self.model.geom_condim[g] != 1:
                        out[n, g, 0] = shape.physical_material.static_friction
        elif field == "dof_armature":
            for j in np.flatnonzero(np.isin(info.joint_type, (JOINT_HINGE, JOINT_SLIDE))):
                a, l = plan.joint_link[j]
                for n in range(n_all):
                    out[n, info.joint_dofadr[j]] = float(np.asarray(eng.comps[n][a][l].joint.armature).reshape(-1)[0])
        elif field == "gravity":
            out = np.stack([np.asarray(s.config.gravity, np.float64) for s in eng.systems])
        # actuator gains and damping: the drive tables hold them (their effect: the drives PhysX is given)
        return out


def _pose(p: np.ndarray, q: np.ndarray) -> Any:
    import sapien

    return sapien.Pose(np.asarray(p, np.float32), np.asarray(q, np.float32))
