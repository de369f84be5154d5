"""The settle check (``simbackend.robots.settle``, ``simbackend robots ROBOT --settle``): a robot holding its
default pose under its own actuation, its settled height, the feet's shares of its weight, the other bodies
resting, and the warnings that name them."""

from __future__ import annotations

import json
import math

import pytest

from simbackend.robots import EngineSettle, RobotDescription, get_robot, settle, settle_warnings
from simbackend.robots.settle import SINK_LIMIT, compare_engines


def _go1(name: str, **changes: object) -> RobotDescription:
    return RobotDescription(**{**get_robot("go1").to_dict(), "name": name, **changes})


def test_go1_stands_on_mujoco_on_its_feet() -> None:
    """Go1 at its home pose: no body but the feet touches anything, the four feet carry m g between them,
    the base stays above the sink limit and upright; no warning."""
    report = settle("go1", ["mujoco"])
    (r,) = report.results
    assert r.engine == "mujoco" and r.contact_forces
    assert r.touching == {}
    assert set(r.feet) == set(get_robot("go1").feet)
    assert r.feet_share == pytest.approx(1.0, abs=0.05)
    assert all(share > 0.05 for share in r.feet.values())  # each foot carries some of it
    assert 1 - SINK_LIMIT < r.height_fraction < 1.0
    assert r.height == pytest.approx(r.height_fraction * r.default_height)
    assert r.mass == pytest.approx(12.74, abs=0.1) and r.gravity == pytest.approx(9.81, abs=1e-3)
    assert r.stands and report.stands and report.warnings == ()
    data = json.loads(json.dumps(report.to_dict()))  # JSON-ready
    assert data["stands"] is True and data["engines"]["mujoco"]["feet_share"] == pytest.approx(r.feet_share)


def test_a_robot_resting_on_its_trunk_and_thighs_is_named() -> None:
    """Servos too soft to hold the pose (kp 0.2): Go1 lies down; the warning names the trunk and the thighs with
    their contact force and says what to change. (At kp 1 its feet, held by the elliptic friction cone, keep
    the trunk off the floor: it rests on its thighs alone.)"""
    soft = _go1("go1_soft", kp=0.2, kd=0.02)
    warnings = settle_warnings(soft, "mujoco")
    rests = [w for w in warnings if "rests on bodies other than its feet" in w]
    assert len(rests) == 1, warnings
    assert rests[0].startswith("go1_soft on mujoco: ")
    for body in ("trunk", "FR_thigh", "FL_thigh", "RR_thigh", "RL_thigh"):
        assert f"{body} (" in rests[0], rests[0]
    assert "robot.default_pose" in rests[0] and "robot.kp" in rests[0] and "effort_limit" in rests[0]
    report = settle(soft, ["mujoco"])
    assert not report.stands and report.results[0].touching["trunk"] > 10.0  # N: it carries much of the weight


def test_a_robot_that_sinks_gets_the_sink_warning() -> None:
    """kp 6: Go1 stays on its feet but sags to under half its height: one warning, the sink, with figures."""
    (line,) = settle_warnings(_go1("go1_sags", kp=6.0, kd=0.5), "mujoco")
    assert line.startswith("go1_sags on mujoco: sinks to ") and "of its default height 0.296 m" in line
    assert "raise kp / kd" in line


