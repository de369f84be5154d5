"""Issue 51, part 3: calibration a user can run on any robot.

A URDF's geoms are auto-named (``geom1``...), its links are not: a geom term's ``bodies`` reaches a body's
collision geoms, ``feet`` stands for a robot description's feet, and ``calibrate --robot R`` needs no
parameter file (the description's default set), printing what each parameter resolved to. The robot is a
two-legged URDF written here (primitives; a link with no geometry; a foot with a visual) on MuJoCo.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simbackend.calibration import ParameterSet
from simbackend.calibration.robot import default_parameters, resolved_names, robot_parameters
from simbackend.errors import InvalidArgumentError, UnknownNameError
from simbackend.randomization import Distribution as D
from simbackend.randomization import RandomizationPlan, Term, resolve_targets
from simbackend.robots import expand_plan, get_robot, make_robot_backend

URDF = """<?xml version="1.0"?>
<robot name="biped">
  <link name="base">
    <inertial><mass value="3"/><inertia ixx="0.02" iyy="0.03" izz="0.03" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><box size="0.3 0.2 0.08"/></geometry></collision>
  </link>
  <link name="imu_link">
    <inertial><mass value="0.01"/><inertia ixx="1e-6" iyy="1e-6" izz="1e-6" ixy="0" ixz="0" iyz="0"/></inertial>
  </link>
  <joint name="imu_joint" type="fixed"><parent link="base"/><child link="imu_link"/></joint>
{legs}
</robot>
"""
LEG = """
  <link name="{leg}_leg">
    <inertial><origin xyz="0 0 -0.1"/><mass value="0.4"/><inertia ixx="1e-3" iyy="1e-3" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 -0.1"/><geometry><cylinder radius="0.015" length="0.2"/></geometry></collision>
  </link>
  <joint name="{leg}_hip" type="revolute">
    <parent link="base"/><child link="{leg}_leg"/><origin xyz="0 {y} -0.04"/><axis xyz="0 1 0"/>
    <limit lower="-1.5" upper="1.5" effort="20" velocity="20"/>
  </joint>
  <link name="{leg}_toe">
    <inertial><mass value="0.05"/><inertia ixx="1e-5" iyy="1e-5" izz="1e-5" ixy="0" ixz="0" iyz="0"/></inertial>
    <visual><geometry><sphere radius="0.03"/></geometry></visual>
    <collision><geometry><sphere radius="0.02"/></geometry></collision>
  </link>
  <joint name="{leg}_ankle" type="revolute">
    <parent link="{leg}_leg"/><child link="{leg}_toe"/><origin xyz="0 0 -0.2"/><axis xyz="0 1 0"/>
    <limit lower="-1" upper="1" effort="20" velocity="20"/>
  </joint>
"""
FEET = ["left_toe", "right_toe"]


@pytest.fixture(scope="module")
def biped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The URDF and its JSON description (servos, no damping or armature in the model)."""
    folder = tmp_path_factory.mktemp("biped")
    legs = "".join(LEG.format(leg=k, y=y) for k, y in (("left", 0.08), ("right", -0.08)))
    (folder / "biped.urdf").write_text(URDF.format(legs=legs))
    desc = {
        "name": "biped",
        "model": "biped.urdf",
        "joints": ["left_hip", "left_ankle", "right_hip", "right_ankle"],
        "default_pose": {"*": 0.0},
        "base_body": "base",
        "feet": FEET,
        "add_free_joint": True,
        "kp": 30.0,
        "kd": 1.0,
    }
    path = folder / "biped.json"
    path.write_text(json.dumps(desc))
    return path


def _foot_geoms(info: object, body: str) -> list[int]:
    b = info.body_names.index(body)
    return [
        g
        for g in range(len(info.geom_names))
        if info.geom_body[g] == b and (info.geom_contype[g] or info.geom_conaffinity[g])
    ]


