"""Conformance: determinism — identical inputs give bit-identical trajectories,
whatever the batch size, the env's place in the batch or the thread count.

Gated on the ``deterministic`` capability. Runs on ``quadruped`` (floating base,
ground contacts) and ``arm7`` (position servos, a free cube on a table).

Thread counts are a backend option, not part of the contract (``nthread`` on
the MuJoCo backend). The suite must run unchanged on every backend, so it asks
for ``make_sim(model, n, nthread=k)`` and, when the backend's factory rejects
the option with ``TypeError``, builds the backend with its default options
instead; for such a backend the thread-count test compares repeated runs of the
default configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from simbackend.contract_tests.helpers import to_np

MODELS = ("quadruped", "arm7")
NUM_STEPS = 50
NSUB = 2  # substeps per step call
MAX_ENVS = 8
THREADS = (1, 2, 3)


def _initial_state(sim: Any, model: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(MAX_ENVS, nq), (MAX_ENVS, nv): a different, physically sensible state per env."""
    rng = np.random.default_rng(seed)
    info = sim.info
    if model == "quadruped":
        qpos = np.tile(to_np(sim.get_keyframe_qpos("stand")), (n, 1))
        root = int(info.joint_qposadr[info.base_free_joint])
        qpos[:, root + 2] -= 0.005  # feet on the ground
        qpos[:, root : root + 2] += rng.uniform(-0.5, 0.5, size=(n, 2))
    else:
        qpos = np.tile(to_np(sim.get_keyframe_qpos("home")), (n, 1))
    dof = info.dof_qpos_index
    qpos[:, dof] += rng.normal(scale=0.05, size=(n, dof.size))
    qvel = rng.normal(scale=0.1, size=(n, sim.nv))
    return qpos, qvel


def _controls(sim: Any, model: str, n: int, seed: int = 1) -> np.ndarray:
    """(NUM_STEPS, MAX_ENVS, nu) controls inside the ctrl ranges, from a fixed seed."""
    rng = np.random.default_rng(seed)
    lo, hi = to_np(sim.get_actuator_ctrl_range()).T
    if model == "arm7":  # position targets around the home pose
        home = to_np(sim.get_keyframe_qpos("home"))[sim.info.joint_qposadr[sim.info.actuator_joint]]
        u = home + rng.uniform(-0.3, 0.3, size=(NUM_STEPS, n, sim.num_actuators))
    else:
        u = rng.uniform(lo, hi, size=(NUM_STEPS, n, sim.num_actuators))
    return np.clip(u, lo, hi)


def _build(make_sim: Callable[..., Any], model: str, n: int, nthread: int | None = None) -> Any:
    """A backend of ``n`` envs; ``nthread`` is passed only if the backend accepts the option."""
    if nthread is None:
        return make_sim(model, n)
    try:
        return make_sim(model, n, nthread=nthread)
    except TypeError:
        return make_sim(model, n)


def _rollout(sim: Any, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 trajectories (NUM_STEPS + 1, n, nq) and (NUM_STEPS + 1, n, nv), as the backend returns them."""
    sim.set_state(None, qpos, qvel)
    qs, vs = [sim.get_qpos().cpu().numpy()], [sim.get_qvel().cpu().numpy()]
    for t in range(ctrl.shape[0]):
        info = sim.step(ctrl[t], nsteps=NSUB)
        assert not bool(info["diverged"].any()), f"diverged at step {t}"
        qs.append(sim.get_qpos().cpu().numpy())
        vs.append(sim.get_qvel().cpu().numpy())
    return np.stack(qs), np.stack(vs)


def _assert_identical(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray], what: str) -> None:
    for g, w, name in zip(got, want, ("qpos", "qvel")):
        if not np.array_equal(g, w):
            t = int(np.argmax(np.abs(g - w).reshape(g.shape[0], -1).max(axis=1) > 0))
            raise AssertionError(
                f"{what}: {name} not bit-identical, first difference at step {t}, max |diff| {np.abs(g - w).max():.3e}"
            )


@pytest.fixture(params=MODELS, scope="module")
def model(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def reference(make_module_sim: Callable[..., Any], model: str, capabilities: Any, sim_name: str) -> dict:
    """The 8-env batch with default options: inputs and trajectories (run once per model, on a backend of its
    own: every test compares a new or reused backend of its own against it)."""
    if not capabilities.deterministic:
        pytest.skip(f"backend {sim_name!r} declares capability deterministic absent")
    sim = make_module_sim(model, MAX_ENVS)
    qpos, qvel = _initial_state(sim, model, MAX_ENVS)
    ctrl = _controls(sim, model, MAX_ENVS)
    traj = _rollout(sim, qpos, qvel, ctrl)
    assert np.abs(traj[0][-1] - traj[0][0]).max() > 1e-2, "the rollout barely moved: the test would be blind"
    return {"qpos": qpos, "qvel": qvel, "ctrl": ctrl, "traj": traj}


def test_repeat_run_identical(make_sim: Callable[..., Any], model: str, reference: dict) -> None:
    """Clause: determinism — the same initial state and controls give bit-identical qpos/qvel trajectories on a new backend."""
    sim = make_sim(model, MAX_ENVS)
    traj = _rollout(sim, reference["qpos"], reference["qvel"], reference["ctrl"])
    _assert_identical(traj, reference["traj"], f"{model}: second run of the same batch")


def test_same_backend_reset_identical(make_sim: Callable[..., Any], model: str, reference: dict) -> None:
    """Clause: determinism — set_state back to the initial state on a used backend replays the trajectory bit for bit."""
    sim = make_sim(model, MAX_ENVS)
    _rollout(sim, reference["qpos"][::-1].copy(), reference["qvel"][::-1].copy(), reference["ctrl"][::-1].copy())
    traj = _rollout(sim, reference["qpos"], reference["qvel"], reference["ctrl"])
    _assert_identical(traj, reference["traj"], f"{model}: replay after set_state on a used backend")


@pytest.mark.parametrize("num_envs", [1, 3])
def test_batch_size_independent(make_sim: Callable[..., Any], model: str, reference: dict, num_envs: int) -> None:
    """Clause: determinism — an env's trajectory does not depend on num_envs (1, 3, 8) nor on its place in the batch.

    num_envs=1: env i of the 8-env batch equals a single-env run given env i's
    initial state and ctrl, for every i. num_envs=3: envs 0..2 of the batch
    equal a 3-env run, and so do envs 5..7 placed at rows 0..2.
    """
    groups = [[i] for i in range(MAX_ENVS)] if num_envs == 1 else [[0, 1, 2], [5, 6, 7]]
    for rows in groups:
        sim = make_sim(model, num_envs)
        traj = _rollout(sim, reference["qpos"][rows], reference["qvel"][rows], reference["ctrl"][:, rows])
        want = tuple(a[:, rows] for a in reference["traj"])
        _assert_identical(traj, want, f"{model}: envs {rows} run in a batch of {num_envs}")


@pytest.mark.parametrize("nthread", THREADS)
def test_thread_count_independent(make_sim: Callable[..., Any], model: str, reference: dict, nthread: int) -> None:
    """Clause: determinism — the trajectory is bit-identical for any thread count (backend option nthread, where accepted)."""
    sim = _build(make_sim, model, MAX_ENVS, nthread)
    traj = _rollout(sim, reference["qpos"], reference["qvel"], reference["ctrl"])
    _assert_identical(traj, reference["traj"], f"{model}: nthread={nthread}")
