"""Sweeps as Ray tasks: ``simbackend parity`` over models and ``simbackend eval`` over checkpoints x seeds with
``--ray`` give what the same jobs give in this process, with one table (or JSON list) at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simbackend.cli.main import app

pytest.importorskip("ray")

runner = CliRunner()


def _invoke(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "250", "SIMBACKEND_SIM": None})


def _json(output: str) -> Any:
    return json.loads(output[min(i for i in (output.find("{"), output.find("[")) if i >= 0) :])


def _errors(rows: list) -> list:
    return [(r["tier"], r["quantity"], r["max_error"], r["status"]) for r in rows]


BALL_JOINT_XML = """<mujoco><worldbody><body name="b" pos="0 0 1"><joint type="ball"/>
<geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05"/></body></worldbody></mujoco>"""


def test_parity_over_models_as_ray_tasks_equals_each_model_run_here(tmp_path: Path) -> None:
    """Each model's report from a Ray task is the in-process report; a model the backend cannot build fails
    the sweep (exit 1) without stopping the others. An unknown model is a bad argument: exit 2, nothing runs."""
    ball = tmp_path / "ball.xml"  # MuJoCo compiles it; SAPIEN has no ball joint
    ball.write_text(BALL_JOINT_XML)
    tiers = ("-t", "kinematics", "-t", "dynamics")  # two tiers keep it short; which ones does not matter here
    unknown = _invoke("parity", "--sim", "sapien", "-m", "pendulum", "-m", "no_such_model", *tiers, "--ray")
    assert unknown.exit_code == 2 and unknown.output.startswith("error: --model: 'no_such_model'"), unknown.output
    swept = _invoke("parity", "--sim", "sapien", "-m", "pendulum", "-m", ball, "-m", "box_drop",
                    "-n", 4, *tiers, "--ray", "--json")  # fmt: skip
    assert swept.exit_code == 1, swept.output
    reports = _json(swept.output)
    assert [r["model"] for r in reports] == ["pendulum", str(ball), "box_drop"]
    load = reports[1]["rows"][0]
    assert (load["tier"], load["status"]) == ("load", "FAIL") and "ball joints" in load["detail"], load
    for report in (reports[0], reports[2]):
        here = _invoke("parity", "--sim", "sapien", "-m", report["model"], "-n", 4, *tiers, "--json")
        assert here.exit_code == 0, here.output
        assert _errors(report["rows"]) == _errors(_json(here.output)["rows"])


def test_parity_over_models_prints_one_summary_table() -> None:
    """One table; piped at 80 columns (CliRunner is no terminal), plain lines that fit, nothing cut short."""
    args = ["parity", "--sim", "mujoco", "-m", "pendulum", "-m", "double_pendulum", "-n", "2", "-t", "kinematics"]
    result = runner.invoke(app, [*args, "--ray"], env={"COLUMNS": "80", "SIMBACKEND_SIM": None})
    assert result.exit_code == 0, result.output
    assert "2 models" in result.output
    lines = [line for line in result.output.splitlines() if "pendulum" in line and "pass" in line]
    assert len(lines) == 2, result.output
    assert all(len(line) <= 80 for line in result.output.splitlines()), result.output
    assert "…" not in result.output and "│" not in result.output, result.output
    assert "worst error / tolerance: 0 (kinematics/body_pos)" in result.output, result.output


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "run"
    result = _invoke("train", "--task", "cartpole", "--sim", "mujoco", "--out", out, "--num-envs", 8,
                     "--iterations", 2, "--eval-interval", 0, "--stop-at-success", "off", "--no-progress")  # fmt: skip
    assert result.exit_code == 0, result.output
    return out / "checkpoint_final.pt"


def _per_seed(result: dict) -> list:
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in result["per_seed"]]


def test_eval_over_seeds_as_ray_tasks_equals_one_evaluation_here(checkpoint: Path) -> None:
    """Every (checkpoint, seed) a task; the seeds joined give the per-seed figures and the interval of one
    in-process evaluation over the same seeds."""
    swept = _invoke("eval", "-c", checkpoint, "--sim", "sapien", "--seeds", "3-5", "--episodes", 2, "--ray", "--json")
    assert swept.exit_code == 0, swept.output
    [joined] = _json(swept.output)
    here = _invoke("eval", "-c", checkpoint, "--sim", "sapien", "--seeds", "3-5", "--episodes", 2, "--json")
    assert here.exit_code == 0, here.output
    one = _json(here.output)
    assert joined["seeds"] == one["seeds"] == [3, 4, 5]
    assert _per_seed(joined) == _per_seed(one)
    for key in ("mean_return", "success_rate", "mean_length"):
        assert joined[key] == one[key], key


def test_eval_over_checkpoints_prints_one_table(checkpoint: Path) -> None:
    result = _invoke("eval", "-c", checkpoint, "-c", checkpoint, "--seeds", "0,1", "--episodes", 1)
    assert result.exit_code == 0, result.output
    assert "2 checkpoints x 2 seeds" in result.output
    # not a terminal: one block of plain lines per checkpoint (docs/cli.md), the same fields in each
    out = result.output
    assert out.count(str(checkpoint)) == 2 and out.count("success rate: ") == 2, out
    for field in ("task: cartpole", "trained on: mujoco", "evaluated on: mujoco"):
        assert out.count(field) == 2, (field, out)
    assert "…" not in result.output, "a cell was cut short (paths fold instead)"


def test_ray_address_needs_shards_or_ray_and_video_needs_one_local_evaluation(checkpoint: Path) -> None:
    run = _invoke("run", "--sim", "mujoco", "-m", "pendulum", "--steps", 1, "--ray-address", "auto")
    assert run.exit_code == 2 and "--ray-address: needs --shards K" in run.output
    video = _invoke("eval", "-c", checkpoint, "--ray", "--video", "x.mp4")
    assert video.exit_code == 2 and "--video" in video.output


def test_merging_refuses_evaluations_that_do_not_belong_together(checkpoint: Path) -> None:
    from simbackend.errors import InvalidArgumentError
    from simbackend.training import evaluate, merge_seeds

    a = evaluate(checkpoint, "mujoco", seeds=[1], episodes_per_seed=1)
    b = evaluate(checkpoint, "sapien", seeds=[2], episodes_per_seed=1)
    with pytest.raises(InvalidArgumentError, match="one checkpoint on one engine"):
        merge_seeds([a, b])
    with pytest.raises(InvalidArgumentError, match="evaluated twice"):
        merge_seeds([a, a])
    with pytest.raises(InvalidArgumentError, match="at least one"):
        merge_seeds([])
