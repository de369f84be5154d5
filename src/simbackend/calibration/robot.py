"""Calibration on a robot description: the ``feet`` alias, the default parameter set, what targets resolve to.

A robot's description names its feet, base and driven joints, so ``calibrate --robot R`` needs no
parameter file: :func:`default_parameters` takes the parameters a sim-to-sim gap is usually made of from
the description and the compiled model (feet and floor friction, contact compliance where the engine
honours it per env, base mass, servo gain, joint damping and armature), with bounds stated in
:data:`BOUNDS` and printed by the command. :func:`expand_parameters` turns the ``bodies`` entry
``"feet"`` of a parameter into the description's feet (:func:`simbackend.robots.expand_aliases`), so a
parameter file written once serves any robot; :func:`resolved_names` says, per term, which elements of
the model it reaches.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np

from simbackend.errors import InvalidArgumentError
from simbackend.randomization import (
    FEET,
    TERM_KINDS,
    Distribution,
    Term,
    collision_geoms,
    element_names,
    resolve_targets,
)
from simbackend.robots.aliases import expand_aliases

from .params import Parameter, ParameterSet

__all__ = [
    "BOUNDS",
    "default_parameters",
    "expand_parameters",
    "resolved_names",
    "robot_parameters",
]

#: the default parameters' bounds: factors on the model's values (``scale``, searched on a log scale);
#: ``joint_damping``/``joint_armature`` where the model's value is 0 on a driven joint: ``add`` over
#: ``[0, high]``, ``high`` from the robot (:func:`default_parameters`)
BOUNDS: dict[str, tuple[float, float]] = {
    "friction": (0.3, 3.0),
    "contact_timeconst": (0.25, 4.0),
    "contact_dampratio": (0.5, 2.0),
    "base_mass": (0.7, 1.5),
    "servo_gain": (0.5, 2.0),
    "joint_damping": (0.2, 5.0),
    "joint_armature": (0.2, 5.0),
}
#: ``joint_damping`` added on a model without damping: up to this share of the servo's own damping (kv, kd)
DAMPING_SHARE = 1.0
#: ``joint_armature`` added on a model without armature: up to this many times the largest inertia of a
#: driven joint's body about that joint (``I + m |com|^2``): a geared motor's reflected rotor inertia is of
#: the order of the link's own (Unitree's: 0.01-0.03 kg m^2 on 1-2 kg legs)
ARMATURE_SHARE = 4.0


def expand_parameters(params: ParameterSet, desc: Any, info: Any) -> ParameterSet:
    """``params`` with every parameter's ``feet`` alias expanded (:func:`expand_aliases`)."""
    out = []
    for k, p in enumerate(params.parameters):
        term = expand_aliases(p.term, desc, info, f"parameters[{k}] ({p.name!r})")
        out.append(Parameter(term=term, low=p.low, high=p.high, log=p.log, name=p.name))
    return ParameterSet(tuple(out))


def resolved_names(term: Term, info: Any, where: str = "term") -> list[str]:
    """The elements ``term`` reaches on the model ``info`` (:func:`~simbackend.randomization.resolve_targets`),
    by name; a geom as ``name (body)``, ``#id (body)`` where it has no name (a URDF's)."""
    element = TERM_KINDS[term.kind].element
    ids = resolve_targets(info, term, where)
    if element == "geom":
        return [f"{info.geom_names[g] or f'#{g}'} ({info.body_names[int(info.geom_body[g])]})" for g in ids]
    if element is None:  # gravity, latency: no elements
        return []
    names = element_names(info, element)
    return [names[i] for i in ids]


def _joint_ids(desc: Any, info: Any) -> np.ndarray:
    return np.array([info.joint_names.index(n) for n in desc.joints], np.int64)


def _servo_damping(desc: Any, info: Any, joints: np.ndarray) -> float:
    """The mean damping of the driven joints' servos (N m s/rad): the position actuators' kv, or the PD law's kd."""
    if desc.actuation == "pd":
        from simbackend.robots.resolved import joint_gains

        _, kd = joint_gains(desc, desc.name)
        driven = list(desc.driven_joints)
        return float(np.mean([kd[driven.index(n)] for n in desc.joints]))
    acts = np.flatnonzero(np.isin(np.asarray(info.actuator_joint), joints))
    return float(np.mean(np.asarray(info.actuator_kv)[acts])) if acts.size else 0.0


def _joint_inertia(info: Any, joints: np.ndarray) -> float:
    """The largest inertia of a joint's own body about its centre of mass's offset (``I_max + m |com|^2``),
    kg m^2, over ``joints``: a scale for armature."""
    bodies = np.asarray(info.joint_body)[joints]
    mass = np.asarray(info.body_mass)[bodies]
    com = np.asarray(info.body_com)[bodies]
    inertia = np.asarray(info.body_inertia)[bodies].max(axis=1)
    return float(np.max(inertia + mass * (com**2).sum(axis=1)))


