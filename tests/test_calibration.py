"""simbackend.calibration: parameters, references, the multiple-shooting replay and the CMA-ES fit.

The fits run on the built-in double pendulum (two motors, no contact: a few seconds) and check what
would break if the calibration were wrong: a fit that ignored the loss would not find the known
values; a replay that did not start every window at the recorded state would not score the true
values at zero on a reference with a jump in it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from simbackend.calibration import ParameterSet, Replayer, calibrate, excite, load_reference, write_log
from simbackend.errors import InvalidArgumentError, SimBackendError
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.registry import make_backend

TRUTH = {"damping": 0.3, "mass": 1.4}
PARAMS = [
    {"kind": "joint_damping", "operation": "set", "low": 0.02, "high": 2.0, "log": True, "name": "damping"},
    {"kind": "body_mass", "targets": ["lower_link"], "low": 0.5, "high": 2.0, "name": "mass"},
]


def _truth_plan() -> RandomizationPlan:
    return RandomizationPlan(
        (
            Term("joint_damping", Distribution.fixed(TRUTH["damping"]), operation="set"),
            Term("body_mass", Distribution.fixed(TRUTH["mass"]), targets=("lower_link",)),
        )
    )


def _record(path: Path, *, envs: int = 2, rows: int = 120, seed: int = 0) -> Path:
    """Random motor torques on the double pendulum with the true parameters, recorded (10 substeps a row)."""
    from simbackend.playback.recording import Recorder

    sim = make_backend("mujoco", "double_pendulum", envs, seed=seed)
    with sim:
        sim.apply_init_randomization(_truth_plan())
        g = torch.Generator().manual_seed(seed)
        with Recorder(sim, path):
            for _ in range(rows):
                sim.step(torch.rand((envs, 2), generator=g) * 8 - 4, 10)
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("calibration")
    return _record(d / "fit.h5"), _record(d / "held_out.h5", envs=1, seed=7)


def _make(n: int) -> object:
    return make_backend("mujoco", "double_pendulum", n)


def _reference(path: Path) -> object:
    sim = make_backend("mujoco", "double_pendulum", 1)
    with sim:
        return load_reference(path, sim.info, sim.physics_dt)


def test_the_fit_recovers_known_parameters_and_halves_the_held_out_error(recordings: tuple[Path, Path]) -> None:
    params = ParameterSet.from_dict(PARAMS)
    result = calibrate(
        _make, _reference(recordings[0]), params, validation=_reference(recordings[1]),
        window=20, popsize=8, generations=12, max_envs=64,
    )  # fmt: skip
    got = dict(zip(params.names, result.values))
    for name, want in TRUTH.items():
        assert abs(got[name] - want) <= 0.05 * want, (name, got[name], want)
    assert result.after["loss"] < 1e-3 * result.before["loss"]
    assert result.validation_after["loss"] < 0.5 * result.validation_before["loss"]
    assert result.history[-1]["best"] <= result.history[0]["best"]
    plan = result.plan()
    assert [t.kind for t in plan.terms] == ["joint_damping", "body_mass"]
    assert plan.terms[0].distribution.value == (pytest.approx(got["damping"]),)


def test_every_window_starts_at_the_recorded_state(recordings: tuple[Path, Path]) -> None:
    """The true values replay the recording exactly (the same engine is deterministic), and with the wrong
    values short windows part far less than one window over the whole segment: a replay that did not
    start each window at the recorded state would part as much as the open-loop one."""
    ref = _reference(recordings[0])
    params = ParameterSet.from_dict(PARAMS)
    truth = np.array([[TRUTH["damping"], TRUTH["mass"]], params.identity()])
    rms = {}
    for window in (10, ref.segments[0].rows - 1):
        sim = _make(2 * len(ref.segments) * (ref.segments[0].rows // window))
        with sim:
            rep = Replayer(sim, ref, params, popsize=2, window=window)
            assert [w.start for w in rep.windows if w.segment == 0] == list(
                range(0, ref.segments[0].rows - window, window)
            )
            s = rep.score(truth)
        assert s.loss[0] < 1e-8 and s.rms["joint_pos"][0] < 1e-5, s.rms
        rms[window] = s.rms["joint_pos"][1]
    short, whole = rms.values()
    assert short < 0.2 * whole, rms


def test_a_fit_is_deterministic(recordings: tuple[Path, Path]) -> None:
    params = ParameterSet.from_dict(PARAMS[:1])
    sim = make_backend("mujoco", "double_pendulum", 1)
    with sim:
        ref = load_reference(recordings[0], sim.info, sim.physics_dt)
    kw = {"window": 20, "popsize": 4, "generations": 3, "max_envs": 16, "seed": 3}
    first = calibrate(_make, ref, params, **kw)
    second = calibrate(_make, ref, params, **kw)
    assert first.values.tolist() == second.values.tolist()
    assert [h["best"] for h in first.history] == [h["best"] for h in second.history]


def test_a_log_of_targets_replays_through_the_robot_controller_exactly(tmp_path: Path) -> None:
    """``excite`` writes a log on MuJoCo; replayed through the quadruped's PD controller from every window's
    logged state it scores zero with the model unchanged (the log format and the target path agree)."""
    log = tmp_path / "quadruped.npz"
    summary = excite("quadruped", "mujoco", log, seconds=0.6, episode_s=0.6, num_envs=2, seed=1)
    assert summary["rows"] == 60
    from simbackend.robots import make_robot_backend

    sim = make_robot_backend("quadruped", "mujoco", 2)
    with sim:
        ref = load_reference(log, sim.info, sim.physics_dt)
        assert ref.command == "targets" and ref.robot == "quadruped" and len(ref.segments) == 2
        params = ParameterSet.from_dict([{"kind": "joint_damping", "low": 0.5, "high": 2.0}])
        rep = Replayer(sim, ref, params, popsize=2, window=10)
        s = rep.score(np.array([[1.0], [1.8]]))
    assert s.loss[0] < 1e-6, s.loss
    assert s.loss[1] > 100 * max(s.loss[0], 1e-9)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "joint_damping", "low": 2.0, "high": 1.0}, "parameters[0]: low must be < high"),
        ({"kind": "joint_damping", "low": 0.5}, "parameters[0].high: required"),
        ({"kind": "body_force", "low": 0.0, "high": 1.0}, "parameters[0].kind: 'body_force' changes the state"),
        ({"kind": "joint_damping", "low": -1.0, "high": 1.0, "log": True}, "parameters[0].log: a log-scale"),
        ({"kind": "joint_dampin", "low": 0.5, "high": 1.0}, "parameters[0]: term.kind: unknown kind"),
        ({"kind": "joint_damping", "low": 0.5, "high": 1.0, "spread": 1}, "parameters[0]: unknown keys ['spread']"),
    ],
)
def test_bad_parameters_are_refused_in_one_line_naming_the_field(spec: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        ParameterSet.from_dict([spec])
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_bad_logs_are_refused_naming_the_array(tmp_path: Path) -> None:
    from simbackend.robots import make_robot_backend

    sim = make_robot_backend("quadruped", "mujoco", 1)
    joints = [n for n in sim.joint_names if n != sim.joint_names[0]]
    T = 5
    common = {
        "joint_names": joints,
        "joint_pos": np.zeros((T, len(joints))),
        "joint_vel": np.zeros((T, len(joints))),
        "target_names": joints,
        "target_pos": np.zeros((T, len(joints))),
    }
    with sim:
        no_base = write_log(tmp_path / "a.npz", control_dt=0.02, **common)
        with pytest.raises(InvalidArgumentError, match="no base_pos; the model's free joint"):
            load_reference(no_base, sim.info, sim.physics_dt)
        base = {"base_pos": np.zeros((T, 3)), "base_quat": np.tile([1.0, 0, 0, 0], (T, 1)),
                "base_lin_vel": np.zeros((T, 3)), "base_ang_vel": np.zeros((T, 3))}  # fmt: skip
        odd = write_log(tmp_path / "b.npz", control_dt=0.0123, base=base, **common)
        with pytest.raises(InvalidArgumentError, match="control_dt 0.0123 s is not a whole number"):
            load_reference(odd, sim.info, sim.physics_dt)
        bad = dict(common, joint_vel=np.zeros((T + 1, len(joints))))
        short = write_log(tmp_path / "c.npz", control_dt=0.02, base=base, **bad)
        with pytest.raises(InvalidArgumentError, match=r"joint_vel has shape \(6, 12\), expected \(5, 12\)"):
            load_reference(short, sim.info, sim.physics_dt)
        with pytest.raises(InvalidArgumentError, match="reference: no such file"):
            load_reference(tmp_path / "missing.npz", sim.info, sim.physics_dt)


def test_a_parameter_the_engine_cannot_set_per_env_is_refused_by_name(recordings: tuple[Path, Path]) -> None:
    params = ParameterSet.from_dict([{"kind": "geom_compliance", "targets": ["floor"], "low": 0.5, "high": 2}])
    sim = make_backend("sapien", "double_pendulum", 2)
    with sim, pytest.raises(SimBackendError, match="geom_compliance"):
        Replayer(sim, _reference(recordings[0]), params, popsize=2, window=10)


def test_the_cli_writes_the_plan_the_report_and_a_training_plan(recordings: tuple[Path, Path], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    params = tmp_path / "params.json"
    params.write_text(json.dumps({"parameters": PARAMS}))
    out, train, report = tmp_path / "plan.json", tmp_path / "train.json", tmp_path / "report"
    args = ["calibrate", "--reference", str(recordings[0]), "--validate", str(recordings[1]), "--params",
            str(params), "--out", str(out), "--training-plan", str(train), "--report", str(report),
            "-g", "2", "--popsize", "4", "--window", "20", "--max-envs", "16"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    plan = RandomizationPlan.load(out)
    assert [t.name for t in plan.terms] == ["damping", "mass"]
    assert all(t.distribution.kind == "fixed" and t.phase == "init" for t in plan.terms)
    centred = RandomizationPlan.load(train)
    assert all(t.distribution.kind == "uniform" for t in centred.terms)
    data = json.loads((report / "report.json").read_text())
    assert data["validation"]["after"]["loss"] <= data["validation"]["before"]["loss"]
    assert (report / "loss.png").stat().st_size > 1000 and (report / "trajectory.png").stat().st_size > 1000
    bad = CliRunner().invoke(
        app, [*args[:5], "--params", str(tmp_path / "nope.json"), "--out", str(tmp_path / "x.json")]
    )
    assert bad.exit_code == 2 and "--params: parameters: no such file" in bad.output


def test_a_policy_log_holds_the_targets_its_controller_sent(tmp_path: Path) -> None:
    """``excite_policy`` plays a checkpoint (a 2-iteration quadruped) on PhysX: replayed on PhysX from every
    window's logged state, its targets reproduce the log (the log format and the task's targets agree), and
    the same log fitted by MuJoCo is scored above zero (the engines part)."""
    from simbackend.calibration import excite_policy
    from simbackend.robots import make_robot_backend
    from simbackend.training import train

    small = {"num_envs": 8, "num_steps_per_env": 8, "max_iterations": 2, "eval_interval": 0, "eval_episodes": 2,
             "save_interval": 2, "stop_at_success": None}  # fmt: skip
    run = train("quadruped", "mujoco", seed=1, train_config=small, out_dir=tmp_path / "run", progress=False,
                settle_check=False)  # fmt: skip
    log = tmp_path / "policy.npz"
    summary = excite_policy(run.checkpoint, "sapien", log, seconds=0.6, num_envs=2, seed=4)
    assert summary["signal"] == "policy" and summary["rows"] == 60
    params = ParameterSet.from_dict([{"kind": "joint_damping", "low": 0.5, "high": 2.0}])
    losses = {}
    for sim_name in ("sapien", "mujoco"):
        sim = make_robot_backend("quadruped", sim_name, 2)
        with sim:
            ref = load_reference(log, sim.info, sim.physics_dt)
            assert ref.command == "targets" and ref.robot == "quadruped"
            losses[sim_name] = Replayer(sim, ref, params, popsize=2, window=5).score(np.array([[1.0], [1.0]])).loss[0]
    assert losses["sapien"] < 1e-6, losses
    assert losses["mujoco"] > 100 * max(losses["sapien"], 1e-9), losses


def test_a_set_parameter_starts_from_the_model_and_its_before_is_the_model(recordings: tuple[Path, Path]) -> None:
    """A ``set`` parameter has no value that means "as modelled" (the model's values are per target): its
    identity is NaN, which applies the term that restores the model's values, so "before" scores the model
    as given, even after another candidate changed the envs."""
    params = ParameterSet.from_dict(PARAMS)  # damping is a `set` parameter
    assert np.isnan(params.identity()[0]) and params.identity()[1] == 1.0
    mass_only = ParameterSet.from_dict(PARAMS[1:])
    ref = _reference(recordings[0])
    sim = _make(8)
    with sim:
        both = Replayer(sim, ref, params, popsize=2, window=20)
        both.score(np.array([[1.5, 1.7], [0.05, 0.6]]))  # other values first: the envs must be restored
        first = both.score(np.stack([params.identity(), params.identity()])).loss[0]
        model = Replayer(sim, ref, mass_only, popsize=2, window=20).score(np.array([[1.0], [1.0]])).loss[0]
    assert first == pytest.approx(model, rel=1e-12)
    plan = params.plan(params.identity())
    assert plan.terms[0].operation == "scale" and plan.terms[0].distribution.value == (1.0,)
