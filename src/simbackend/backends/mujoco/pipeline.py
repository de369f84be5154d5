"""What every engine running MuJoCo's own pipeline shares (the MuJoCo engine, MuJoCo Warp).

Both simulate the compiled ``MjModel`` itself, so they map the contract's
per-env fields, actuator gains, options and sensors onto MuJoCo's model the
same way; the functions below take numpy arrays or torch tensors alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mujoco
import numpy as np

from simbackend.errors import InvalidArgumentError
from simbackend.math import quat_to_matrix

#: the contract's per-env model fields -> MuJoCo's model fields (actuator gains: gainprm/biasprm)
DR_FIELDS = {
    "body_mass": "body_mass",
    "body_com": "body_ipos",
    "body_inertia": "body_inertia",
    "geom_friction": "geom_friction",
    # (timeconst, dampratio): the solver mixes a contact's two geoms' solref by geom_solmix when it builds
    # the contact, in every substep, so a per-env value acts from the next substep on
    "geom_compliance": "geom_solref",
    # (dmin, dmax, width): solimp's first 3 of 5 numbers (DR_COLUMNS), mixed by geom_solmix as solref is
    "geom_impedance": "geom_solimp",
    "dof_damping": "dof_damping",
    "dof_armature": "dof_armature",
    "dof_frictionloss": "dof_frictionloss",
    "gravity": "opt.gravity",
}
#: contract fields that are the first columns of their MuJoCo field (the others keep the model's values)
DR_COLUMNS = {"geom_impedance": 3}


def dr_index(name: str, rows: Any) -> Any:
    """The index of contract field ``name``'s values in its per-env MuJoCo array ``(N, ...)``, for rows
    ``rows`` (env ids, a slice): the rows, and for a :data:`DR_COLUMNS` field its first columns only."""
    cols = DR_COLUMNS.get(name)
    return rows if cols is None else (rows, ..., slice(0, cols))


#: fields whose derived constants mj_setConst (or MuJoCo Warp's set_const) computes
SETCONST_FIELDS = frozenset({"body_mass", "body_com", "body_inertia", "dof_armature"})
#: the randomization terms such an engine applies, at every phase
DR_TERMS = (
    "body_mass",
    "body_com",
    "body_inertia",
    "geom_friction",
    "geom_compliance",
    "geom_impedance",
    "actuator_kp",
    "actuator_kv",
    "actuator_strength",
    "joint_damping",
    "joint_armature",
    "joint_frictionloss",
    "gravity",
)
DR_CAPABILITIES = frozenset(f"{t}:{p}" for t in DR_TERMS for p in ("init", "reset", "interval"))
#: every MuJoCo sensor type but user and plugin ones
ALL_SENSOR_TYPES = frozenset(
    name[len("mjSENS_") :].lower()
    for name in mujoco.mjtSensor.__members__
    if name.startswith("mjSENS_") and name not in ("mjSENS_USER", "mjSENS_PLUGIN")
)


def apply_options(model: Any, opts: Any, integrators: Mapping[str, str], solvers: Mapping[str, str]) -> None:
    """Write the common options and the engine block's ``integrator``/``solver``/``tolerance`` into ``model``."""
    o = model.opt
    if opts.solver_iterations is not None:
        o.iterations = opts.solver_iterations
    e = opts.engine
    if e["integrator"] is not None:
        o.integrator = int(getattr(mujoco.mjtIntegrator, integrators[e["integrator"]]))
    if e["solver"] is not None:
        o.solver = int(getattr(mujoco.mjtSolver, solvers[e["solver"]]))
    if e["tolerance"] is not None:
        o.tolerance = e["tolerance"]


def fold_disabled_gravity(model: Any) -> None:
    """A model that disables gravity applies none: zero ``opt.gravity`` and clear the flag, so that the
    gravity field holds what is applied and reading or randomizing it means the same on every engine."""
    off = int(mujoco.mjtDisableBit.mjDSBL_GRAVITY)
    if model.opt.disableflags & off:
        model.opt.gravity[:] = 0.0
        model.opt.disableflags &= ~off


