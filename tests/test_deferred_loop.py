"""The GPU training loop's code path, run on the CPU: no host reads, the same episodes.

A backend with deferred checks (every GPU backend; ``deferred_checks=True`` on
a CPU one) checks input values on the device and reports them at the next call,
so the whole RL step (task ``step``: controller, physics, observations, rewards,
terminations; resets of the done envs by mask; the rsl-rl adapter; a policy
forward) needs no value back on the host. :func:`simbackend.host_reads.count_host_reads`
counts every op that would make a GPU wait (scalar reads, data-dependent shapes,
read-backs) over many steps with resets; a single one fails the test, naming
its line. MuJoCo Warp on warp's CPU device runs the GPU engine's own code; the
C MuJoCo engine is a host engine (its reads of masks are its own business), so
there only the layers above the engine are held to zero.

Deferring changes nothing a user sees but when an error is raised: the
episodes (draws, resets, states, rewards) are bit-identical to the immediate
path's, which is checked here step by step.
"""

from __future__ import annotations

import pytest
import torch

from simbackend.errors import ArgumentTypeError, NonFiniteError
from simbackend.host_reads import count_host_reads
from simbackend.registry import make_backend
from simbackend.tasks import make_task

pytest.importorskip("rsl_rl")
from simbackend.envs.rsl import RslRlVecEnv  # noqa: E402

N = 6
STEPS = 24
#: (task, sim): every built-in task on the GPU engine's code, and the host engine for the layers above it
CASES = [("cartpole", "mjwarp"), ("reach", "mjwarp"), ("quadruped", "mjwarp"), ("cartpole", "mujoco")]


def _rollout(task_name: str, sim: str, deferred: bool) -> tuple[list, object, object]:
    """``STEPS`` rsl-rl steps with a small policy (episodes of 7 steps: several resets of a few envs each),
    counted by ``count_host_reads``; returns each step's outputs, the count and the task."""
    if sim == "mjwarp":
        pytest.importorskip("mujoco_warp")
    # short episodes, and the episodes start staggered: every few steps a few envs end theirs
    task = make_task(task_name, sim, N, config={"episode_length": 7}, seed=3, deferred_checks=deferred)
    env = RslRlVecEnv(task, owns_task=True)
    env.episode_length_buf = torch.arange(N) % 7
    torch.manual_seed(0)
    obs_dim = env.get_observations()["policy"].shape[1]
    policy = torch.nn.Sequential(torch.nn.Linear(obs_dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, env.num_actions))
    noise = torch.Generator().manual_seed(1)
    out = []
    obs = env.get_observations()
    with count_host_reads() as reads, torch.inference_mode():
        for _ in range(STEPS):
            actions = policy(obs["policy"]) + 0.3 * torch.randn(N, env.num_actions, generator=noise)
            obs, rewards, dones, extras = env.step(actions)
            out.append((obs["policy"].clone(), rewards.clone(), dones.clone(), extras["final"]["episode_return"]))
    return out, reads, env


@pytest.mark.parametrize(("task_name", "sim"), CASES)
def test_deferred_rollout_reads_nothing_back_and_matches_the_immediate_one(task_name: str, sim: str) -> None:
    fast, reads, env = _rollout(task_name, sim, deferred=True)
    try:
        task = env.task
        assert task.backend.deferred_checks
        sites = reads.by_site()
        if sim == "mujoco":  # a host engine reads its masks itself: the layers above it must not
            sites = {s: k for s, k in sites.items() if not s.split(" at ", 1)[1].startswith(("backends/", "engine.py"))}
        assert not sites, f"{task_name} on {sim}: host reads in the deferred loop:\n{reads.summary()}"
        counts = task.episode_count.clone()
    finally:
        env.close()
    slow, reads_slow, env_slow = _rollout(task_name, sim, deferred=False)
    try:
        assert reads_slow.total > 0  # the immediate path reads (the counter sees what it is meant to)
        assert torch.equal(env_slow.task.episode_count, counts)
    finally:
        env_slow.close()
    assert int(counts.sum()) > 2 * N  # the rollout reset envs, several times
    for step, (a, b) in enumerate(zip(fast, slow)):
        for name, x, y in zip(("obs", "reward", "done", "episode_return"), a, b):
            assert torch.equal(x, y), f"{task_name} on {sim}, step {step}: {name} differs when checks are deferred"


def test_a_nan_action_is_reported_at_the_next_call_with_the_env_held() -> None:
    """Deferred checks trade the immediate error for one at the next call; the env with the bad input keeps
    its state (held), the others step."""
    task = make_task("cartpole", "mujoco", 4, seed=0, deferred_checks=True)
    try:
        before = task.backend.get_qpos()
        action = torch.zeros(4, task.action_dim)
        action[2] = float("nan")
        task.step(action)  # no error yet: nothing was read back
        after = task.backend.get_qpos()
        assert torch.equal(after[2], before[2])
        assert not torch.equal(after[0], before[0]) or not torch.equal(after[1], before[1])
        with pytest.raises(NonFiniteError, match=r"ctrl.*\[2\].*next call"):
            task.step(torch.zeros(4, task.action_dim))
    finally:
        task.close()


@pytest.mark.parametrize("via", ["plan", "observer"])
def test_refused_set_state_rows_with_a_plan_or_an_observer(via: str) -> None:
    """The ids form of set_state with a reset plan or an observer reads the refused rows back (both need the
    written ids on the host): a refused env gets neither the state, nor the plan's draws, nor a notification;
    the good rows get all three (issue 38: the refused env was written back, warm starts cleared)."""
    from simbackend.randomization import RandomizationPlan

    sim = make_backend("mujoco", "quadruped", 3, deferred_checks=True, contact_sensing=True)
    try:
        sim.step(torch.zeros(3, sim.num_actuators), 60)
        plan = RandomizationPlan.from_dict({"version": 1, "seed": 1, "terms": [{"kind": "body_mass", "phase": "reset",
            "targets": ["torso"], "distribution": {"kind": "uniform", "low": 1.5, "high": 2.0}, "operation": "scale"}]})  # fmt: skip
        writes: list = []

        class Seen:
            def on_step(self, backend: object, nsteps: int, info: object) -> None:
                pass

            def on_write(self, backend: object, env_ids: object, what: str) -> None:
                writes.append((list(env_ids), what))  # type: ignore[call-overload]

        sim.add_observer(Seen())
        before = (sim.get_physics_state(), sim.get_body_contact_force_w(), sim.get_env_body_mass())
        q = sim.get_qpos().double().clone()
        q[:, 2] += 0.01
        q[1, 0] = float("nan")
        sim.set_state([0, 1, 2], q, randomization=plan if via == "plan" else None)
        after = (sim.get_physics_state(), sim.get_body_contact_force_w(), sim.get_env_body_mass())
        for was, now in zip(before, after):
            assert torch.equal(was[1], now[1]), "the refused env changed"
        assert not torch.equal(before[0][0], after[0][0]) and not torch.equal(before[0][2], after[0][2])
        if via == "plan":
            assert not torch.equal(before[2][[0, 2]], after[2][[0, 2]]), "the good rows' draws were not applied"
        assert writes == [([0, 2], "set_state")]
        with pytest.raises(NonFiniteError, match=r"qpos.*\[1\]"):
            sim.synchronize()
    finally:
        sim.close()


def test_deferred_checks_option_is_validated() -> None:
    with pytest.raises(ArgumentTypeError, match="deferred_checks"):
        make_backend("mujoco", "cartpole", 1, deferred_checks="yes")
