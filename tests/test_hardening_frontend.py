"""Issue 50 (sixth hardening round): the front end's bounds and the docs' shell blocks.

The contract's clauses are in the conformance suite (``test_snapshot.py``: a snapshot column beyond its
bounds; ``test_bad_input.py``: uint8 ids); these are the project's own checks of the same rules on MuJoCo.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simbackend.errors import ValueRangeError
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.registry import make_backend


def test_a_default_pose_term_beyond_the_divergence_bound_is_refused_before_it_is_written() -> None:
    """A joint_default_pos term held its draws to finiteness only: 1e11 was stored and every reset from it
    then failed in set_state. It is held to set_state's bound (MAX_QPOS, 1e10), as a snapshot's column is."""
    with make_backend("mujoco", "arm7", 2) as sim:
        before = sim.get_env_default_qpos().clone()
        term = Term("joint_default_pos", Distribution.fixed(1e11), operation="set")
        with pytest.raises(ValueRangeError, match=r"randomized default qpos.*1e10.*\[0, 1\]"):
            sim.apply_init_randomization(RandomizationPlan((term,), seed=0))
        assert sim.get_env_default_qpos().equal(before)
        ok = Term("joint_default_pos", Distribution.fixed(0.25), operation="set")
        sim.apply_init_randomization(RandomizationPlan((ok,), seed=0))
        assert float(sim.get_env_default_qpos()[1, 0]) == 0.25


def test_training_progress_without_a_terminal_is_plain_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 50, item 4: stderr redirected to a file (pytest's capture is no terminal) held tqdm's bar, redrawn
    with carriage returns. Without a terminal the progress is plain lines: the first and the last iteration
    and every ceil(iterations / 100)-th, each whole, with the figures the bar shows."""
    from simbackend.training import train

    config = {"num_envs": 4, "num_steps_per_env": 4, "max_iterations": 3, "eval_interval": 0, "eval_episodes": 1}
    train("cartpole", "mujoco", seed=0, train_config=config, out_dir=tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err, repr(err[-300:])
    lines = [line for line in err.splitlines() if line.startswith("cartpole@mujoco")]
    assert [line.split()[2] for line in lines] == ["1/3", "2/3", "3/3"], err
    assert all("ret " in line and "fps " in line for line in lines), lines