def test_a_body_target_reaches_the_collision_geoms_of_a_urdf_link(biped: Path) -> None:
    """A geom term's `bodies` sets every collision geom of the links it names, and only those: the URDF's
    geoms have no names a pattern like `.*_toe` could match (it raises), its links do."""
    with make_robot_backend(str(biped), "mujoco", 2) as sim:
        info = sim.info
        toes = _foot_geoms(info, "left_toe") + _foot_geoms(info, "right_toe")
        assert len(toes) == 2 and not any(info.geom_names[g].endswith("_toe") for g in toes)
        with pytest.raises(UnknownNameError, match=r"'\.\*_toe'"):
            sim.apply_init_randomization(
                RandomizationPlan((Term("geom_friction", D.fixed(0.77), targets=(".*_toe",)),))
            )
        plan = RandomizationPlan((Term("geom_friction", D.fixed(0.77), bodies=(".*_toe",), operation="set"),))
        sim.apply_init_randomization(plan)
        friction = sim.get_env_geom_friction()[:, :, 0].cpu().numpy()
        changed = np.flatnonzero(np.abs(friction[0] - info.geom_friction[:, 0]) > 1e-6)
        assert sorted(changed.tolist()) == sorted(toes), changed
        assert np.allclose(friction[:, toes], 0.77)
        # targets and bodies together: their union; the world body is the ground
        both = Term("geom_friction", D.fixed(1.0), targets=("floor",), bodies=("left_toe", "world"))
        ids = resolve_targets(info, both)
        assert sorted(ids.tolist()) == sorted([info.geom_names.index("floor")] + _foot_geoms(info, "left_toe"))


def test_a_body_target_that_resolves_to_no_collision_geom_is_refused_naming_it(biped: Path) -> None:
    """A `bodies` entry whose bodies have no collision geom, or that matches no body, raises naming the
    entry, before anything is written; `feet` without a robot says it needs one."""
    with make_robot_backend(str(biped), "mujoco", 1) as sim:
        before = sim.get_env_geom_friction().clone()
        for entry, error, match in (
            ("imu_link", InvalidArgumentError, r"bodies entry 'imu_link' resolves to no collision geom"),
            ("imu.*", InvalidArgumentError, r"bodies entry 'imu\.\*' resolves to no collision geom"),
            ("hand", UnknownNameError, r"'hand'"),
            ("feet", UnknownNameError, r"'feet' stands for a robot's feet only where a robot is given"),
        ):
            plan = RandomizationPlan((Term("geom_friction", D.fixed(0.5), bodies=("left_toe", entry)),))
            with pytest.raises(error, match=match):
                sim.apply_init_randomization(plan)
        assert (sim.get_env_geom_friction() == before).all()


def test_bodies_is_a_geom_terms_field_and_round_trips() -> None:
    """`bodies` goes with geom terms only (a body term names bodies in `targets`), and survives JSON."""
    with pytest.raises(InvalidArgumentError, match=r"bodies applies to geom terms only \(body terms take body"):
        Term("body_mass", D.fixed(1.0), bodies=("base",))
    with pytest.raises(InvalidArgumentError, match="bodies applies to geom terms only"):
        Term("joint_damping", D.fixed(1.0), bodies=("base",))
    t = Term("geom_compliance", D.uniform(0.5, 2.0), bodies=("feet", "world"), components=("timeconst",))
    back = RandomizationPlan.from_json(RandomizationPlan((t,)).to_json()).terms[0]
    assert back == t and back.bodies == ("feet", "world")
    p = ParameterSet.from_dict([{"kind": "geom_friction", "bodies": ["feet"], "targets": ["floor"], "low": 0.5,
                                 "high": 2.0}])  # fmt: skip
    assert p.parameters[0].name == "geom_friction[floor,body:feet]"
    assert p.plan([1.5]).terms[0].bodies == ("feet",)
    assert p.training_plan([1.5], 0.2).terms[0].bodies == ("feet",)