def write_gains(gain: Any, bias: Any, env_ids: Any, field: str, rows: Any, kinds: Sequence[str]) -> None:
    """Write ``actuator_kp``/``actuator_kv`` rows ``(n, nu)`` into per-env ``gainprm``/``biasprm`` ``(N, nu, 10)``."""
    for a, kind in enumerate(kinds):
        if field == "actuator_kp" and kind == "position":
            gain[env_ids, a, 0] = rows[:, a]
            bias[env_ids, a, 1] = -rows[:, a]
        elif field == "actuator_kv" and kind == "position":
            bias[env_ids, a, 2] = -rows[:, a]
        elif field == "actuator_kv" and kind == "velocity":
            gain[env_ids, a, 0] = rows[:, a]
            bias[env_ids, a, 2] = -rows[:, a]


#: the per-env fields an actuator's gainprm/biasprm/forcerange are composed from
ACTUATOR_FIELDS = ("actuator_kp", "actuator_kv", "actuator_strength")


class ActuatorTables:
    """Per-env ``actuator_kp``/``actuator_kv``/``actuator_strength`` ``(N, nu)`` as written, and their
    composition into MuJoCo's per-env ``gainprm``/``biasprm``/``forcerange``: the strength ``s`` scales
    the whole force, so a position servo gets ``kp s``, ``kv s``, a velocity servo ``kv s``, a motor
    ``gain s``, and every actuator its force range times ``s`` (what was written for one field is kept
    when another changes: a strength never compounds with itself or with the gains)."""

    def __init__(self, info: Any, model: Any, num_envs: int):
        self.info, self.num_envs = info, num_envs
        fr = np.array(model.actuator_forcerange, dtype=np.float64).reshape(-1, 2)
        self.force_range = fr
        self.tables: dict[str, np.ndarray] = {}

    def update(self, env_ids: Any, values: Mapping[str, Any]) -> bool:
        """Keep the rows of ``values``' actuator fields; whether any was given."""
        hit = False
        for name in ACTUATOR_FIELDS:
            if name in values:
                table = self.tables.get(name)
                if table is None:
                    model = np.asarray(getattr(self.info, name), np.float64)
                    table = self.tables[name] = np.broadcast_to(model, (self.num_envs,) + model.shape).copy()
                table[np.asarray(env_ids)] = np.asarray(values[name], np.float64)
                hit = True
        return hit

    def rows(self, name: str, env_ids: Any) -> np.ndarray:
        table = self.tables.get(name)
        ids = np.asarray(env_ids)
        if table is None:
            return np.broadcast_to(np.asarray(getattr(self.info, name), np.float64), (ids.size, self.info.nu))
        return table[ids]

    def read(self, name: str) -> np.ndarray | None:
        table = self.tables.get(name)
        return None if table is None else table.copy()

    def write(
        self, gain: Any, bias: Any, force_range: Any, env_ids: np.ndarray, convert: Any = None, index: Any = None
    ) -> None:
        """Write host envs ``env_ids``' composed rows into ``gain``/``bias`` ``(N, nu, 10)`` and, once a
        strength was written, ``force_range`` ``(N, nu, 2)`` (``convert``: host rows to the arrays' kind;
        ``index``: ``env_ids`` as the arrays are indexed, default the host ids)."""
        convert = np.asarray if convert is None else convert
        at = env_ids if index is None else index
        s = self.rows("actuator_strength", env_ids)
        kp, kv = self.rows("actuator_kp", env_ids) * s, self.rows("actuator_kv", env_ids) * s
        write_gains(gain, bias, at, "actuator_kp", convert(kp), self.info.actuator_kind)
        write_gains(gain, bias, at, "actuator_kv", convert(kv), self.info.actuator_kind)
        if "actuator_strength" in self.tables:
            for a, kind in enumerate(self.info.actuator_kind):
                if kind == "motor":
                    gain[at, a, 0] = convert(self.info.actuator_gain[a] * s[:, a])
            force_range[at] = convert(self.force_range[None] * s[:, :, None])


