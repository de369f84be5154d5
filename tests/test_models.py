"""Model sources: built-in names, MJCF and URDF paths, MjSpec, gymnasium's MJCF models."""

from __future__ import annotations

import textwrap
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.contract_tests.helpers import gymnasium_assets
from simbackend.errors import ModelLoadError
from simbackend.models import builtin_models, compile_model, model_info

GYM = gymnasium_assets()
GYM_MODELS = sorted(GYM.glob("*.xml")) if GYM else []

URDF = textwrap.dedent(
    """\
    <robot name="two_link">
      <link name="base"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>
      <link name="link1"><inertial><origin xyz="0 0 0.25"/><mass value="0.5"/><inertia ixx="0.01" iyy="0.01" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial></link>
      <joint name="j1" type="revolute"><parent link="base"/><child link="link1"/><origin xyz="0 0 0.1"/><axis xyz="0 1 0"/><limit lower="-1.5" upper="1.5" effort="10" velocity="5"/></joint>
    </robot>
    """
)


def test_builtin_models_listed():
    assert {"pendulum", "double_pendulum", "cartpole", "arm7", "quadruped"} <= set(builtin_models())


def test_unknown_builtin_name_suggests_closest():
    with pytest.raises(ModelLoadError, match="arm7"):
        compile_model("arm8")


def test_missing_file_and_bad_xml(tmp_path: Path):
    with pytest.raises(ModelLoadError, match="not found"):
        compile_model(tmp_path / "nope.xml")
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><body><joint type='hinge'/></body></worldbody>")
    with pytest.raises(ModelLoadError, match="could not compile"):
        compile_model(bad)
    with pytest.raises(ModelLoadError, match="model source must be"):
        compile_model(42)


def test_urdf_path_loads_with_names_and_limits(tmp_path: Path):
    path = tmp_path / "two_link.urdf"
    path.write_text(URDF)
    with make_backend("mujoco", path, 2) as sim:
        assert "link1" in sim.body_names and sim.joint_names == ("j1",)
        np.testing.assert_allclose(sim.get_joint_range().numpy(), [[-1.5, 1.5]])
        # URDF: the hinge is 0.1 m above the base origin, link1's frame sits on it
        np.testing.assert_allclose(sim.get_body_pos_w(sim.get_body_ids("link1"))[0, 0].numpy(), [0, 0, 0.1], atol=1e-7)


def test_mjspec_source_matches_path_source():
    path = Path(compile_model.__code__.co_filename).parent / "assets" / "arm7.xml"
    spec = mujoco.MjSpec.from_file(str(path))
    with make_backend("mujoco", spec, 2) as a, make_backend("mujoco", "arm7", 2) as b:
        assert a.body_names == b.body_names and a.nq == b.nq
        torch.testing.assert_close(a.get_body_pos_w(), b.get_body_pos_w(), rtol=0, atol=0)


def test_backend_keeps_its_own_model_copy():
    m = compile_model("pendulum")
    with make_backend("mujoco", m, 1) as sim:
        m.opt.timestep = 0.5
        assert sim.physics_dt != 0.5
        assert sim.engine.model.opt.timestep != 0.5


def test_model_info_layout_quadruped():
    info = model_info(compile_model("quadruped"))
    assert info.has_floating_base and info.body_names[info.base_body] == "torso"
    assert info.num_dof == 12 and info.nq == 19 and info.nv == 18
    np.testing.assert_array_equal(info.dof_qpos_index, np.arange(7, 19))
    np.testing.assert_array_equal(info.dof_qvel_index, np.arange(6, 18))
    np.testing.assert_array_equal(info.quat_qpos_index, [3])
    assert set(info.actuator_kind) == {"motor"}


def test_model_info_actuator_kinds_and_gains():
    info = model_info(compile_model("arm7"))
    assert info.actuator_kind == ("position",) * 7
    assert (info.actuator_kp > 0).all() and (info.actuator_kv > 0).all()
    assert not info.has_floating_base and info.body_names[info.base_body] == "base"
    # the cube's free joint is not the floating base and holds no dof column
    assert "cube_free" not in [info.joint_names[j] for j in info.dof_joints]


@pytest.mark.skipif(not GYM_MODELS, reason="gymnasium is not installed")
@pytest.mark.parametrize("path", GYM_MODELS, ids=lambda p: p.stem)
def test_gymnasium_models_load_and_behave(path: Path):
    """Every MJCF model gymnasium ships builds, keeps MuJoCo's names, and stays finite under random control."""
    m = compile_model(path)
    with make_backend("mujoco", path, 4) as sim:
        assert sim.nq == m.nq and sim.nv == m.nv and sim.num_actuators == m.nu
        # unnamed elements get "<kind><id>", so every id has a name on every backend
        assert sim.body_names[1:] == tuple(m.body(i).name or f"body{i}" for i in range(1, m.nbody))
        rng = sim.get_actuator_ctrl_range()
        lo = torch.where(torch.isfinite(rng[:, 0]), rng[:, 0], -1.0)
        hi = torch.where(torch.isfinite(rng[:, 1]), rng[:, 1], 1.0)
        gen = torch.Generator().manual_seed(0)
        q0 = sim.get_qpos()
        for _ in range(40):
            info = sim.step(lo + (hi - lo) * torch.rand(4, sim.num_actuators, generator=gen), nsteps=5)
            assert not info["diverged"].any()
        assert torch.isfinite(sim.get_qpos()).all() and torch.isfinite(sim.get_qvel()).all()
        assert not torch.equal(sim.get_qpos(), q0), "random control should move the model"


def test_actuator_with_several_controls_is_refused_by_name(tmp_path: Path) -> None:
    """MuJoCo 4's pid actuator takes two controls (nu = 2 for one actuator); the contract has one ctrl
    column per actuator: refused naming the actuator, on every backend (the front end's model info)."""
    from simbackend import make_backend

    xml = tmp_path / "pid.xml"
    xml.write_text(
        """<mujoco><worldbody><body name="b"><joint name="j" type="hinge"/><geom size="0.1"/></body></worldbody>
        <actuator><pid name="servo" joint="j" kp="1"/></actuator></mujoco>"""
    )
    with pytest.raises(ModelLoadError, match=r"actuator 'servo' takes 2 controls"):
        make_backend("mujoco", xml, 1)