def test_feet_stands_for_the_descriptions_feet_bodies_or_geoms(biped: Path) -> None:
    """`feet` expands to the description's feet: link names stay bodies (their collision geoms); geoms the
    description names stay those geoms alone (Go1's foot spheres, not its calves' capsules)."""
    plan = RandomizationPlan((Term("geom_friction", D.fixed(2.0), bodies=("feet",), targets=("floor",)),))
    desc = get_robot(str(biped))
    with make_robot_backend(desc, "mujoco", 1) as sim:
        term = expand_plan(plan, desc, sim.info).terms[0]
        assert term.bodies == tuple(FEET) and term.targets == ("floor",)
        names = resolved_names(term, sim.info)
        assert len(names) == 3 and {n.split(" (")[1] for n in names} == {"world)", "left_toe)", "right_toe)"}
    go1 = get_robot("go1")
    with make_robot_backend(go1, "mujoco", 1) as sim:
        term = expand_plan(plan, go1, sim.info).terms[0]
        assert term.bodies is None and term.targets == ("floor", *go1.feet)
        assert resolved_names(term, sim.info)[1:] == [f"{g} ({g[:2]}_calf)" for g in go1.feet]
        # a parameter file's `feet` (calibrate --params with a robot) the same way
        given = ParameterSet.from_dict([{"kind": "geom_friction", "bodies": ["feet"], "low": 0.5, "high": 2.0}])
        params, resolved = robot_parameters(given, go1, sim)
        assert params.parameters[0].term.targets == tuple(go1.feet) and len(resolved[0]) == 4


def test_a_robots_default_parameters_come_from_its_description(biped: Path) -> None:
    """The default set: feet and floor friction, contact time constant and damping ratio (MuJoCo sets them
    per env), base mass, servo gain, and damping and armature added from 0 where the model has none; every
    bound valid on the model."""
    desc = get_robot(str(biped))
    with make_robot_backend(desc, "mujoco", 1) as sim:
        params = default_parameters(desc, sim.info, sim.capabilities.domain_randomization, sim.physics_dt)
        assert params.names == ("friction", "timeconst", "dampratio", "base_mass", "servo_gain", "damping", "armature")
        by = {p.name: p for p in params.parameters}
        assert by["friction"].term.bodies == ("world", *FEET) and by["friction"].term.operation == "scale"
        assert by["base_mass"].term.targets == ("base",)
        assert by["servo_gain"].term.kind == "actuator_kp" and len(by["servo_gain"].term.targets) == 4
        # the model has no damping or armature: added from 0, damping up to the servos' kv (kd 1.0)
        assert (by["damping"].term.operation, by["damping"].low, by["damping"].high) == ("add", 0.0, 1.0)
        assert by["armature"].term.operation == "add" and 0 < by["armature"].high < 0.1
        # timeconst's lowest factor keeps 2 physics steps
        assert by["timeconst"].low * 0.02 >= 2 * sim.physics_dt
        params.check_backend(sim)
        _, resolved = robot_parameters(None, desc, sim)
        assert [len(r) for r in resolved] == [3, 3, 3, 1, 4, 4, 4]


def test_a_pd_robot_calibrates_its_motor_strength() -> None:
    """A PD law on motors has no servo kp: its gain is the motors' strength (kp and kd together)."""
    desc = get_robot("quadruped")
    with make_robot_backend(desc, "mujoco", 1) as sim:
        params = default_parameters(desc, sim.info, sim.capabilities.domain_randomization, sim.physics_dt)
        gain = {p.name: p for p in params.parameters}["servo_gain"]
        assert gain.term.kind == "actuator_strength" and len(gain.term.targets) == 12