def _joint_parameter(kind: str, desc: Any, info: Any, joints: np.ndarray, high_add: float) -> dict | None:
    """A joint field's parameter: a factor where every driven joint has a value, else an added value."""
    field = {"joint_damping": "dof_damping", "joint_armature": "dof_armature"}[kind]
    values = np.asarray(getattr(info, field))[np.asarray(info.joint_dofadr)[joints]]
    base = {"kind": kind, "targets": list(desc.joints), "name": kind.split("_")[1]}
    if (values > 0).all():
        low, high = BOUNDS[kind]
        return {**base, "low": low, "high": high}
    if not high_add > 0 or not math.isfinite(high_add):
        return None
    return {**base, "operation": "add", "low": 0.0, "high": float(f"{high_add:.3g}")}


def default_parameters(desc: Any, info: Any, support: Collection[str], physics_dt: float) -> ParameterSet:
    """The default parameters to calibrate ``desc``'s robot on a backend (its model ``info``, the
    ``"<term>:<phase>"`` entries it ``support``\\ s, its physics step), in this order:

    - ``friction``: sliding friction of the feet and of the ground (the world body's collision geoms),
      scaled together (MuJoCo takes the larger of two touching geoms', PhysX the mean: one factor on both
      moves any contact's);
    - ``timeconst``, ``dampratio``: their contact compliance, where the backend sets it per env
      (MuJoCo's ``solref``; engines without a soft contact model have none); the lowest factor keeps the time constant at
      least 2 physics steps (what MuJoCo acts with);
    - ``base_mass``: the base body's mass (inertia with it);
    - ``servo_gain``: the driven joints' servo stiffness (``actuator_kp``), or for a PD law on motors the
      motors' strength (``actuator_strength``: kp and kd together), where the backend sets it;
    - ``damping``, ``armature``: the driven joints' damping and armature, factors of the model's values,
      or, where the model has none, added from 0 up to the servo's damping (damping) and
      :data:`ARMATURE_SHARE` times the joints' body inertia (armature).
    """
    joints = _joint_ids(desc, info)
    interval = {e.split(":")[0] for e in support if e.endswith(":interval")}
    contact_bodies = (["world"] if collision_geoms(info, [0]).size else []) + [FEET]
    specs: list[dict] = []
    lo, hi = BOUNDS["friction"]
    specs.append({"kind": "geom_friction", "bodies": contact_bodies, "low": lo, "high": hi, "name": "friction"})
    if "geom_compliance" in interval:
        term = expand_aliases(
            Term("geom_compliance", Distribution.fixed(1.0), bodies=tuple(contact_bodies)),
            desc,
            info,
            "default parameters",
        )
        geoms = resolve_targets(info, term, "default parameters")
        timeconst = np.asarray(info.geom_compliance)[geoms, 0]
        lo, hi = BOUNDS["contact_timeconst"]
        lo = max(lo, float(f"{2 * physics_dt / timeconst.min() * 1.001:.3g}"))
        if lo < hi:
            specs.append(
                {"kind": "geom_compliance", "bodies": contact_bodies, "components": ["timeconst"],
                 "low": lo, "high": hi, "name": "timeconst"}
            )  # fmt: skip
        lo, hi = BOUNDS["contact_dampratio"]
        specs.append(
            {"kind": "geom_compliance", "bodies": contact_bodies, "components": ["dampratio"],
             "low": lo, "high": hi, "name": "dampratio"}
        )  # fmt: skip
    lo, hi = BOUNDS["base_mass"]
    specs.append({"kind": "body_mass", "targets": [desc.base_body], "low": lo, "high": hi, "name": "base_mass"})
    actuators = [info.actuator_names[a] for a in np.flatnonzero(np.isin(np.asarray(info.actuator_joint), joints))]
    gain = "actuator_strength" if desc.actuation == "pd" else "actuator_kp"
    if actuators and gain in interval:
        lo, hi = BOUNDS["servo_gain"]
        specs.append({"kind": gain, "targets": actuators, "low": lo, "high": hi, "name": "servo_gain"})
    for kind, high_add in (
        ("joint_damping", DAMPING_SHARE * _servo_damping(desc, info, joints)),
        ("joint_armature", ARMATURE_SHARE * _joint_inertia(info, joints)),
    ):
        spec = _joint_parameter(kind, desc, info, joints, high_add)
        if spec is not None and kind in interval:
            specs.append(spec)
    params = ParameterSet.from_dict({"parameters": [s for s in specs if s["kind"] in interval]})
    return expand_parameters(params, desc, info)


def robot_parameters(params: ParameterSet | None, robot: Any, backend: Any) -> tuple[ParameterSet, list[list[str]]]:
    """The parameters a fit on ``backend`` searches, and what each reaches on its model (by name).

    ``params`` ``None``: ``robot``'s :func:`default_parameters`; else ``params`` with the ``feet`` alias
    expanded through ``robot`` (a registered name, a description file or a description; ``None``: no robot,
    no alias). Raises naming the parameter whose targets match nothing, or reach no collision geom.
    """
    desc = None
    if robot is not None:
        from simbackend.robots import get_robot

        desc = get_robot(robot)
    info = backend.info
    if params is None:
        if desc is None:
            raise InvalidArgumentError("parameters: a default set needs a robot description")
        params = default_parameters(desc, info, backend.capabilities.domain_randomization, backend.physics_dt)
    elif desc is not None:
        params = expand_parameters(params, desc, info)
    resolved = [resolved_names(p.term, info, f"parameters[{k}] ({p.name!r})") for k, p in enumerate(params.parameters)]
    return params, resolved
