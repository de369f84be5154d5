"""Issue 50, items 0, 8, 9 and 13 (resume): what ``simbackend eval`` evaluates under (the nominal engine by
default, ``--plan training|FILE``, ``--skip-unsupported``), the training figures of a run's first episodes,
every terrain tile in a default evaluation, and ``train --resume`` refusing another robot or an actor-only
checkpoint in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simbackend.cli.main import app
from simbackend.errors import InvalidArgumentError
from simbackend.training import evaluate, train

ROOT = Path(__file__).resolve().parents[1]
#: Go1 trained on MuJoCo (tests/test_deploy.py says how): the actor only, no critic or optimizer
GO1 = ROOT / "tests" / "data" / "go1_velocity.pt"

#: a plan with a term PhysX applies (gravity, strong enough to change every episode) and one it does not
PLAN = {
    "version": 1,
    "seed": 11,
    "terms": [
        {"name": "light_gravity", "kind": "gravity", "phase": "init", "operation": "scale",
         "distribution": {"kind": "fixed", "value": [0.1]}},
        {"name": "soft_contacts", "kind": "geom_compliance", "phase": "reset", "operation": "scale",
         "distribution": {"kind": "uniform", "low": [0.9], "high": [1.1]}},
    ],
}  # fmt: skip

runner = CliRunner()


def _invoke(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200", "SIMBACKEND_SIM": None})


def _error_line(result: Any) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Cart-pole trained on MuJoCo for one iteration under :data:`PLAN`."""
    out = tmp_path_factory.mktemp("eval_plan")
    tc = {"num_envs": 8, "max_iterations": 1, "eval_interval": 0, "stop_at_success": None, "eval_episodes": 4}
    return train(
        "cartpole", "mujoco", randomization=PLAN, train_config=tc, out_dir=out / "run", progress=False
    ).checkpoint


def _figures(result: Any) -> list:
    return [(row["mean_return"], row["mean_length"]) for row in result.per_seed]


def test_evaluate_defaults_to_the_nominal_engine(checkpoint: Path) -> None:
    """Item 0: evaluate() without a plan plays the engine without randomization (as benchmarks/sim_to_sim.py
    and the README's tables do); plan="training" plays the checkpoint's plan, which changes the episodes."""
    design = {"seeds": [100], "episodes_per_seed": 4}
    nominal = evaluate(checkpoint, **design)
    assert (nominal.plan, nominal.plan_terms, nominal.skipped_terms) == ("none", (), ())
    bare = evaluate(checkpoint, task_config_override={"randomization": None}, **design)
    trained = evaluate(checkpoint, plan="training", **design)
    assert _figures(nominal) == _figures(bare)
    assert trained.plan == "training" and trained.plan_terms == ("light_gravity", "soft_contacts")
    assert _figures(trained) != _figures(nominal)  # a tenth of gravity: other episodes
    assert nominal.to_dict()["plan"] == {"source": "none", "terms": [], "skipped": []}


def test_a_plan_term_the_engine_lacks_is_named_or_left_out_when_asked(checkpoint: Path, tmp_path: Path) -> None:
    """Item 0: under the training plan, PhysX (no geom_compliance) is refused before any rollout, naming the
    term; skip_unsupported leaves it out and says so; a plan file works the same; a bad plan is named."""
    with pytest.raises(InvalidArgumentError, match=r"^plan: 'sapien' does not apply .*'soft_contacts' "
                       r"\(geom_compliance, reset\).*skip_unsupported=True"):  # fmt: skip
        evaluate(checkpoint, "sapien", seeds=[100], episodes_per_seed=2, plan="training")
    kept = evaluate(checkpoint, "sapien", seeds=[100], episodes_per_seed=2, plan="training", skip_unsupported=True)
    assert (kept.plan_terms, kept.skipped_terms) == (("light_gravity",), ("soft_contacts",))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    assert evaluate(checkpoint, seeds=[100], episodes_per_seed=2, plan=str(path)).plan == str(path)
    with pytest.raises(InvalidArgumentError, match="^plan: expected 'none' or 'training'"):
        evaluate(checkpoint, seeds=[100], episodes_per_seed=2, plan=3)
    with pytest.raises(InvalidArgumentError, match="^plan: give plan or task_config_override's"):
        evaluate(checkpoint, plan="training", task_config_override={"randomization": None})


