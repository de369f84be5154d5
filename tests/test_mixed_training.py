"""Training and evaluating on a mixed backend (issue 52, part 2): ``train --sim mujoco,motrix``.

What only a mix has: the log's success per engine, each figure over the episodes of that engine's envs
(the grouping is checked with outcomes that differ by env, so that grouping by the wrong envs fails); the
checkpoint's record of the mix; an evaluation's success per engine and the engines held out of training;
``--sim`` taking a mix on the command line. That each env's actions reach its own engine and that a reset
of one engine's envs leaves the other's alone is tests/test_mixed_backend.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from simbackend.cli.main import app
from simbackend.registry import available_backends
from simbackend.training import evaluate, load_checkpoint, train
from simbackend.training import evaluation as evaluation_module
from simbackend.training.trainer import _finished, by_engine

pytestmark = pytest.mark.skipif("motrix" not in available_backends(), reason="the Motrix plugin is not installed")

MIX = "mujoco,motrix"


def _invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200", "SIMBACKEND_SIM": None})


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mixed") / "run"
    result = _invoke("train", "--task", "cartpole", "--sim", "mujoco:6,motrix:2", "--out", out, "--num-envs", 8,
                     "--iterations", 2, "--eval-interval", 1, "--stop-at-success", "off", "--no-progress")  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def test_by_engine_groups_each_episode_by_its_envs_engine() -> None:
    engines = ("mujoco", "mujoco", "mujoco", "motrix", "motrix")
    # envs 0-2 succeed, 3-4 fail; episodes out of env order, env 1 twice
    success, envs = [1, 0, 1, 1, 0, 0], [0, 3, 1, 2, 4, 3]
    assert by_engine(success, envs, engines) == {"mujoco": 1.0, "motrix": 0.0}
    assert by_engine([1, 0], [0, 1], engines) == {"mujoco": 0.5}  # an engine no episode ended on: left out
    with pytest.raises(ValueError):
        by_engine([1], [0, 1], engines)  # one outcome per env: a shorter list is a bug, not a shorter answer


def test_finished_records_each_episode_env_in_stacked_rollouts() -> None:
    """The deferred path stacks T steps of (N,) finals: each ended episode keeps its env's column."""
    done = torch.tensor([[False, True, False, True], [True, False, False, True]])
    final = {
        "done": done,
        "episode_return": torch.arange(8.0).reshape(2, 4),
        "episode_length": torch.ones(2, 4),
        "success": torch.tensor([[0, 1, 0, 0], [1, 0, 0, 1]], dtype=torch.bool),
    }
    ended: list = []
    assert _finished(ended, final) == 4
    assert [(r, s, env) for r, _, s, env in ended] == [(1.0, 1.0, 1), (3.0, 0.0, 3), (4.0, 1.0, 0), (7.0, 1.0, 3)]


def test_the_log_gives_success_per_engine_and_the_checkpoint_records_the_mix(mixed_run: Path) -> None:
    rows = json.loads((mixed_run / "log.json").read_text())["rows"]
    for row in rows:
        assert set(row["eval_success_by_engine"]) == {"mujoco", "motrix"}
        if row["episodes"]:
            assert set(row["success_by_engine"]) <= {"mujoco", "motrix"}
    csv = (mixed_run / "log.csv").read_text().splitlines()
    assert "success_by_engine" in csv[0].split(",") and re.search(r",mujoco=[0-9.e-]+ motrix=[0-9.e-]+,", csv[1])
    ckpt = load_checkpoint(mixed_run / "checkpoint_final.pt")
    assert ckpt.sim == "mujoco:6,motrix:2" and ckpt.engines == {"mujoco": 6, "motrix": 2}


def test_a_checkpoint_without_its_engines_record_reads_them_from_its_spec(mixed_run: Path) -> None:
    ckpt = load_checkpoint(mixed_run / "checkpoint_final.pt")
    del ckpt.data["engines"]
    assert ckpt.engines == {"mujoco": 6, "motrix": 2}
    ckpt.data["sim"] = "mujoco,motrix"
    assert ckpt.engines == {"mujoco": 4, "motrix": 4}


