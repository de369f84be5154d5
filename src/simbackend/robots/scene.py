"""A robot's scene: its description composed into one MJCF file (:func:`robot_scene`).

The composition itself (MuJoCo's model editor, the cache folder) is the model
layer's, :func:`simbackend.models.scene.compose_scene`, which takes plain values;
this module turns a description into them: the model's absolute path, the
gains and the default pose per joint (the description's glob patterns
resolved), the package folders (a relative one is read from the description's
folder, as its model is).
"""

from __future__ import annotations

import os
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError
from simbackend.models.packages import package_dirs_option
from simbackend.models.scene import SceneFile, ScenePlan, compose_scene

from .description import RobotDescription, pattern_values

__all__ = ["RobotScene", "robot_scene", "scene_plan", "self_overlap_warnings"]

#: what :func:`robot_scene` gives: ``path`` (the scene's MJCF file) and ``default_qpos`` (the default state)
RobotScene = SceneFile


def scene_plan(desc: RobotDescription | str | os.PathLike, terrain: Any = None) -> ScenePlan:
    """The plain values the model layer composes ``desc``'s scene from (messages name ``robot.FIELD``);
    ``desc`` is a description, a registered name or a JSON description file; ``terrain`` a
    :class:`~simbackend.terrains.TerrainConfig` (or its fields, or a JSON file) in place of the floor."""
    from simbackend.terrains import TerrainConfig

    from .registry import get_robot

    if terrain is not None:
        terrain = TerrainConfig.load(terrain)

    desc = get_robot(desc)
    names = desc.driven_joints
    opts = desc.model_options
    dirs = opts.get("package_dirs")
    if dirs is not None:
        dirs = tuple(p if desc.base_dir is None else os.path.join(desc.base_dir, os.path.expanduser(p)) for p in dirs)
        try:
            package_dirs_option(dirs)  # each is a folder
        except SimBackendError as e:
            cls = ArgumentTypeError if isinstance(e, TypeError) else InvalidArgumentError
            raise cls(f"robot.model_options.{e}") from None
    pose = desc.default_pose
    return ScenePlan(
        name=desc.name,
        model=desc.model_path(),
        joints=tuple(desc.joints),
        held_joints=tuple(desc.held_joints),
        base_body=desc.base_body,
        default_pose=pose if isinstance(pose, str) else pattern_values(pose, names, "robot.default_pose"),
        actuation=desc.actuation,
        kp=pattern_values(desc.kp, names, "robot.kp"),
        kd=pattern_values(desc.kd, names, "robot.kd"),
        effort_limit=pattern_values(desc.effort_limit, names, "robot.effort_limit"),
        add_floor=desc.add_floor,
        add_free_joint=desc.add_free_joint,
        timestep=desc.timestep,
        friction_cone=desc.friction_cone,
        impratio=desc.impratio,
        contact_timeconst=desc.scene_contact_timeconst,
        base_keyframe=desc.base_keyframe,
        package_dirs=dirs,
        fuse_static=opts.get("fuse_static"),
        balance_inertia=opts.get("balance_inertia"),
        terrain=terrain,
        self_collisions=desc.self_collisions,
        collision_exclude=tuple(tuple(p) for p in desc.collision_exclude),
        argument="robot",
    )


def robot_scene(desc: RobotDescription | str | os.PathLike, terrain: Any = None) -> RobotScene:
    """The description's scene, composed and written on first use (then read from the cache).

    ``desc`` is a :class:`RobotDescription`, a registered name or a JSON description file (as
    :func:`simbackend.robots.get_robot` takes); ``terrain`` a :class:`~simbackend.terrains.TerrainConfig`,
    its fields or a JSON file: the robot on that terrain instead of a floor plane (bad fields fail here,
    in one line naming ``terrain.FIELD``). MuJoCo's compile errors are one line naming
    ``robot.model`` and the file (:class:`~simbackend.models.scene.SceneCompileError`, an
    :class:`~simbackend.errors.InvalidArgumentError`).
    """
    return compose_scene(scene_plan(desc, terrain))


def self_overlap_warnings(desc: RobotDescription | str | os.PathLike) -> list[str]:
    """One line per way the robot's collision geometry overlaps itself in its scene at the default pose
    (:func:`simbackend.models.overlaps.self_overlaps`), each saying what to do: a body's collision geom (a
    mesh: its convex hull) that contains the origin of another body it collides with, and the pairs of its
    bodies in contact. None with ``self_collisions`` false (the default): no two of its bodies collide."""
    from simbackend.models.overlaps import contact_pairs, self_overlaps

    from .registry import get_robot

    desc = get_robot(desc)
    scene = robot_scene(desc)
    found = self_overlaps(scene.path, scene.default_qpos, desc.base_body)
    fix = (
        "set robot.self_collisions to false (the default), exclude the pair (robot.collision_exclude), or give"
        " the link primitive collision geometry (boxes, capsules) that clears the other"
    )
    out = []
    held: dict[tuple[str, str], list[str]] = {}
    for body, geom, other in found.swallowed:
        held.setdefault((body, geom), []).append(other)
    for (body, geom), others in held.items():
        out.append(
            f"{desc.name}: the collision geometry of {body} ({geom}; a mesh collides as its convex hull) contains"
            f" the origin of {', '.join(others)}, and they collide with it: {fix}"
        )
    if found.contacts:
        out.append(
            f"{desc.name}: its bodies collide with each other at the default pose: {contact_pairs(found.contacts)}; {fix}"
        )
    return out
