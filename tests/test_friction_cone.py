"""A description's MuJoCo friction cone (``friction_cone``, ``impratio``): validated, written into its scene,
noted (not refused) by the engines that do not read it.

Why it exists: with MuJoCo's defaults (pyramidal cone, impratio 1) a foot under a steady sideways load creeps
on MuJoCo alone, and policies trained there learn to use it (docs/sim-to-sim.md). The conformance clause
``test_standing_robot_settles_at_mujocos_height`` measures the physics; these tests hold the plumbing.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import mujoco
import pytest

from simbackend.errors import ArgumentTypeError, InvalidArgumentError
from simbackend.robots import get_robot, robot_scene
from simbackend.robots.description import RobotDescription


def _options(desc: RobotDescription) -> tuple[int, float]:
    m = mujoco.MjModel.from_xml_path(robot_scene(desc).path)
    return int(m.opt.cone), float(m.opt.impratio)


def test_default_scene_has_the_elliptic_cone_at_impratio_10() -> None:
    desc = get_robot("go1")
    assert (desc.friction_cone, desc.impratio) == ("elliptic", 10.0)
    assert _options(desc) == (int(mujoco.mjtCone.mjCONE_ELLIPTIC), 10.0)


def test_pyramidal_keeps_mujocos_own_defaults_and_impratio_is_taken_as_given() -> None:
    go1 = get_robot("go1")
    pyramidal = dataclasses.replace(go1, friction_cone="pyramidal", impratio=None)
    assert pyramidal.impratio == 1.0
    assert _options(pyramidal) == (int(mujoco.mjtCone.mjCONE_PYRAMIDAL), 1.0)
    stiff = dataclasses.replace(go1, impratio=100)
    assert _options(stiff) == (int(mujoco.mjtCone.mjCONE_ELLIPTIC), 100.0)


def test_json_description_round_trips_the_fields(tmp_path) -> None:
    d = get_robot("go1").to_dict()
    assert (d["friction_cone"], d["impratio"]) == ("elliptic", 10.0)
    d.update(friction_cone="pyramidal", impratio=2.5)
    path = tmp_path / "robot.json"
    path.write_text(json.dumps(d))
    back = get_robot(str(path))
    assert (back.friction_cone, back.impratio) == ("pyramidal", 2.5)


@pytest.mark.parametrize(
    ("field", "value", "error", "words"),
    [
        ("friction_cone", "round", InvalidArgumentError, "expected 'elliptic' or 'pyramidal', got 'round'"),
        ("friction_cone", "Elliptic", InvalidArgumentError, "got 'Elliptic'"),
        ("friction_cone", 1, ArgumentTypeError, "got int"),
        ("friction_cone", None, ArgumentTypeError, "got NoneType"),
        ("impratio", 0, InvalidArgumentError, "robot.impratio"),
        ("impratio", -3.0, InvalidArgumentError, "robot.impratio"),
        ("impratio", 1e9, InvalidArgumentError, "robot.impratio"),
        ("impratio", float("nan"), InvalidArgumentError, "robot.impratio"),
        ("impratio", "10", ArgumentTypeError, "robot.impratio"),
        ("impratio", True, ArgumentTypeError, "robot.impratio"),
    ],
)
def test_bad_values_are_refused_in_one_line_naming_the_field(field, value, error, words) -> None:
    with pytest.raises(error) as e:
        dataclasses.replace(get_robot("go1"), **{field: value})
    message = str(e.value)
    assert message.startswith(f"robot.{field}:") and words in message and "\n" not in message


@pytest.mark.skipif(importlib.util.find_spec("simbackend_motrix") is None, reason="the Motrix plugin is not installed")
def test_motrix_notes_the_cone_it_does_not_read() -> None:
    from simbackend import make_backend

    backend = make_backend("motrix", robot_scene(get_robot("go1")).path, 1)
    try:
        assert any("friction cone and impratio are ignored" in n for n in backend.notes)
    finally:
        backend.close()
