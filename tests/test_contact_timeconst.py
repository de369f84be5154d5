"""A description's MuJoCo contact time constant (``contact_timeconst``): validated, written into its scene's
geoms that keep MuJoCo's default solref (the robot's and the ground's), the model's own choice kept.

Why it exists: at MuJoCo's default 0.02 s a heavy robot's feet sag into the floor and slide under its weight
where PhysX's rigid contacts hold them: Go2 stood 3 % lower on MuJoCo than on SAPIEN and its hips
sagged 0.07 rad against 0.005, and its MuJoCo-trained policy tracked 0.36 m/s on PhysX for 0.93 on MuJoCo
(docs/sim-to-sim.md). Two substeps, the stiffest contact MuJoCo integrates, stands every robot within 0.8 %
of the rigid engines. The conformance clause ``test_standing_robot_settles_at_mujocos_height`` measures the
physics; these tests hold the plumbing.
"""

from __future__ import annotations

import dataclasses
import json

import mujoco
import numpy as np
import pytest

from simbackend.errors import ArgumentTypeError, InvalidArgumentError
from simbackend.robots import get_robot, robot_scene
from simbackend.robots.description import RobotDescription

#: MuJoCo's default solref
DEFAULT_SOLREF = (0.02, 1.0)

#: a two-legged MJCF whose left foot chose its own solref: the scene must keep it
OWN_SOLREF = """
<mujoco model="biped">
  <worldbody>
    <body name="base" pos="0 0 0.3">
      <geom type="box" size="0.1 0.1 0.05" mass="2"/>
      <body name="left" pos="0 0.08 -0.1">
        <joint name="left_hip" axis="0 1 0"/>
        <geom name="left_foot" type="capsule" fromto="0 0 0 0 0 -0.12" size="0.02" solref="0.05 0.8" mass="0.3"/>
      </body>
      <body name="right" pos="0 -0.08 -0.1">
        <joint name="right_hip" axis="0 1 0"/>
        <geom name="right_foot" type="capsule" fromto="0 0 0 0 0 -0.12" size="0.02" mass="0.3"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _solrefs(desc: RobotDescription) -> dict[str, tuple[float, float]]:
    """Every collision geom's solref in the composed scene, by geom name (the floor's ``floor``)."""
    m = mujoco.MjModel.from_xml_path(robot_scene(desc).path)
    out = {}
    for i in range(m.ngeom):
        if m.geom_contype[i] or m.geom_conaffinity[i]:
            out[m.geom(i).name or f"geom{i}"] = tuple(float(x) for x in np.round(m.geom_solref[i], 6))
    return out


def test_default_is_two_substeps_on_the_robot_and_the_floor() -> None:
    go1 = get_robot("go1")
    assert go1.contact_timeconst is None and go1.scene_contact_timeconst == pytest.approx(2 * go1.timestep)
    refs = _solrefs(go1)
    assert "floor" in refs and len(refs) > 4
    assert set(refs.values()) == {(round(2 * go1.timestep, 6), 1.0)}, refs


def test_model_keeps_mujocos_default_and_a_number_is_written_as_given() -> None:
    go1 = get_robot("go1")
    assert set(_solrefs(dataclasses.replace(go1, contact_timeconst="model")).values()) == {DEFAULT_SOLREF}
    assert set(_solrefs(dataclasses.replace(go1, contact_timeconst=0.015)).values()) == {(0.015, 1.0)}


def test_a_geom_with_its_own_solref_keeps_it(tmp_path) -> None:
    path = tmp_path / "biped.xml"
    path.write_text(OWN_SOLREF)
    desc = RobotDescription(
        name="biped_own_solref",
        model=str(path),
        joints=["left_hip", "right_hip"],
        default_pose={"*": 0.0},
        base_body="base",
        feet=["left", "right"],
        add_free_joint=True,
        kp=20.0,
        kd=1.0,
        timestep=0.004,
    )
    refs = _solrefs(desc)
    assert refs["left_foot"] == (0.05, 0.8)
    assert refs["right_foot"] == refs["floor"] == (0.008, 1.0)


def test_json_description_round_trips_the_field(tmp_path) -> None:
    d = get_robot("go1").to_dict()
    assert d["contact_timeconst"] is None
    for value in ("model", 0.03):
        d["contact_timeconst"] = value
        path = tmp_path / f"robot_{value}.json"
        path.write_text(json.dumps(d))
        assert get_robot(str(path)).contact_timeconst == value


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (0.004, InvalidArgumentError, "under two substeps (0.01 s at robot.timestep 0.005)"),
        (0.0, InvalidArgumentError, "robot.contact_timeconst"),
        (-0.02, InvalidArgumentError, "robot.contact_timeconst"),
        (float("nan"), InvalidArgumentError, "robot.contact_timeconst"),
        (5.0, InvalidArgumentError, "robot.contact_timeconst"),
        ("stiff", InvalidArgumentError, "expected a time constant in seconds, 'model' or null, got 'stiff'"),
        (True, ArgumentTypeError, "robot.contact_timeconst"),
        ([0.02, 1.0], ArgumentTypeError, "robot.contact_timeconst"),
    ],
)
def test_bad_values_are_refused_in_one_line_naming_the_field(value, error, words) -> None:
    with pytest.raises(error) as e:
        dataclasses.replace(get_robot("go1"), contact_timeconst=value)
    message = str(e.value)
    assert message.startswith("robot.contact_timeconst:") and words in message and "\n" not in message
