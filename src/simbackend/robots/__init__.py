"""Robot descriptions, registered by name: ``quadruped``, ``go1``, ``g1``, and yours.

A :class:`RobotDescription` says what a locomotion task needs to know about a
robot model: its file, the joints the policy drives (in order) and their
default pose, how they are actuated, the base and the feet. The velocity task
(:mod:`simbackend.tasks.velocity`) runs any of them: ``make_task("velocity",
config={"robot": "go1"})``. A robot of your own is one registration
(:func:`register_robot`), an entry point of the group ``simbackend.robots``
(``name = "package.module:DESCRIPTION"``), or a JSON file passed where a name
goes (``--robot my_robot.json``; relative model paths are read from the file's
folder). docs/robots.md walks through one written for a URDF robot.

:func:`robot_scene` composes a description into one MJCF file (every engine
builds from it); :func:`make_robot_backend` builds a backend on it in one call,
and :func:`resolve` checks a description against a built backend, through the
contract only, and gives the ids and columns a task reads; :func:`joint_controller` drives the
joints at the description's actuation, and :func:`settle` checks that the robot
holds its default pose on each engine::

    sim = make_robot_backend("my_robot.json", "mujoco", 16)
    robot = resolve("my_robot.json", sim)
"""

from __future__ import annotations

from .actuation import joint_controller
from .aliases import expand_aliases, expand_plan
from .description import ACTUATIONS, RobotDescription
from .registry import available_robots, get_robot, register_robot
from .resolved import ResolvedRobot, check_robot, make_robot_backend, resolve
from .scene import RobotScene, robot_scene, self_overlap_warnings
from .settle import EngineSettle, SettleReport, settle, settle_warnings

__all__ = [
    "ACTUATIONS",
    "EngineSettle",
    "ResolvedRobot",
    "RobotDescription",
    "RobotScene",
    "SettleReport",
    "available_robots",
    "check_robot",
    "expand_aliases",
    "expand_plan",
    "get_robot",
    "make_robot_backend",
    "register_robot",
    "resolve",
    "joint_controller",
    "robot_scene",
    "self_overlap_warnings",
    "settle",
    "settle_warnings",
]