def test_eval_plan_flags(checkpoint: Path, tmp_path: Path) -> None:
    """Item 0 on the command line: the nominal engine by default, printed; --plan training on PhysX exits 2 in
    one line naming --plan and the term; --skip-unsupported evaluates and prints what it left out."""
    base = ("eval", "--checkpoint", checkpoint, "--sim", "sapien", "--seeds", 100, "--episodes", 2)
    nominal = _invoke(*base)
    assert nominal.exit_code == 0, nominal.output
    assert "randomization in this evaluation: none, the nominal engine" in nominal.output
    refused = _invoke(*base, "--plan", "training")
    assert refused.exit_code == 2
    line = _error_line(refused)
    assert line.startswith("error: --plan: 'sapien' does not apply the training plan's term(s) 'soft_contacts'")
    assert "--skip-unsupported" in line
    skipped = _invoke(*base, "--plan", "training", "--skip-unsupported", "--json")
    assert skipped.exit_code == 0, skipped.output
    plan = json.loads(skipped.output)["plan"]
    assert plan == {"source": "training", "terms": ["light_gravity"], "skipped": ["soft_contacts"]}
    table = _invoke(*base, "--plan", "training", "--skip-unsupported")
    assert "left out on sapien (not applied there): soft_contacts" in table.output
    missing = _invoke(*base, "--plan", tmp_path / "missing.json")
    assert missing.exit_code == 2 and _error_line(missing).startswith("error: --plan: ")
    alone = _invoke(*base, "--skip-unsupported")
    assert alone.exit_code == 2 and _error_line(alone).startswith("error: --skip-unsupported: ")
    bad = tmp_path / "bad.json"
    bad.write_text('{"terms": [{"kind": "gravity"}]}')
    broken = _invoke(*base, "--plan", bad)
    assert broken.exit_code == 2 and _error_line(broken).startswith("error: --plan: ")


#: 3 types x 3 levels: 9 tiles, which 32 episodes (the training evaluations') do not divide
TERRAIN = {"types": ["flat", "rough", "slope_up"], "levels": 3, "tile_size": 2.0, "resolution": 0.1, "seed": 0}


def test_a_default_evaluation_plays_every_tile_equally_often() -> None:
    """Item 9: on a terrain the default episodes are the training evaluations' rounded up to a multiple of the
    tiles (36 for 9 tiles and 32), so every terrain type is played as often; an explicit count is kept."""
    short = {"terrain": TERRAIN, "episode_length": 3}
    result = evaluate(GO1, seeds=[100], task_config_override=short)
    assert result.episodes_per_seed == 36
    assert [count for _, count in result.per_seed[0]["success_by_group"].values()] == [12, 12, 12]
    levels = evaluate(GO1, seeds=[100], task_config_override={**short, "eval_levels": [1]}, num_envs=3)
    assert levels.episodes_per_seed == 33  # 3 tiles of one level
    asked = evaluate(GO1, seeds=[100], task_config_override=short, episodes_per_seed=5)
    assert asked.episodes_per_seed == 5


@pytest.mark.parametrize("deferred", [False, True], ids=["host", "deferred_checks"])
def test_the_training_figures_count_only_episodes_that_started_in_the_run(tmp_path: Path, deferred: bool) -> None:
    """Item 8: with init_at_random_ep_len every env's first episode starts at a random step of its time limit;
    it is not counted, so no training episode of the log is longer than the steps run so far, and none reaches
    cart-pole's time limit (its success) in these few iterations."""
    tc = {"num_envs": 16, "max_iterations": 2, "eval_interval": 0, "stop_at_success": None, "eval_episodes": 2,
          "init_at_random_ep_len": True}  # fmt: skip
    options = {"deferred_checks": True} if deferred else None
    result = train("cartpole", "mujoco", train_config=tc, out_dir=tmp_path, progress=False, backend_options=options)
    steps = 32  # cartpole's num_steps_per_env
    assert all(row["episodes"] > 0 for row in result.rows)
    for row in result.rows:
        assert row["mean_length"] <= row["iteration"] * steps, row
        assert row["success_rate"] == 0.0, row


def test_resume_refuses_another_robot_and_an_actor_only_checkpoint(tmp_path: Path) -> None:
    """Item 13: a Go1 checkpoint resumed on another robot (other joints, or the same joints driven otherwise)
    exits 2 naming the flag and both robots; the checkpoint without its critic exits 2 naming --resume; both
    before anything is built. The Python API refuses the same."""
    out = tmp_path / "run"
    quadruped = _invoke("train", "--resume", GO1, "--robot", "quadruped", "--no-progress", "--out", out)
    assert quadruped.exit_code == 2
    line = _error_line(quadruped)
    assert line.startswith(f"error: --robot: {str(GO1)!r} was trained on robot 'go1' (joints FR_hip_joint, ")
    assert "not 'quadruped' (joints FL_hip, " in line
    dc = _invoke("train", "--resume", GO1, "--set", "robot=go1_dc", "--no-progress", "--out", out)
    assert dc.exit_code == 2
    assert "error: --set: " in _error_line(dc) and "'go1' (servo actuation), not 'go1_dc' (pd actuation)" in dc.output
    actor = _invoke("train", "--resume", GO1, "--no-progress", "--out", out)
    assert actor.exit_code == 2
    assert _error_line(actor).startswith(f"error: --resume: {str(GO1)!r} holds the actor only, no critic_state_dict")
    assert not out.exists()
    with pytest.raises(InvalidArgumentError, match="^resume: .* trained on robot 'go1' .*not 'quadruped'"):
        train(None, resume=GO1, task_config={"robot": "quadruped"}, out_dir=out, progress=False)
    with pytest.raises(InvalidArgumentError, match="^resume: .* holds the actor only"):
        train(None, resume=GO1, out_dir=out, progress=False)