def test_calibrate_with_a_robot_and_no_params_fits_its_default_set(biped: Path, tmp_path: Path) -> None:
    """`calibrate --robot R` without --params: the default set, printed with what each parameter resolved to;
    the plans it writes name the feet's links (no alias left). Without a robot --params is required."""
    pytest.importorskip("cmaes")
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    log, known = tmp_path / "log.npz", tmp_path / "known.json"  # excite's --dr takes `feet` too
    plan = RandomizationPlan((Term("geom_friction", D.fixed(1.2), bodies=("feet", "world")),))
    known.write_text(plan.to_json())
    r = CliRunner().invoke(app, ["excite", "--robot", str(biped), "--seconds", "0.3", "--num-envs", "1",
                                 "--dr", str(known), "--out", str(log)])  # fmt: skip
    assert r.exit_code == 0, r.output
    out, train = tmp_path / "fit.json", tmp_path / "train.json"
    r = CliRunner().invoke(app, ["calibrate", "--robot", str(biped), "--reference", str(log), "--out", str(out),
                                 "--training-plan", str(train), "-g", "1", "--popsize", "4", "--window", "5",
                                 "--max-envs", "8"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "parameters (the robot's default set)" in r.output, r.output
    text = " ".join(r.output.split())
    assert "-> floor (world), " in text and "(left_toe), " in text and "(right_toe)" in text, r.output
    assert "-> base" in text, r.output
    terms = RandomizationPlan.load(train).terms
    assert terms[0].bodies == ("world", *FEET) and "feet" not in json.dumps(RandomizationPlan.load(out).to_dict())
    r = CliRunner().invoke(app, ["calibrate", "--model", str(biped.parent / "biped.urdf"), "--reference", str(log),
                                 "--out", str(tmp_path / "x.json")])  # fmt: skip
    assert r.exit_code == 2 and "--params: required without a robot" in r.output, r.output


MJCF = """<mujoco>
  <worldbody>
    <geom name="ground" type="plane" size="2 2 0.1"/>
    <body name="leg" pos="0 0 0.5">
      <freejoint/>
      <geom name="shin" type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/>
      <geom name="shin_paint" type="capsule" fromto="0 0 0 0 0 -0.2" size="0.025" contype="0" conaffinity="0"/>
      <body name="marker"><geom type="sphere" size="0.01" contype="0" conaffinity="0" mass="0.01"/></body>
    </body>
  </worldbody>
</mujoco>"""


def test_a_bodys_visual_geoms_are_left_alone(tmp_path: Path) -> None:
    """Only collision geoms (contype or conaffinity set) are a body's: a body with visual geoms alone
    resolves to none and is refused naming the entry."""
    from simbackend.registry import make_backend

    (tmp_path / "leg.xml").write_text(MJCF)
    with make_backend("mujoco", str(tmp_path / "leg.xml"), 1) as sim:
        info = sim.info
        assert resolve_targets(info, Term("geom_friction", D.fixed(1.0), bodies=("leg",))).tolist() == [
            info.geom_names.index("shin")
        ]
        with pytest.raises(InvalidArgumentError, match=r"bodies entry 'marker' resolves to no collision geom"):
            resolve_targets(info, Term("geom_friction", D.fixed(1.0), bodies=("marker",)))


def test_the_velocity_task_applies_a_plans_feet_to_its_robot(biped: Path) -> None:
    """A training plan written once (`bodies: ["feet", "world"]`) reaches each robot's feet: the task expands
    the alias through its robot's description before applying the plan."""
    from simbackend.tasks import make_task

    plan = RandomizationPlan((Term("geom_friction", D.fixed(0.66), bodies=("feet",), operation="set"),))
    task = make_task("velocity", "mujoco", 2, config={"robot": str(biped), "randomization": plan})
    try:
        info = task.backend.info
        toes = _foot_geoms(info, "left_toe") + _foot_geoms(info, "right_toe")
        friction = task.backend.get_env_geom_friction()[:, :, 0].cpu().numpy()
        changed = np.flatnonzero(np.abs(friction[0] - info.geom_friction[:, 0]) > 1e-6)
        assert sorted(changed.tolist()) == sorted(toes) and np.allclose(friction[:, toes], 0.66)
    finally:
        task.close()
