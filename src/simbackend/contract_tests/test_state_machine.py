"""Conformance: random sequences of contract calls keep every invariant.

A hypothesis ``RuleBasedStateMachine`` drives one backend (``arm7`` or
``quadruped``, 4 envs) through random interleavings of ``set_state`` (random env
subsets in random order, as ids or as a boolean mask, random configurations
from ``helpers.random_qpos`` with small velocities), ``step`` (ctrl inside the
ctrl ranges, 1 to 4 substeps), ``apply_body_force`` (bounded forces and torques
on random bodies) and getters with random ids. After every rule it checks:

* every getter has its contract shape, dtype float32 and the backend's device;
* every quaternion (free joints in qpos, bodies, sites, base) has unit norm;
* every value is finite (inputs are bounded);
* ``step`` reports no divergence;
* ``set_state`` writes the named envs as given and leaves the others bit for
  bit as they were; ``apply_body_force`` and getters change no state.

Examples are derandomized by the plugin's CI profile; each machine runs 10
examples of up to 10 steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from simbackend.contract_tests.helpers import random_qpos, snapshot, to_np

N = 4
MAX_FORCE = 5.0  # N, per component
MAX_TORQUE = 0.2  # N m, per component
QUAT_TOL = 1e-5


def _getters(sim: Any) -> dict[str, tuple[Callable[[], torch.Tensor], tuple[int, ...]]]:
    nb, ns, nd = len(sim.body_names), len(sim.site_names), sim.num_dof
    out = {
        "get_qpos": (sim.get_qpos, (N, sim.nq)),
        "get_qvel": (sim.get_qvel, (N, sim.nv)),
        "get_dof_pos": (sim.get_dof_pos, (N, nd)),
        "get_dof_vel": (sim.get_dof_vel, (N, nd)),
        "get_base_pos": (sim.get_base_pos, (N, 3)),
        "get_base_quat": (sim.get_base_quat, (N, 4)),
        "get_base_lin_vel": (sim.get_base_lin_vel, (N, 3)),
        "get_base_ang_vel": (sim.get_base_ang_vel, (N, 3)),
        "get_body_pos_w": (sim.get_body_pos_w, (N, nb, 3)),
        "get_body_quat_w": (sim.get_body_quat_w, (N, nb, 4)),
        "get_body_lin_vel_w": (sim.get_body_lin_vel_w, (N, nb, 3)),
        "get_body_ang_vel_w": (sim.get_body_ang_vel_w, (N, nb, 3)),
        "get_body_pos_b": (sim.get_body_pos_b, (N, nb, 3)),
        "get_body_quat_b": (sim.get_body_quat_b, (N, nb, 4)),
        "get_site_pos_w": (sim.get_site_pos_w, (N, ns, 3)),
        "get_site_quat_w": (sim.get_site_quat_w, (N, ns, 4)),
    }
    for sid, name in enumerate(sim.sensor_names):
        if sim.info.sensor_type[sid] in sim.capabilities.sensor_types:
            out[f"sensor {name}"] = (lambda name=name: sim.get_sensor_data(name), (N, int(sim.info.sensor_dim[sid])))
    return out


def _free_quat_cols(sim: Any) -> np.ndarray:
    """(nquat, 4) qpos columns of every free/ball joint quaternion."""
    starts = []
    for j, t in enumerate(sim.info.joint_type):
        adr = int(sim.info.joint_qposadr[j])
        if t == 0:
            starts.append(adr + 3)
        elif t == 1:
            starts.append(adr)
    return np.asarray(starts, dtype=np.int64)[:, None] + np.arange(4)


def make_machine(sim: Any) -> type[RuleBasedStateMachine]:
    """A state machine class bound to ``sim`` (reset to the default state at the start of every example)."""
    nb = len(sim.body_names)
    ns = len(sim.site_names)
    lo, hi = to_np(sim.get_actuator_ctrl_range()).T
    lo, hi = np.where(np.isfinite(lo), lo, -1.0), np.where(np.isfinite(hi), hi, 1.0)
    quat_cols = _free_quat_cols(sim)
    getters = _getters(sim)
    forces_ok = bool(sim.capabilities.body_forces)

    env_subsets = st.lists(st.integers(0, N - 1), unique=True, max_size=N)
    seeds = st.integers(0, 2**32 - 1)

    class BackendMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.sim = sim
            default = np.tile(to_np(sim.get_default_qpos()), (N, 1))
            sim.set_state(None, default)
            sim.step(np.tile((lo + hi) / 2, (N, 1)))  # flushes forces left pending by an earlier example
            sim.set_state(None, default)
            self.steps = 0

        # -- rules -------------------------------------------------------
        @rule(
            ids=env_subsets,
            seed=seeds,
            vel_scale=st.sampled_from([0.0, 0.05, 0.3]),
            as_mask=st.booleans(),
            quat_scale=st.sampled_from([1.0, 0.5, 3.0]),
        )
        def set_state(self, ids: list[int], seed: int, vel_scale: float, as_mask: bool, quat_scale: float) -> None:
            """Clause: set_state — writes the named envs at once (quaternions normalised) and leaves the others bit-identical."""
            rng = np.random.default_rng(seed)
            if as_mask:
                ids = sorted(ids)
                arg: Any = np.isin(np.arange(N), ids)
            else:
                arg = ids
            qpos = random_qpos(sim, rng, len(ids))
            qvel = rng.normal(scale=vel_scale, size=(len(ids), sim.nv))
            given = qpos.copy()
            if quat_cols.size:  # quaternions need not be unit on input: set_state normalises them
                given[:, quat_cols] *= quat_scale
            before = snapshot(sim)
            sim.set_state(arg, given, qvel)
            after = snapshot(sim)
            others = [i for i in range(N) if i not in ids]
            for key in before:
                assert torch.equal(after[key][others], before[key][others]), (
                    f"set_state({arg!r}) changed {key} of envs {others} it did not name"
                )
            if ids:
                np.testing.assert_allclose(
                    to_np(after["qpos"][ids]),
                    qpos,
                    rtol=0,
                    atol=1e-6,
                    err_msg="set_state: getters do not reflect the written qpos",
                )
                np.testing.assert_allclose(
                    to_np(after["qvel"][ids]),
                    qvel,
                    rtol=0,
                    atol=1e-6,
                    err_msg="set_state: getters do not reflect the written qvel",
                )

        @rule(seed=seeds, nsteps=st.integers(1, 4))
        def step(self, seed: int, nsteps: int) -> None:
            """Clause: step — bounded controls advance every env with no divergence."""
            ctrl = np.random.default_rng(seed).uniform(lo, hi, size=(N, sim.num_actuators))
            info = sim.step(ctrl, nsteps=nsteps)
            d = info["diverged"]
            assert isinstance(d, torch.Tensor) and d.dtype == torch.bool and tuple(d.shape) == (N,)
            assert not bool(d.any()), f"diverged under bounded inputs: {d.tolist()}"
            self.steps += nsteps

        @precondition(lambda self: forces_ok)
        @rule(
            bodies=st.lists(st.integers(1, nb - 1), unique=True, min_size=1, max_size=3),
            seed=seeds,
            with_torque=st.booleans(),
        )
        def apply_body_force(self, bodies: list[int], seed: int, with_torque: bool) -> None:
            """Clause: apply_body_force — a pending force changes no state before the next step."""
            rng = np.random.default_rng(seed)
            force = rng.uniform(-MAX_FORCE, MAX_FORCE, size=(N, len(bodies), 3))
            torque = rng.uniform(-MAX_TORQUE, MAX_TORQUE, size=(N, len(bodies), 3)) if with_torque else None
            before = snapshot(sim)
            sim.apply_body_force(bodies, torch.as_tensor(force, dtype=torch.float32), torque)
            after = snapshot(sim)
            for key in before:
                assert torch.equal(after[key], before[key]), f"apply_body_force changed {key} before any step"

        @rule(
            body_ids=st.lists(st.integers(0, nb - 1), max_size=5), site_ids=st.lists(st.integers(0, ns - 1), max_size=3)
        )
        def read_subsets(self, body_ids: list[int], site_ids: list[int]) -> None:
            """Clause: getters — any subset of body/site ids reads (N, B, 3|4) and reading changes no state."""
            before = snapshot(sim)
            full = {k: v for k, v in before.items()}
            b = len(body_ids)
            for name in (
                "get_body_pos_w",
                "get_body_quat_w",
                "get_body_lin_vel_w",
                "get_body_ang_vel_w",
                "get_body_pos_b",
                "get_body_quat_b",
                "get_body_lin_vel_b",
                "get_body_ang_vel_b",
            ):
                out = getattr(sim, name)(body_ids)
                width = 4 if "quat" in name else 3
                assert tuple(out.shape) == (N, b, width), f"{name}({body_ids}): shape {tuple(out.shape)}"
                assert out.dtype == torch.float32 and out.device == sim.device
            assert torch.equal(sim.get_body_pos_w(body_ids), full["body_pos_w"][:, body_ids])
            assert torch.equal(sim.get_site_pos_w(site_ids), full["site_pos_w"][:, site_ids])
            if site_ids and sim.capabilities.site_jacobians:
                jacp, jacr = sim.get_site_jacobian_w(site_ids[0])
                assert tuple(jacp.shape) == tuple(jacr.shape) == (N, 3, sim.nv)
                assert torch.isfinite(jacp).all() and torch.isfinite(jacr).all()
            after = snapshot(sim)
            for key in before:
                assert torch.equal(after[key], before[key]), f"reading getters changed {key}"

        # -- invariants ---------------------------------------------------
        @invariant()
        def shapes_finite_unit_quaternions(self) -> None:
            """Clause: invariants — shapes, dtypes, device, finite values and unit quaternions after every call."""
            for name, (call, shape) in getters.items():
                out = call()
                assert isinstance(out, torch.Tensor), name
                assert tuple(out.shape) == shape, f"{name}: shape {tuple(out.shape)}, expected {shape}"
                assert out.dtype == torch.float32 and out.device == sim.device, name
                assert torch.isfinite(out).all(), f"{name}: non-finite values"
                if "quat" in name:
                    norm = to_np(out).reshape(-1, 4)
                    err = np.abs(np.linalg.norm(norm, axis=-1) - 1).max()
                    assert err < QUAT_TOL, f"{name}: quaternion norm off by {err:.2e}"
            if quat_cols.size:
                q = to_np(sim.get_qpos())[:, quat_cols]
                err = np.abs(np.linalg.norm(q, axis=-1) - 1).max()
                assert err < QUAT_TOL, f"qpos quaternions: norm off by {err:.2e}"

    BackendMachine.TestCase.settings = settings(max_examples=10, stateful_step_count=10)
    return BackendMachine


@pytest.mark.parametrize("model", ["arm7", "quadruped"])
def test_random_call_sequences(make_sim: Callable[..., Any], model: str) -> None:
    """Clause: invariants — random sequences of set_state, step, apply_body_force and getters keep shapes, unit quaternions, finiteness, no divergence, and untouched envs bit-identical."""
    sim = make_sim(model, N)
    machine = make_machine(sim)
    run_state_machine_as_test(machine)