def read_gains(gain: np.ndarray, bias: np.ndarray, field: str, kinds: Sequence[str]) -> np.ndarray:
    """``(N, nu)`` float64 ``actuator_kp``/``actuator_kv`` from per-env ``gainprm``/``biasprm`` (0 where none)."""
    out = np.zeros((gain.shape[0], len(kinds)))
    for a, kind in enumerate(kinds):
        if field == "actuator_kp" and kind == "position":
            out[:, a] = gain[:, a, 0]
        elif field == "actuator_kv" and kind in ("position", "velocity"):
            out[:, a] = -bias[:, a, 2]
    return out


def compiled_model_fields(m: Any, info: Any) -> dict[str, np.ndarray]:
    """The physical fields of compiled model ``m`` in the contract's form
    (:meth:`simbackend.contract.SimBackend.model_fields`); ``info`` is its ``ModelInfo``."""
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
        "joint_range": info.joint_range.copy(),
        "actuator_ctrl_range": info.actuator_ctrl_range.copy(),
        "actuator_force_range": force_range,
        "timestep": np.array(m.opt.timestep, dtype=np.float64),
        "gravity": np.array(m.opt.gravity, dtype=np.float64),
    }


#: sensor types whose evaluation makes MuJoCo run ``mj_rnePostConstraint`` (which fills ``cfrc_ext``)
_RNE_POST_SENSORS = frozenset(
    int(getattr(mujoco.mjtSensor, f"mjSENS_{t}"))
    for t in ("ACCELEROMETER", "FORCE", "TORQUE", "FRAMELINACC", "FRAMEANGACC")
)


def contact_probe_model(model: Any, source: Any, model_options: Mapping[str, Any]) -> Any:
    """``model``, or the same model compiled again from ``source`` with one sensor more, so that every
    substep computes ``cfrc_ext`` (the per-body constraint forces).

    MuJoCo fills ``cfrc_ext`` only when a sensor needs it. The added sensor (the world body's linear
    acceleration) comes last, so the model's own sensors keep their ids and addresses; it costs one
    ``mj_rnePostConstraint`` per substep. A model that already has such a sensor is returned as is.
    """
    from simbackend.models.compiler import compiled, prepared_spec

    if any(int(t) in _RNE_POST_SENSORS for t in np.asarray(model.sensor_type)):
        return model
    if isinstance(source, mujoco.MjModel):
        raise InvalidArgumentError(
            "contact_sensing: MuJoCo computes contact forces only with an acceleration sensor in the model;"
            " pass the model as a path, built-in name or mujoco.MjSpec (it is added for you), or add"
            ' <sensor><framelinacc objtype="body" objname="world"/></sensor> to it'
        )
    opts = model_options
    spec, label, urdf = prepared_spec(source, opts.get("package_dirs"), opts.get("actuators"), opts.get("fuse_static"))
    spec.add_sensor(
        name="simbackend_contact_probe",
        type=mujoco.mjtSensor.mjSENS_FRAMELINACC,
        objtype=mujoco.mjtObj.mjOBJ_BODY,
        objname="world",
    )
    probed = compiled(spec, label, urdf)
    same = (probed.nq, probed.nv, probed.nu, probed.nbody, probed.ngeom, probed.nsensor - 1) == (
        model.nq,
        model.nv,
        model.nu,
        model.nbody,
        model.ngeom,
        model.nsensor,
    )
    if not same or not np.array_equal(probed.body_mass, model.body_mass):
        raise InvalidArgumentError(f"contact_sensing: {label} compiled again is not the model the backend holds")
    probed.opt.timestep = model.opt.timestep  # the front end's edit (the timestep option)
    return probed
