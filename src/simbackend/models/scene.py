"""A legged robot's scene, composed from plain values: its model with a floor, its actuation and timestep,
written once as one MJCF file.

A locomotion task runs on a file, not on an in-memory spec, so that every
engine (and every shard of a sharded backend, in another process) builds from
the same source. :func:`compose_scene` composes it with MuJoCo's model editor
(``mujoco.MjSpec``): the floor plane, a free joint where the plan asks, the
actuators the plan's actuation needs (added on joints that have none, or their
gains and force limits replaced), then writes it through
:func:`simbackend.models.export_mjcf` into a cache folder keyed by the content,
with the default state beside it (the base placed so that the lowest collision
geom rests on the floor).

The plan holds plain values (names, numbers, per-joint gains): the model layer
knows nothing of robot descriptions. :func:`simbackend.robots.robot_scene` makes
a plan from a description; its field names are the description's, so each
message names the field as the user wrote it (``robot.base_body: ...``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simbackend.errors import InvalidArgumentError, ModelLoadError, closest_names_hint
from simbackend.models.compiler import one_line, prepared_spec
from simbackend.models.mujoco_extra import import_mujoco
from simbackend.models.urdf import urdf_error_hint

__all__ = ["ScenePlan", "SceneFile", "SceneCompileError", "compose_scene", "cache_folder"]

#: the floor's name in a composed scene
FLOOR = "floor"
#: clearance (m) between the lowest collision geom and the floor in the default state
CLEARANCE = 0.002
#: bump when the composition changes: cached scenes of older versions are not reused
_VERSION = 2


class SceneCompileError(ModelLoadError, InvalidArgumentError):
    """A plan's model file cannot be read (missing, a mesh it names missing) or MuJoCo's compiler refuses it
    (an inertia, a mass, a mesh): one line naming ``{argument}.model``, the file and the reason, with the fix
    where one is known. Both a
    :class:`~simbackend.errors.ModelLoadError` and an :class:`~simbackend.errors.InvalidArgumentError`
    (the description's model is an argument the call cannot take)."""


@dataclass(frozen=True)
class ScenePlan:
    """What :func:`compose_scene` composes, as plain values (already checked by whoever made them).

    Attributes:
        name: the scene's name (its cache folder's, and messages').
        model: the model source: a built-in model name or an absolute MJCF/URDF path.
        joints, held_joints: the driven joints (the policy's, then the held ones).
        base_body: the floating base.
        default_pose: a keyframe name, or ``{joint: angle}`` for driven joints.
        actuation: ``"servo"`` (position actuators) or ``"pd"`` (motors).
        kp, kd, effort_limit: ``{joint: value}`` (joints absent keep the model's values).
        add_floor: add a floor plane. add_free_joint: give ``base_body`` a free joint where it has none.
        timestep: the physics substep (s). friction_cone, impratio: MuJoCo's friction cone
            (``"elliptic"`` or ``"pyramidal"``) and impedance ratio in the scene's options (``None``: the
            model's own). contact_timeconst: the time constant (s) written into the solref of every collision
            geom that keeps MuJoCo's default solref (the robot's and the ground's; ``None``: the model's own).
            base_keyframe: the keyframe the pose starts from when
            ``default_pose`` is a mapping.
        package_dirs, fuse_static: the model compiler's options.
        balance_inertia: let MuJoCo's compiler correct inertias that violate the triangle inequality
            (its ``balanceinertia``; ``None``/``False``: as written, an error names the body).
        terrain: a :class:`~simbackend.terrains.TerrainConfig` laid out in place of the floor plane (one
            height field per tile, :func:`simbackend.terrains.add_terrain`); needs ``add_floor``.
        self_collisions: ``False``: no two of the robot's bodies (``base_body`` and its descendants) collide
            (:func:`no_self_collisions`); ``True``: the model's own filtering.
        collision_exclude: ``((body_a, body_b), ...)`` pairs that never collide: ``<exclude>`` pairs added.
        argument: what messages name: ``{argument}.{field}`` (``robot.base_body``).
    """

    name: str
    model: str
    joints: tuple[str, ...]
    held_joints: tuple[str, ...]
    base_body: str
    default_pose: str | dict[str, float]
    actuation: str
    kp: dict[str, float]
    kd: dict[str, float]
    effort_limit: dict[str, float]
    add_floor: bool
    add_free_joint: bool
    timestep: float
    friction_cone: str | None = None
    impratio: float | None = None
    contact_timeconst: float | None = None
    base_keyframe: str | None = None
    package_dirs: tuple[str, ...] | None = None
    fuse_static: bool | None = None
    balance_inertia: bool | None = None
    terrain: Any = None
    self_collisions: bool = True
    collision_exclude: tuple[tuple[str, str], ...] = ()
    argument: str = "scene"

    @property
    def driven_joints(self) -> tuple[str, ...]:
        return tuple(self.joints) + tuple(self.held_joints)


@dataclass(frozen=True)
class SceneFile:
    """What :func:`compose_scene` made: the model file and the default state.

    Attributes:
        path: the scene's MJCF file (absolute).
        default_qpos: ``(nq,)`` the default pose, base on the floor at the origin, level.
    """

    path: str
    default_qpos: tuple[float, ...]


def cache_folder() -> Path:
    """Where composed scenes are kept: ``$SIMBACKEND_CACHE/scenes`` or ``~/.cache/simbackend/scenes``."""
    root = os.environ.get("SIMBACKEND_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "simbackend"
    )
    return Path(root) / "scenes"


def compose_scene(plan: ScenePlan) -> SceneFile:
    """The plan's scene, composed and written on first use (then read from the cache)."""
    mujoco = import_mujoco()
    try:
        spec, label, urdf = prepared_spec(plan.model, plan.package_dirs, None, plan.fuse_static)
    except ModelLoadError as e:
        raise SceneCompileError(f"{plan.argument}.model: {e}") from e
    _compose(spec, plan, label)
    if plan.balance_inertia:
        spec.compiler.balanceinertia = True
    placed = json.dumps([plan.default_pose, plan.base_keyframe, plan.base_body, plan.driven_joints], sort_keys=True)
    try:
        xml = spec.to_xml()  # compiles the spec: MuJoCo's compile errors surface here first
    except Exception as e:  # mujoco raises ValueError with the compiler's (multi-line) message
        raise _compile_error(plan, label, urdf, one_line(e)) from e
    key = hashlib.sha256(f"{_VERSION}\n{placed}\n{xml}".encode()).hexdigest()[:20]
    folder = cache_folder() / f"{plan.name}-{key}"
    done = folder / "scene.json"
    if done.is_file():
        meta = json.loads(done.read_text())
        if Path(meta["path"]).is_file():
            return SceneFile(meta["path"], tuple(meta["default_qpos"]))
    try:
        model = spec.compile()
    except Exception as e:  # mujoco raises ValueError with the compiler's (multi-line) message
        raise _compile_error(plan, label, urdf, one_line(e)) from e
    qpos = _default_qpos(mujoco, model if plan.terrain is None else _floor_model(plan), plan)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{plan.name}-", dir=folder.parent))
    from simbackend.models.export import export_mjcf

    _, written = export_mjcf(spec, tmp)
    final = folder / written.name
    meta = {"path": str(final), "default_qpos": [float(x) for x in qpos], "name": plan.name}
    (tmp / "scene.json").write_text(json.dumps(meta))
    try:
        os.replace(tmp, folder)  # another process may have written the same scene: theirs is as good
    except OSError:
        pass
    if not done.is_file():
        raise ModelLoadError(f"{plan.argument} {plan.name!r}: could not write its scene into {folder}")
    return SceneFile(str(final), tuple(meta["default_qpos"]))


def _floor_model(plan: ScenePlan) -> Any:
    """The plan's model on the floor plane in place of its terrain, to place the default pose on: a task
    spawns the robot at a tile's origin, the default pose's height above the ground there."""
    from dataclasses import replace

    floor = replace(plan, terrain=None)
    spec, label, _ = prepared_spec(floor.model, floor.package_dirs, None, floor.fuse_static)
    _compose(spec, floor, label)
    if floor.balance_inertia:
        spec.compiler.balanceinertia = True
    return spec.compile()


def _compile_error(plan: ScenePlan, label: str, urdf: bool, message: str) -> SceneCompileError:
    """MuJoCo's compile error for the plan's model, in one line naming ``{argument}.model`` and the file, with
    the fix a plan can ask for (the balance_inertia option) or the one a URDF file can."""
    hint = ""
    if "A + B >= C" in message and not plan.balance_inertia:
        hint = (
            f"; set {plan.argument}.model_options.balance_inertia to true to let MuJoCo correct the inertia"
            " (or fix the body's inertia in the file)"
        )
    elif urdf:
        hint = urdf_error_hint(message)
    return SceneCompileError(f"{plan.argument}.model: MuJoCo could not compile {label}: {message}{hint}")


def _compose(spec: Any, plan: ScenePlan, label: str) -> None:
    """Edit ``spec`` in place: free joint, actuation, floor, timestep, friction cone."""
    mujoco = import_mujoco()
    joints = {j.name: j for j in spec.joints}
    bodies = {b.name for b in spec.bodies}
    for name in plan.driven_joints:
        if name not in joints:
            field = "joints" if name in plan.joints else "held_joints"
            raise InvalidArgumentError(
                f"{plan.argument}.{field}: {label} has no joint {name!r}{closest_names_hint(name, list(joints))}"
            )
    if plan.base_body not in bodies:
        raise InvalidArgumentError(
            f"{plan.argument}.base_body: {label} has no body {plan.base_body!r}{closest_names_hint(plan.base_body, bodies)}"
        )
    base = spec.body(plan.base_body)
    if plan.add_free_joint and not any(j.type == mujoco.mjtJoint.mjJNT_FREE for j in base.joints):
        if base.parent.name != spec.worldbody.name:
            raise InvalidArgumentError(
                f"{plan.argument}.add_free_joint: body {plan.base_body!r} is not a child of the world"
            )
        if base.joints:
            raise InvalidArgumentError(
                f"{plan.argument}.add_free_joint: body {plan.base_body!r} already has joints {[j.name for j in base.joints]}"
            )
        base.add_freejoint(name=f"{plan.base_body}_free")
    _actuate(spec, plan, joints, label)
    if plan.terrain is not None:
        if not plan.add_floor:
            raise InvalidArgumentError(
                f"terrain: {plan.argument} {plan.name!r} brings its own floor ({plan.argument}.add_floor is false);"
                " a terrain takes the place of the floor a scene adds"
            )
        from simbackend.terrains import add_terrain, generate_terrain

        add_terrain(spec, generate_terrain(plan.terrain))
        spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    elif plan.add_floor:
        taken = {g.name for g in spec.geoms}
        spec.worldbody.add_geom(
            name=FLOOR if FLOOR not in taken else f"{plan.name}_{FLOOR}",
            type=mujoco.mjtGeom.mjGEOM_PLANE,
            size=[50.0, 50.0, 0.05],
            contype=1,
            conaffinity=1,
            condim=3,
            friction=[1.0, 0.005, 0.0001],
            rgba=[0.3, 0.35, 0.4, 1.0],
        )
        spec.worldbody.add_light(pos=[0.0, 0.0, 4.0], dir=[0.0, 0.0, -1.0])
        spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.timestep = plan.timestep
    if plan.friction_cone is not None:
        cone = {"elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC, "pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL}
        spec.option.cone = cone[plan.friction_cone]
    if plan.impratio is not None:
        spec.option.impratio = plan.impratio
    if plan.contact_timeconst is not None:
        _contact_timeconst(spec, plan.contact_timeconst)
    if not plan.self_collisions:
        no_self_collisions(spec, plan.base_body, f"{plan.argument}.self_collisions")
    for i, (a, b) in enumerate(plan.collision_exclude):
        for name in (a, b):
            if name not in bodies:
                raise InvalidArgumentError(
                    f"{plan.argument}.collision_exclude[{i}]: {label} has no body {name!r}{closest_names_hint(name, bodies)}"
                )
        spec.add_exclude(bodyname1=a, bodyname2=b)


#: MuJoCo's default solref: (time constant s, damping ratio)
MUJOCO_SOLREF = (0.02, 1.0)


def _contact_timeconst(spec: Any, timeconst: float) -> None:
    """Give every collision geom of ``spec`` that keeps MuJoCo's default solref the time constant
    ``timeconst`` (damping ratio 1 kept): a contact mixes its two geoms' solref, so the robot's feet on the
    ground act with it. Geoms whose model chose its own solref keep theirs."""
    for g in spec.geoms:
        if not (int(g.contype) or int(g.conaffinity)):
            continue
        if tuple(float(x) for x in g.solref) == MUJOCO_SOLREF:
            g.solref = [float(timeconst), MUJOCO_SOLREF[1]]


def no_self_collisions(spec: Any, base_body: str, where: str = "self_collisions") -> bool:
    """Turn off every contact between two bodies of the robot rooted at ``base_body`` (it and its
    descendants) in ``spec``, keeping each geom's contacts with every other geom exactly as they were.

    MuJoCo collides two geoms when ``contype_a & conaffinity_b or contype_b & conaffinity_a``; SAPIEN maps
    the same bits onto PhysX's collision groups, MuJoCo Warp and the plugins read them, so the same scene file
    filters alike everywhere. Each distinct ``contype`` ``k`` of the robot's geoms is replaced by a bit
    ``B_k`` no geom uses, and every other geom whose ``conaffinity`` meets ``k`` gains ``B_k``: a robot geom
    and another geom collide exactly as before, two robot geoms never (neither's conaffinity holds a
    ``B`` bit). A model whose robot geoms cannot collide with each other already is left as it is (its
    file unchanged). Returns whether it changed anything; more distinct contypes than free bits raises
    naming ``where``.
    """
    robot: set[str] = set()
    for b in spec.bodies:
        x = b
        while x is not None and x.name != spec.worldbody.name:
            if x.name == base_body:
                robot.add(b.name)
                break
            x = x.parent
    collide = [g for g in spec.geoms if int(g.contype) or int(g.conaffinity)]
    mine = [g for g in collide if g.parent.name in robot]
    others = [g for g in collide if g.parent.name not in robot]
    pairs = any(
        (int(a.contype) & int(b.conaffinity)) or (int(b.contype) & int(a.conaffinity))
        for i, a in enumerate(mine)
        for b in mine[i + 1 :]
        if a.parent.name != b.parent.name
    )
    if not pairs:
        return False
    used = 0
    for g in collide:
        used |= int(g.contype) | int(g.conaffinity)
    free = [1 << i for i in range(32) if not used & (1 << i)]
    kinds = sorted({int(g.contype) for g in mine if int(g.contype)})
    if len(kinds) > len(free):
        raise InvalidArgumentError(
            f"{where}: cannot turn self-collisions off: the model's geoms use {32 - len(free)} of the 32 contact"
            f" bits and the robot's geoms {len(kinds)} distinct contypes; free bits or set {where} to true"
        )
    bit = dict(zip(kinds, free, strict=False))
    for g in others:
        extra = 0
        for k, b in bit.items():
            if k & int(g.conaffinity):
                extra |= b
        g.conaffinity = int(g.conaffinity) | extra
    for g in mine:
        if int(g.contype):
            g.contype = bit[int(g.contype)]
    return True


def _actuate(spec: Any, plan: ScenePlan, joints: dict, label: str) -> None:
    """Give every driven joint the actuator the actuation needs: ``servo``, a position actuator (added with
    ``kp``/``kd`` where the joint has none, else its gains replaced where given); ``pd``, a motor (added where
    the joint has none, its ctrl range the effort limit); the effort limit as the force range."""
    mujoco = import_mujoco()
    names = plan.driven_joints
    kp, kd, effort = plan.kp, plan.kd, plan.effort_limit
    on_joint: dict[str, list] = {}
    for a in spec.actuators:
        if a.trntype == mujoco.mjtTrn.mjTRN_JOINT:
            on_joint.setdefault(a.target, []).append(a)
    for name in names:
        acts = on_joint.get(name, [])
        if len(acts) > 1:
            field = "joints" if name in plan.joints else "held_joints"
            raise InvalidArgumentError(
                f"{plan.argument}.{field}: joint {name!r} has {len(acts)} actuators; a driven joint needs exactly one"
            )
        kind = _kind(mujoco, acts[0]) if acts else None
        if plan.actuation == "servo":
            if kind is None:
                if name not in kp:
                    raise InvalidArgumentError(
                        f"{plan.argument}.kp: {label} has no actuator on joint {name!r}: give kp (and kd) to add a servo"
                    )
                act = spec.add_actuator(name=f"{name}_servo", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
                act.set_to_position(kp=kp[name], kv=kd.get(name, 0.0))
                acts = [act]
            elif kind != "position":
                raise InvalidArgumentError(
                    f"{plan.argument}.actuation: joint {name!r} has a {kind} actuator; 'servo' needs position actuators"
                    " (use actuation='pd' for motors)"
                )
            else:
                a = acts[0]
                if name in kp:
                    a.gainprm[0] = kp[name]
                    a.biasprm[1] = -kp[name]
                if name in kd:
                    a.biasprm[2] = -kd[name]
        else:
            if kind is None:
                act = spec.add_actuator(name=f"{name}_motor", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
                act.set_to_motor()
                if name in effort:
                    act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
                    act.ctrlrange = [-effort[name], effort[name]]
                acts = [act]
            elif kind != "motor":
                raise InvalidArgumentError(
                    f"{plan.argument}.actuation: joint {name!r} has a {kind} actuator; 'pd' needs motors"
                    " (use actuation='servo' for position actuators)"
                )
        if name in effort:
            a = acts[0]
            a.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            a.forcerange = [-effort[name], effort[name]]


def _kind(mujoco: Any, act: Any) -> str:
    """``motor``, ``position``, ``velocity`` or ``other``, as MuJoCo's shortcut elements set the parameters."""
    if int(act.gaintype) != int(mujoco.mjtGain.mjGAIN_FIXED):
        return "other"
    if int(act.biastype) == int(mujoco.mjtBias.mjBIAS_NONE):
        return "motor"
    if int(act.biastype) == int(mujoco.mjtBias.mjBIAS_AFFINE):
        if act.biasprm[1] != 0:
            return "position"
        if act.biasprm[2] != 0:
            return "velocity"
    return "other"


def _default_qpos(mujoco: Any, model: Any, plan: ScenePlan) -> np.ndarray:
    """The default pose with the base level at the origin, lifted so the lowest collision geom clears the
    floor by :data:`CLEARANCE` (the model's own pose where it has no floor plane)."""
    qpos = np.array(model.qpos0, dtype=np.float64)
    keys = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_KEY, k) for k in range(model.nkey)]
    keyframe = plan.default_pose if isinstance(plan.default_pose, str) else plan.base_keyframe
    if keyframe is not None:
        if keyframe not in keys:
            field = "default_pose" if isinstance(plan.default_pose, str) else "base_keyframe"
            raise InvalidArgumentError(
                f"{plan.argument}.{field}: the model has no keyframe {keyframe!r}{closest_names_hint(keyframe, keys)}"
            )
        qpos = np.array(model.key_qpos[keys.index(keyframe)], dtype=np.float64)
    if isinstance(plan.default_pose, dict):
        for name, angle in plan.default_pose.items():
            j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            qpos[int(model.jnt_qposadr[j])] = angle
    base = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, plan.base_body)
    free = [j for j in range(model.njnt) if model.jnt_bodyid[j] == base and model.jnt_type[j] == 0]
    if not free or model.body_parentid[base] != 0:
        raise InvalidArgumentError(
            f"{plan.argument}.base_body: {plan.base_body!r} has no free joint to the world: a locomotion task needs a"
            " floating base (a URDF's root link gets one with add_free_joint=True)"
        )
    adr = int(model.jnt_qposadr[free[0]])
    z0 = float(qpos[adr + 2])
    qpos[adr : adr + 3] = (0.0, 0.0, z0)
    qpos[adr + 3 : adr + 7] = (1.0, 0.0, 0.0, 0.0)
    floors = [g for g in range(model.ngeom) if model.geom_bodyid[g] == 0 and model.geom_type[g] == 0]
    if floors:
        data = mujoco.MjData(model)
        data.qpos[:] = qpos
        mujoco.mj_forward(model, data)
        fromto = np.zeros(6)
        robot = [
            g
            for g in range(model.ngeom)
            if model.geom_bodyid[g] != 0 and model.geom_contype[g] | model.geom_conaffinity[g]
        ]
        try:
            gap = min(mujoco.mj_geomDistance(model, data, floors[0], g, 10.0, fromto) for g in robot)
        except Exception as e:  # noqa: BLE001 - a geom type MuJoCo cannot measure: say which robot it is
            raise ModelLoadError(
                f"{plan.argument} {plan.name!r}: cannot place its default pose on the floor: {one_line(e)}"
            ) from e
        qpos[adr + 2] = z0 + CLEARANCE - gap
    return qpos
