"""simbackend.graphs.CapturedStep on a machine without CUDA: why it steps eagerly, and that its eager step is
``Task.step`` plus the resets of the done envs, the same episodes as those calls made by hand.

The capture itself needs CUDA: ``benchmarks/probe_gpu_loop.py`` runs it on a lent GPU (its results:
``benchmarks/results/gpu_loop_cuda_*.json``).
"""

from __future__ import annotations

import pytest
import torch

from simbackend.errors import ArgumentTypeError, InvalidArgumentError
from simbackend.graphs import CapturedStep, capture_blockers
from simbackend.tasks import make_task


@pytest.mark.parametrize("deferred", [False, True])
def test_each_blocker_is_named(deferred: bool) -> None:
    task = make_task("cartpole", "mujoco", 3, deferred_checks=deferred)
    try:
        reasons = capture_blockers(task)
        assert any("not on a CUDA device" in r for r in reasons)
        assert any("does not declare cuda_graphs" in r for r in reasons)
        assert any("checks input values at once" in r for r in reasons) is (not deferred)
        step = CapturedStep(task)
        assert not step.captured and step.reason == "; ".join(reasons)
        with pytest.raises(InvalidArgumentError, match="warmup"):  # a bad argument is an error, not a reason
            CapturedStep(task, warmup=0)
        with pytest.raises(ArgumentTypeError, match="capture"):
            CapturedStep(task, capture="no")
        assert "eager" in repr(step)
    finally:
        task.close()


def test_a_task_is_required() -> None:
    """Anything but a task (None, its backend, a callable) is refused in one line naming ``task``, before
    anything runs (issue 38: a raw AttributeError)."""
    task = make_task("cartpole", "mujoco", 2)
    try:
        for bad in (None, task.backend, task.step, "cartpole"):
            with pytest.raises(ArgumentTypeError, match=r"^task: expected a Task") as info:
                CapturedStep(bad)
            assert "\n" not in str(info.value) and type(bad).__name__ in str(info.value)
        with pytest.raises(ArgumentTypeError, match="task"):  # checked before the other arguments
            CapturedStep(None, warmup=0)
    finally:
        task.close()


def test_a_host_side_randomization_plan_blocks_the_capture() -> None:
    plan = {"version": 1, "seed": 1, "terms": [{"kind": "body_mass", "phase": "reset", "targets": ["pole"],
            "distribution": {"kind": "uniform", "low": 0.9, "high": 1.1}, "operation": "scale"}]}  # fmt: skip
    task = make_task("cartpole", "mujoco", 2, config={"randomization": plan}, deferred_checks=True)
    try:
        assert any("randomization plan" in r for r in capture_blockers(task))
    finally:
        task.close()


def test_the_eager_step_is_task_step_and_the_resets_of_the_done_envs() -> None:
    """Two twins: one through CapturedStep, one by hand; the same observations, rewards and dones, resets
    included (episodes of 5 steps, started staggered)."""
    tasks = [make_task("cartpole", "mujoco", 4, config={"episode_length": 5}, seed=2) for _ in range(2)]
    try:
        for t in tasks:
            t.episode_step.copy_(torch.arange(4) % 5)
        step = CapturedStep(tasks[0])
        g = torch.Generator().manual_seed(0)
        resets = 0
        for _ in range(12):
            a = torch.rand(4, tasks[0].action_dim, generator=g) * 2 - 1
            got = step(a)
            out = tasks[1].step(a)
            done = out.terminated | out.truncated
            obs = tasks[1].reset(done)
            resets += int(done.sum())
            assert torch.equal(got.info["done"], done)
            assert torch.equal(got.reward, out.reward)
            for k in obs:
                assert torch.equal(got.obs[k], obs[k]), k
        assert resets >= 4
    finally:
        for t in tasks:
            t.close()


def test_an_observer_blocks_the_capture() -> None:
    class Counter:
        def on_step(self, backend, nsteps, info):  # noqa: ANN001, ANN201 - the observer protocol
            pass

        def on_write(self, backend, env_ids, what):  # noqa: ANN001, ANN201
            pass

    task = make_task("cartpole", "mujoco", 2, deferred_checks=True)
    try:
        assert not any("observer" in r for r in capture_blockers(task))
        task.backend.add_observer(Counter())
        assert task.backend.observers and any("observer" in r for r in capture_blockers(task))
    finally:
        task.close()
