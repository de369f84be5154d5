"""MuJoCo Warp backend: what the conformance suite does not check (agreement with C MuJoCo, refusals,
options, randomized values equal to the reference's)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco_warp")

from simbackend import make_backend  # noqa: E402
from simbackend.errors import InvalidArgumentError, ModelLoadError  # noqa: E402
from simbackend.randomization import Distribution, RandomizationPlan, Term  # noqa: E402


def _home(sim):
    return sim.get_keyframe_qpos("home").expand(sim.num_envs, -1)


def test_arm7_rollout_matches_c_mujoco_in_float32() -> None:
    """200 substeps of arm7 from "home" under the home ctrl: MJWarp (float32) within 1e-4 rad of C MuJoCo."""
    sims = [make_backend(name, "arm7", 2) for name in ("mjwarp", "mujoco")]
    for sim in sims:
        sim.set_state(None, _home(sim))
    ctrl = torch.as_tensor(np.asarray(sims[1].info.compiled.key("home").ctrl), dtype=torch.float32).expand(2, -1)
    for sim in sims:
        sim.step(ctrl, nsteps=200)
    diff = (sims[0].get_qpos() - sims[1].get_qpos()).abs().max().item()
    assert diff < 1e-4, diff
    assert diff > 0.0, "float32 against float64 cannot agree to the bit: is the reference really MJWarp?"


def test_unsupported_element_is_named() -> None:
    import mujoco

    from simbackend.models import compile_model

    m = compile_model("pendulum")
    m.geom_type[0] = int(mujoco.mjtGeom.mjGEOM_TRIANGLE)  # a decor type put_model has no collider for
    name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, 0) or "geom0"
    with pytest.raises(ModelLoadError, match=rf"geom '{name}': type mjGEOM_TRIANGLE"):
        make_backend("mjwarp", m, 1)


def test_unsupported_solver_names_the_option_and_the_way_out() -> None:
    import mujoco

    from simbackend.models import compile_model

    m = compile_model("pendulum")
    m.opt.solver = int(mujoco.mjtSolver.mjSOL_PGS)
    with pytest.raises(ModelLoadError, match=r"option solver mjSOL_PGS .*mjwarp=\{'solver'"):
        make_backend("mjwarp", m, 1)
    sim = make_backend("mjwarp", m, 1, mjwarp={"solver": "newton"})  # the way out named by the message
    sim.step(torch.zeros(1, sim.num_actuators), nsteps=2)


def test_option_block_is_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="mjwarp.solver"):
        make_backend("mjwarp", "pendulum", 1, mjwarp={"solver": "pgs"})
    with pytest.raises(InvalidArgumentError, match="mjwarp.njmax"):
        make_backend("mjwarp", "pendulum", 1, mjwarp={"njmax": 0})


def test_randomized_values_equal_the_reference_engines() -> None:
    """The same plan and seed give MJWarp and C MuJoCo the same per-env values (float32-rounded)."""
    plan = RandomizationPlan(
        (
            Term("body_mass", Distribution.uniform(0.5, 1.5), operation="scale", phase="interval"),
            Term("geom_friction", Distribution.uniform(0.5, 1.0), operation="set", phase="interval"),
            Term("gravity", Distribution.uniform(-0.5, 0.5), operation="add", phase="interval"),
        )
    )
    sims = [make_backend(name, "arm7", 4, seed=3) for name in ("mjwarp", "mujoco")]
    for sim in sims:
        sim.apply_interval_randomization(plan, [1, 3])
    for field in ("body_mass", "geom_friction", "gravity"):
        got = [np.asarray(sim.engine.read_params(field), np.float64) for sim in sims]
        np.testing.assert_allclose(got[0], got[1], rtol=1e-6, atol=1e-7, err_msg=field)
    assert not np.allclose(got[0][1], got[0][0]), "env 1 was not randomized"
