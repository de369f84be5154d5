"""Training with rsl-rl: the VecEnv adapter, a short PPO run, checkpoints evaluated on both engines, CI math."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from simbackend.envs.rsl import LOG_KEYS, RslRlVecEnv
from simbackend.errors import InvalidArgumentError
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.tasks import make_task
from simbackend.training import (
    COLUMNS,
    TASK_DEFAULTS,
    TrainConfig,
    estimate,
    evaluate,
    load_checkpoint,
    t_critical,
    train,
)
from simbackend.training.stats import t_two_sided_probability


# ----------------------------------------------------------------------
# the adapter
# ----------------------------------------------------------------------
@pytest.fixture
def short_env() -> RslRlVecEnv:
    task = make_task("cartpole", "mujoco", 4, config={"episode_length": 3}, seed=7)
    env = RslRlVecEnv(task, owns_task=True)
    yield env
    env.close()


def test_adapter_shapes_and_groups(short_env: RslRlVecEnv) -> None:
    env, task = short_env, short_env.task
    assert (env.num_envs, env.num_actions, env.max_episode_length) == (4, 1, 3)
    assert env.cfg["task"] == "cartpole" and env.cfg["config"]["episode_length"] == 3
    obs = env.get_observations()
    assert isinstance(obs, TensorDict) and obs.batch_size == torch.Size([4])
    assert set(obs.keys()) == {"policy", "critic"}
    assert obs["policy"].shape == obs["critic"].shape == (4, task.observation_size)
    assert torch.equal(obs["policy"], task.flatten(task.observe()))
    assert task.episode_count.tolist() == [1, 1, 1, 1]  # wrapping started no episode


def test_same_step_autoreset_on_truncation(short_env: RslRlVecEnv) -> None:
    env, task = short_env, short_env.task
    zeros = torch.zeros(4, 1)
    for _ in range(2):
        obs, rew, dones, extras = env.step(zeros)
        assert dones.dtype == torch.long and dones.tolist() == [0, 0, 0, 0]
        assert extras["time_outs"].tolist() == [False] * 4 and "log" not in extras
        assert rew.shape == (4,)
    assert env.episode_length_buf.tolist() == [2, 2, 2, 2]
    obs, rew, dones, extras = env.step(zeros)
    assert dones.tolist() == [1, 1, 1, 1] and extras["time_outs"].tolist() == [True] * 4
    assert set(extras["log"]) == set(LOG_KEYS)
    assert float(extras["log"]["/episode/length"]) == 3.0
    assert float(extras["log"]["/episode/return"]) == 3.0
    assert float(extras["log"]["/episode/success"]) == 1.0
    assert extras["final"]["episode_length"].tolist() == [3, 3, 3, 3]
    # reset inside the same step: the returned observation starts episode 1 of every env
    assert env.episode_length_buf.tolist() == [0, 0, 0, 0] and task.episode_count.tolist() == [2] * 4
    fresh = make_task("cartpole", "mujoco", 4, config={"episode_length": 3}, seed=7)
    try:
        expected = fresh.flatten(fresh.reset())  # episode 1 of a fresh task with the same seed
    finally:
        fresh.close()
    assert torch.allclose(obs["policy"], expected, atol=1e-6)
    assert torch.equal(env.get_observations()["policy"], obs["policy"])


def test_episode_length_buf_writes_reach_the_task(short_env: RslRlVecEnv) -> None:
    env, task = short_env, short_env.task
    env.episode_length_buf = torch.tensor([0, 1, 2, 0])  # what init_at_random_ep_len does
    assert task.episode_step.tolist() == [0, 1, 2, 0]
    _, _, dones, extras = env.step(torch.zeros(4, 1))
    assert dones.tolist() == [0, 0, 1, 0] and extras["time_outs"].tolist() == [False, False, True, False]
    assert float(extras["log"]["/episode/length"]) == 3.0
    assert task.episode_count.tolist() == [1, 1, 2, 1]
    assert env.episode_length_buf.tolist() == [1, 2, 0, 1]
    with pytest.raises(Exception, match="shape"):
        env.episode_length_buf = torch.zeros(3, dtype=torch.long)


def test_termination_is_done_but_not_time_out() -> None:
    task = make_task("cartpole", "mujoco", 3, config={"max_angle": 0.0}, seed=0)  # fails at once
    env = RslRlVecEnv(task, owns_task=True)
    try:
        _, _, dones, extras = env.step(torch.zeros(3, 1))
        assert dones.tolist() == [1, 1, 1] and extras["time_outs"].tolist() == [False] * 3
        assert float(extras["log"]["/episode/success"]) == 0.0
    finally:
        env.close()


def test_rsl_rl_runner_learns_on_the_adapter() -> None:
    from rsl_rl.runners import OnPolicyRunner

    # 20-step episodes that never fail: in 16 steps only a random start (init_at_random_ep_len) ends one
    task = make_task("cartpole", "mujoco", 8, seed=0, config={"episode_length": 20, "max_angle": 1e3, "max_cart": 1e3})
    env = RslRlVecEnv(task, owns_task=True)
    try:
        torch.manual_seed(0)
        cfg = TrainConfig(num_envs=8, num_steps_per_env=8, actor_hidden_dims=(8,), critic_hidden_dims=(8,)).rsl_rl_cfg()
        runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
        runner.learn(num_learning_iterations=2, init_at_random_ep_len=True)  # writes env.episode_length_buf
        assert int(task.episode_count.sum()) > 8
        assert runner.current_learning_iteration == 1
    finally:
        env.close()


# ----------------------------------------------------------------------
# a short training run
# ----------------------------------------------------------------------
SMALL = {
    "num_envs": 16,
    "num_steps_per_env": 16,
    "max_iterations": 4,
    "eval_interval": 2,
    "eval_episodes": 4,
    "save_interval": 2,
    "stop_at_success": None,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> object:
    out = tmp_path_factory.mktemp("run")
    return train("cartpole", "mujoco", seed=3, train_config=SMALL, out_dir=out, progress=False)


def test_training_with_deferred_checks_is_the_same_training(trained: object, tmp_path: Path) -> None:
    """With deferred checks (a GPU's code path) the rollout reads nothing back and the episode statistics are
    read once per iteration, stacked: the same episodes, counts, returns, losses and evaluations as the
    immediate path, row for row."""
    r = train(
        "cartpole", "mujoco", seed=3, train_config=SMALL, out_dir=tmp_path, progress=False,
        backend_options={"deferred_checks": True},
    )  # fmt: skip
    timing = {"wall_s", "fps", "collect_s", "learn_s"}
    strip = [{k: v for k, v in row.items() if k not in timing} for row in trained.rows]
    assert sum(row["episodes"] for row in strip) > 0  # episodes ended: the statistics were read
    assert [{k: v for k, v in row.items() if k not in timing} for row in r.rows] == strip


def test_training_writes_its_files(trained: object) -> None:
    out = trained.out_dir
    for name in (
        "checkpoint_2.pt",
        "checkpoint_4.pt",
        "checkpoint_final.pt",
        "log.csv",
        "log.json",
        "learning_curve.png",
        "config.json",
    ):
        assert (out / name).is_file(), name
    assert trained.iterations == 4 and trained.stop_reason == "max_iterations"
    assert trained.env_steps == 4 * 16 * 16 and trained.checkpoint == out / "checkpoint_final.pt"
    with open(out / "log.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS and len(rows) == 4
    steps = [int(r["env_steps"]) for r in rows]
    assert steps == [256, 512, 768, 1024]
    assert all(float(b["wall_s"]) > float(a["wall_s"]) for a, b in itertools.pairwise(rows))
    assert [r["eval_success"] != "" for r in rows] == [False, True, False, True]
    assert all(r["loss_value"] != "" and float(r["fps"]) > 0 for r in rows)
    log = json.loads((out / "log.json").read_text())
    assert log["columns"] == list(COLUMNS) and len(log["rows"]) == 4
    assert log["meta"]["stop_reason"] == "max_iterations" and log["meta"]["task"] == "cartpole"
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_holds_what_evaluation_needs(trained: object) -> None:
    ckpt = load_checkpoint(trained.checkpoint)
    assert (ckpt.task, ckpt.sim, ckpt.iteration, ckpt.env_steps) == ("cartpole", "mujoco", 4, 1024)
    assert ckpt.delegated == () and ckpt.data["delegated"] == []  # MuJoCo takes nothing from another engine
    assert ckpt.task_config["episode_length"] == 250
    assert ckpt.train_config.num_envs == 16 and ckpt.train_config.seed == 3
    norm = ckpt.data["obs_normalizer"]
    assert norm["mean"].shape == (4,) and torch.equal(
        norm["mean"], ckpt.data["actor_state_dict"]["obs_normalizer._mean"].squeeze(0)
    )
    policy = ckpt.policy()
    a = policy(torch.zeros(5, 4))
    assert a.shape == (5, 1) and torch.equal(a, policy(torch.zeros(5, 4)))  # deterministic
    assert load_checkpoint(trained.out_dir / "checkpoint_2.pt").iteration == 2


def test_evaluate_on_every_engine(trained: object) -> None:
    results = {}
    for sim in ("mujoco", "sapien", "mjwarp"):
        res = results[sim] = evaluate(trained.checkpoint, sim, seeds=(0, 1), episodes_per_seed=3, num_envs=2)
        assert (res.sim, res.trained_on, res.task, res.num_envs, res.episodes_per_seed) == (
            sim,
            "mujoco",
            "cartpole",
            2,
            3,
        )
        assert [s["seed"] for s in res.per_seed] == [0, 1]
        assert 0.0 <= res.success_rate.mean <= 1.0 and 1.0 <= res.mean_length.mean <= 250.0
        assert res.mean_return.n == 2 and math.isfinite(res.mean_return.half_width)
        d = res.to_dict()
        assert set(d["mean_return"]) >= {"mean", "ci_low", "ci_high"} and d["sim"] == sim
        assert d["delegated"] == [] and d["trained_delegated"] == []  # cartpole: every engine computes it all
        json.dumps(d)
    # the same seeds play the same episodes on every engine: the lengths agree up to the engines' differences
    for other in ("sapien", "mjwarp"):
        for a, b in zip(results["mujoco"].per_seed, results[other].per_seed):
            assert a["mean_length"] == pytest.approx(b["mean_length"], rel=0.05), other
    again = evaluate(trained.checkpoint, "mujoco", seeds=(0, 1), episodes_per_seed=3, num_envs=2)
    assert again.per_seed[0]["mean_return"] == results["mujoco"].per_seed[0]["mean_return"]  # deterministic


def test_cartpole_learns_to_balance(tmp_path: Path) -> None:
    """The task's defaults (64 envs, 16 evaluation episodes on the default schedule) without the early stop, 11
    iterations: the learning curve has a point at every evaluation before the first success (where the default
    stop_at_success=1.0 stops a run; evaluations leave training as it is), and the training success, per
    iteration, rises once the first training episodes last the 250 steps (8 iterations of 32 steps at least)."""
    r = train(
        "cartpole", "mujoco", seed=0, train_config={"max_iterations": 11, "stop_at_success": None}, out_dir=tmp_path,
        progress=False,
    )  # fmt: skip
    first = r.rows[0]
    assert first["mean_length"] < 50  # the initial random policy drops the pole at once
    rows = json.loads((tmp_path / "log.json").read_text())["rows"]  # the curve's data, as written
    evals = [
        (row["iteration"], row["eval_success"], row["eval_length"]) for row in rows if row["eval_success"] is not None
    ]
    assert [it for it, _, _ in evals] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11]  # TrainConfig(max_iterations=11)'s schedule
    solved = next(it for it, success, length in evals if success == 1.0 and length == 250.0)  # learnt to balance
    assert evals[0][1] == 0.0 and solved <= 8
    assert len([it for it, _, _ in evals if it <= solved]) >= 3  # a run stopping at success there has a curve
    # training success: over the episodes that ended in the iteration (a whole number of them succeeded; none
    # ended: no value), not over a window of the last 100
    series = [(row["success_rate"], row["episodes"]) for row in rows]
    assert all((s is None) == (n == 0) for s, n in series)
    assert all(s * n == pytest.approx(round(s * n), abs=1e-9) for s, n in series if n)
    assert series[0][0] == 0.0 and series[-1][0] >= 0.3  # none lasts 250 steps at first; a third or more at the end


def test_time_budget_and_early_stop(tmp_path: Path) -> None:
    quick = dict(SMALL, max_iterations=50, eval_episodes=2, save_interval=0)
    r = train(
        "cartpole", "mujoco", train_config=dict(quick, time_budget_s=1e-6), out_dir=tmp_path / "budget", progress=False
    )
    assert r.stop_reason == "time_budget" and r.iterations == 1
    assert not list((tmp_path / "budget").glob("checkpoint_[0-9]*.pt"))
    # with 3-step episodes every evaluation succeeds: the first one (after iteration 1 by default) stops the run
    r = train(
        "cartpole",
        "mujoco",
        task_config={"episode_length": 3},
        train_config=dict(quick, stop_at_success=1.0, eval_interval=None),
        out_dir=tmp_path / "solved",
        progress=False,
    )
    assert r.stop_reason == "success" and r.iterations == 1 and r.final_eval["success"] == 1.0


def test_randomization_reaches_the_task(tmp_path: Path) -> None:
    plan = RandomizationPlan((Term("gravity", Distribution.uniform(-0.5, 0.5), phase="reset"),), seed=1)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    r = train(
        "cartpole",
        "mujoco",
        randomization=str(path),
        out_dir=tmp_path / "run",
        progress=False,
        train_config=dict(SMALL, max_iterations=1, eval_interval=0, eval_episodes=2, save_interval=0),
    )
    assert r.rows[-1]["eval_success"] is not None  # eval_interval=0: the final evaluation, on the last row
    ckpt = load_checkpoint(r.checkpoint)
    assert RandomizationPlan.from_dict(ckpt.task_config["randomization"]) == plan
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["task_config"]["randomization"]["terms"][0]["kind"] == "gravity"


# ----------------------------------------------------------------------
# configuration, checkpoints, statistics
# ----------------------------------------------------------------------
def test_train_config_defaults_and_round_trip() -> None:
    c = TrainConfig.for_task("cartpole")
    assert c.num_envs == TASK_DEFAULTS["cartpole"]["num_envs"] and c.stop_at_success == 1.0
    assert TrainConfig.for_task("no-such-task") == TrainConfig()
    assert TrainConfig.for_task("cartpole", stop_at_success=None).stop_at_success is None
    assert TrainConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    cfg = c.rsl_rl_cfg()
    assert cfg["obs_groups"] == {"actor": ["policy"], "critic": ["critic"]}
    assert cfg["actor"]["hidden_dims"] == list(c.actor_hidden_dims) and cfg["num_steps_per_env"] == c.num_steps_per_env
    with pytest.raises(InvalidArgumentError, match="unknown keys"):
        TrainConfig.from_dict({"learning_rat": 1e-3})
    with pytest.raises(InvalidArgumentError, match="gamma"):
        TrainConfig(gamma=1.5)
    with pytest.raises(InvalidArgumentError, match="stop_at_success"):
        TrainConfig(stop_at_success=0.0)


def test_evaluation_schedule() -> None:
    """By default every task evaluates after each of its first 5 iterations, then on widening gaps up to its
    max_iterations (13 to 21 evaluations from 20 iterations up); an explicit interval wins, 0 leaves the end only."""
    assert all("eval_interval" not in d for d in TASK_DEFAULTS.values())
    c = TrainConfig.for_task("cartpole")
    assert c.eval_interval is None and TrainConfig().eval_interval is None
    assert c.eval_iterations() == (1, 2, 3, 4, 5, 9, 15, 21, 29, 38, 47, 59, 71, 84, 99, 115, 132, 150)
    assert [i for i in range(1, 151) if c.evaluates_at(i)] == list(c.eval_iterations())
    assert TrainConfig(max_iterations=3).eval_iterations() == (1, 2, 3)
    for n in (20, 150, 500, 1000, 10**6):
        its = TrainConfig(max_iterations=n).eval_iterations()
        assert 13 <= len(its) <= 21 and its[:5] == (1, 2, 3, 4, 5) and its[-1] == n, n
    every40 = TrainConfig.for_task("cartpole", eval_interval=40)
    assert every40.eval_iterations() == (40, 80, 120) == tuple(i for i in range(1, 151) if every40.evaluates_at(i))
    assert TrainConfig.for_task("velocity", eval_interval=0).eval_iterations() == ()
    assert TrainConfig.from_dict(json.loads(json.dumps(c.to_dict()))).eval_interval is None
    with pytest.raises(InvalidArgumentError, match="eval_interval"):
        TrainConfig(eval_interval=-1)


def test_load_checkpoint_rejects_other_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="no such file"):
        load_checkpoint(tmp_path / "none.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(InvalidArgumentError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "text.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(InvalidArgumentError, match="not a simbackend training checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_t_distribution_critical_values() -> None:
    # two-sided 95 % values from the standard t table
    for df, t in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281), (30, 2.0423)):
        assert t_critical(df) == pytest.approx(t, abs=1e-4)
    assert t_critical(4, 0.99) == pytest.approx(4.6041, abs=1e-4)
    assert t_two_sided_probability(1.0, 1) == pytest.approx(0.5)  # Cauchy: 2 atan(1) / pi
    assert t_two_sided_probability(1.0, 2) == pytest.approx(1 / math.sqrt(3))


def test_confidence_interval_of_known_numbers() -> None:
    e = estimate([1.0, 2.0, 3.0])
    assert e.mean == 2.0 and e.std == pytest.approx(1.0)
    assert e.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert (e.low, e.high) == pytest.approx((2.0 - 2.484138, 2.0 + 2.484138), abs=1e-5)
    assert estimate([5.0, 5.0, 5.0]).half_width == 0.0
    one = estimate([0.7])
    assert one.mean == 0.7 and math.isnan(one.half_width) and one.to_dict()["ci_low"] is None
    with pytest.raises(InvalidArgumentError):
        estimate([])
