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

__all__ = ["RobotScene", "robot_scene", "scene_plan"]

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
        base_keyframe=desc.base_keyframe,
        package_dirs=dirs,
        fuse_static=opts.get("fuse_static"),
        balance_inertia=opts.get("balance_inertia"),
        terrain=terrain,
        self_collisions=desc.self_collisions,
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