def test_a_plain_run_logs_no_engine_column(tmp_path: Path) -> None:
    r = train("cartpole", "mujoco", num_envs=4, out_dir=tmp_path, progress=False, settle_check=False,
              train_config={"max_iterations": 1, "eval_interval": 0, "stop_at_success": None})  # fmt: skip
    assert r.rows[0]["success_by_engine"] is None and r.rows[0]["eval_success_by_engine"] is None
    assert load_checkpoint(r.checkpoint).engines == {"mujoco": 4}


def test_evaluation_counts_each_engines_episodes_and_names_the_held_out(
    mixed_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 envs (mujoco 0-1, sapien 2-3) play 8 episodes, two rounds: episode k is env k % 4's. Outcomes set by
    env (0 and 2 succeed, 1 and 3 fail, each a different fraction of its engine's), so that counting by
    k // 2 or by round, or on the wrong engine, gives other figures."""
    real = evaluation_module.run_episodes

    def fixed(task: Any, policy: Any, episodes: int, on_step: Any = None) -> dict:
        r = real(task, policy, episodes, on_step)
        r["success"] = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0])[:episodes]
        return r

    monkeypatch.setattr(evaluation_module, "run_episodes", fixed)
    result = evaluate(mixed_run / "checkpoint_final.pt", "mujoco,sapien", num_envs=4, seeds=[0], episodes_per_seed=8)
    # env 0: 1, 1; env 1: 0, 1 -> mujoco 3/4; env 2: 1, 0; env 3: 0, 0 -> sapien 1/4
    assert result.per_seed[0]["success_by_engine"] == {"mujoco": [3, 4], "sapien": [1, 4]}
    assert result.success_by_engine["mujoco"].mean == 0.75 and result.success_by_engine["sapien"].mean == 0.25
    assert result.held_out == ("sapien",)
    d = result.to_dict()
    assert d["held_out"] == ["sapien"] and d["success_by_engine"]["sapien"]["n"] == 4


def test_eval_of_a_mixed_checkpoint_defaults_to_its_engines(mixed_run: Path) -> None:
    """No --sim: the training engines in equal shares of the evaluation's envs (its counts were for 8 envs)."""
    result = _invoke("eval", "--checkpoint", mixed_run / "checkpoint_final.pt", "--seeds", 0, "--episodes", 4)
    assert result.exit_code == 0, result.output
    assert "evaluated on mujoco,motrix" in result.output and "success by engine: mujoco" in result.output
    assert "held out" not in result.output
    other = _invoke(
        "eval", "--checkpoint", mixed_run / "checkpoint_final.pt", "--sim", "sapien", "--seeds", 0, "--episodes", 2
    )
    assert other.exit_code == 0, other.output
    assert "held out (not trained on): sapien" in other.output


@pytest.mark.parametrize(
    ("sim", "words"),
    [
        ("mujoco,motrx", "unknown engine 'motrx'; did you mean 'motrix'?"),
        ("mujoco,mujoco", "named twice"),
        ("mujoco:3,motrix", "give every engine a count"),
        ("mujoco:4,motrix:4", "the counts sum to 8, but --num-envs is 6"),
    ],
)
def test_a_bad_mix_on_the_command_line_exits_2_naming_sim(sim: str, words: str, tmp_path: Path) -> None:
    result = _invoke(
        "train", "--task", "cartpole", "--sim", sim, "--num-envs", 6, "--out", tmp_path / "run", "--no-progress"
    )
    assert result.exit_code == 2 and "--sim" in result.output and words in " ".join(result.output.split())
    assert not (tmp_path / "run").exists()


def test_shards_with_a_mix_exit_2_naming_shards(tmp_path: Path) -> None:
    result = _invoke("train", "--task", "cartpole", "--sim", MIX, "--shards", 2, "--out", tmp_path / "run")
    assert result.exit_code == 2 and "--shards: a mixed backend" in " ".join(result.output.split())
    assert not (tmp_path / "run").exists()


def test_held_out_engines() -> None:
    from simbackend.training.evaluation import held_out

    assert held_out("sapien", {"mujoco": 6, "motrix": 2}) == ("sapien",)
    assert held_out("mujoco,sapien,motrix", "mujoco:6,motrix:2") == ("sapien",)
    assert held_out("mujoco", "mujoco") == ()
    assert held_out("sapien", "mujoco,retired_engine") == ("sapien",)  # a record may name an engine gone since
    assert held_out("sapien", "unknown") == ()  # another framework's policy: its training engine is not known