def test_the_cli_reports_height_and_shares() -> None:
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    runner = CliRunner()
    out = runner.invoke(app, ["robots", "go1", "--settle", "--sim", "mujoco", "--seconds", "1"])
    assert out.exit_code == 0, out.output
    assert "holding its default pose 1 s (default base height 0.296 m)" in out.output
    assert "base height: 0.2" in out.output and "% of m g" in out.output and "tilt: " in out.output
    assert "RR_foot_collision" in out.output and "stands: yes" in out.output
    as_json = runner.invoke(app, ["robots", "go1", "--settle", "--sim", "mujoco", "--seconds", "1", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["engines"]["mujoco"]["seconds"] == pytest.approx(1.0)
    assert runner.invoke(app, ["robots", "go1", "--seconds", "1"]).exit_code == 2  # only with --settle


def test_the_cli_exits_1_only_with_strict(tmp_path) -> None:
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    path = tmp_path / "soft.json"
    path.write_text(json.dumps(_go1("go1_soft", kp=0.2, kd=0.02).to_dict()))
    runner = CliRunner()
    args = ["robots", str(path), "--settle", "--sim", "mujoco"]
    loose = runner.invoke(app, args)
    assert loose.exit_code == 0, loose.output
    assert "warning: go1_soft on mujoco: rests on bodies other than its feet: trunk (" in loose.output
    assert "stands: no" in loose.output
    assert runner.invoke(app, [*args, "--strict"]).exit_code == 1


def _result(engine: str, height: float, touching: dict[str, float] | None = None) -> EngineSettle:
    return EngineSettle(engine, 2.0, 0.3, height, 0.0, 12.0, 9.81, {"foot": 1.0}, touching or {})


def test_engines_that_settle_differently_are_reported_in_one_line() -> None:
    same = [_result("a", 0.27), _result("b", 0.27 + 0.3 * 0.04)]  # 4 % of the default height apart
    assert compare_engines(same) == []
    assert compare_engines(same[:1]) == []
    (line,) = compare_engines([_result("a", 0.27), _result("b", 0.24)])  # 10 % apart
    assert line.startswith("engines disagree on the settled pose: base height a 0.270 m (90%), b 0.240 m (80%)")
    (line,) = compare_engines([_result("a", 0.27), _result("b", 0.27, {"FR_thigh": 4.0})])
    assert "non-foot bodies resting a: none; b: FR_thigh" in line and "base height" not in line
    assert line.endswith("(`simbackend compare` shows where they part: docs/sim-to-sim.md)")


def test_sapien_agrees_that_go1_stands() -> None:
    """The check on a second engine: Go1 stands on SAPIEN too, its feet carrying m g."""
    pytest.importorskip("sapien")
    report = settle("go1", ["sapien"], seconds=1.0)
    (r,) = report.results
    assert r.stands and r.touching == {} and r.feet_share == pytest.approx(1.0, abs=0.05)
    assert not math.isnan(r.tilt)


@pytest.mark.parametrize("robot", ["quadruped", "go1"])
def test_joint_controller_drives_the_description_at_its_actuation(robot: str) -> None:
    """``joint_controller``: a PD controller with the description's gains for ``actuation='pd'`` (the
    quadruped), the scene's position servos with their own gains for ``'servo'`` (Go1); an action 0 targets
    the default pose; ``kp``/``kd`` are the policy joints' float32 gains."""
    import torch

    from simbackend.robots import joint_controller, make_robot_backend, resolve
    from simbackend.robots.actuation import target_bounds

    desc = get_robot(robot)
    with make_robot_backend(desc, "mujoco", 2) as b:
        r = resolve(desc, b)
        low, high = target_bounds(r, 0.5)
        controller, kp, kd = joint_controller(desc, b, r, low, high)
        k = len(desc.joints)
        assert kp.shape == kd.shape == (k,) and kp.dtype == kd.dtype == torch.float32
        if desc.actuation == "pd":
            assert controller.physics_rate  # the PD law runs every substep
            assert kp.tolist() == [40.0] * k and kd.tolist() == [1.0] * k
        else:
            acts = [b.actuator_names.index(n) for n in ("FR_hip_joint", "FR_thigh_joint", "FR_calf_joint")]
            gains = b.get_model_actuator_gains()
            assert kp[:3].tolist() == gains.kp[acts].tolist() and kd[:3].tolist() == gains.kv[acts].tolist()
        controller.apply(torch.zeros((2, len(desc.driven_joints))), 1)
        assert torch.allclose(controller.targets[:, :k], r.default_joints.expand(2, -1), atol=1e-5)
