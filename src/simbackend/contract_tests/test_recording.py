"""Conformance: a backend's rollout recorded (``simbackend.playback``) replays on the same backend.

The recorder talks to the contract only (observers, getters, snapshots and
named states), so every backend gets recordings; these clauses check that
what it records is what its getters said, and that its own recording
replays on it: exactly where snapshots are exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend.contract_tests.helpers import to_np
from simbackend.playback.recording import Recorder, Recording
from simbackend.playback.replay import dynamic_replay, kinematic_replay


def test_recorded_rows_are_what_the_getters_said(make_sim: Any, tmp_path: Path) -> None:
    """Clause: every step appends a row of the recorded envs' time, qpos, qvel, last ctrl and diverged
    mask, as the getters gave them after that step; a write between steps (set_state of a recorded env)
    appends a write row (nsteps 0) and an event holding the env's new state."""
    sim = make_sim("double_pendulum", 4)
    g = torch.Generator().manual_seed(3)
    seen = []
    with Recorder(sim, tmp_path / "run.h5", env_ids=[2, 0]):
        for t in range(12):
            sim.step(torch.rand(4, sim.num_actuators, generator=g) * 2 - 1, nsteps=3)
            seen.append(
                (
                    to_np(sim.get_qpos()[[2, 0]]),
                    to_np(sim.get_qvel()[[2, 0]]),
                    to_np(sim.get_ctrl()[[2, 0]]),
                    to_np(sim.get_time()[[2, 0]]),
                )
            )
            if t == 5:
                sim.set_state([0], sim.get_qpos()[[0]] * 0.5)
    with Recording(tmp_path / "run.h5") as rec:
        assert rec.backend == sim.name and rec.env_ids.tolist() == [2, 0]
        assert rec.nsteps.tolist() == [0] + [3] * 6 + [0] + [3] * 6
        stepped = np.flatnonzero(rec.nsteps > 0)
        for (qpos, qvel, ctrl, time), r in zip(seen, stepped):
            np.testing.assert_array_equal(rec.rows("qpos", [r])[0], qpos)
            np.testing.assert_array_equal(rec.rows("qvel", [r])[0], qvel)
            np.testing.assert_array_equal(rec.rows("ctrl", [r])[0], ctrl)
            np.testing.assert_array_equal(rec.rows("time", [r])[0], time)
        events = rec.events()
        assert events["row"].tolist() == [0, 0, 7] and events["env"].tolist() == [0, 1, 1]
        np.testing.assert_array_equal(
            rec.event_state([2]).joint_pos[sim.joint_names[0]].numpy(), rec.rows("qpos", [7], [1])[0, :, :1]
        )


def test_own_recording_replays(make_sim: Any, tmp_path: Path) -> None:
    """Clause: a recording replays on a new instance of the backend that made it: dynamically with no
    error where snapshot_exact (and within 1e-5 otherwise), and kinematically onto the recorded states."""
    sim = make_sim("cartpole", 3)
    g = torch.Generator().manual_seed(1)
    with Recorder(sim, tmp_path / "run.h5"):
        for t in range(30):
            sim.step(torch.rand(3, sim.num_actuators, generator=g) * 2 - 1, nsteps=2)
            if t == 10:
                sim.set_state([1], sim.get_qpos()[[1]], torch.ones(1, sim.nv))
    with Recording(tmp_path / "run.h5") as rec:
        again = make_sim(rec.model(), 3)
        report = dynamic_replay(rec, again)
        assert report.exact_start == bool(again.capabilities.snapshot_restore)
        limit = 0.0 if again.capabilities.snapshot_exact else 1e-5
        assert report.qpos_error.max() <= limit and report.qvel_error.max() <= 100 * limit, report.summary()
        for r in kinematic_replay(rec, again, envs=[2], rows=slice(20, 25)):
            np.testing.assert_allclose(to_np(again.get_qpos()[0]), rec.rows("qpos", [r], [2])[0, 0], atol=1e-6)
