"""simbackend.models.export_mjcf: the compiled model written back as MJCF for engines with their own compiler."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import mujoco
import numpy as np
import pytest

from simbackend.errors import InvalidArgumentError, ModelLoadError
from simbackend.models import builtin_models, compile_model, export_mjcf, model_info

GYM = sorted(
    glob.glob(os.path.join(os.path.dirname(pytest.importorskip("gymnasium").__file__), "envs/mujoco/assets/*.xml"))
)

UNNAMED = """<mujoco>
  <compiler inertiafromgeom="true" fusestatic="true"/>
  <worldbody>
    <body pos="0 0 1"><freejoint/><geom type="box" size=".1 .1 .1" density="500"/>
      <body pos="0 0 .2"><geom type="sphere" size=".05"/></body>
      <body pos=".2 0 0"><joint name="hinge" type="hinge"/><geom type="capsule" fromto="0 0 0 .2 0 0" size=".02"/><site/></body>
    </body>
  </worldbody>
  <actuator><motor joint="hinge"/></actuator>
</mujoco>
"""


def _same_model(a: mujoco.MjModel, b: mujoco.MjModel) -> None:
    ia, ib = model_info(a), model_info(b)
    for f in (
        "body_names",
        "joint_names",
        "site_names",
        "geom_names",
        "actuator_names",
        "sensor_names",
        "joint_type",
        "joint_qposadr",
        "joint_dofadr",
        "body_parent",
    ):
        assert np.array_equal(np.asarray(getattr(ia, f)), np.asarray(getattr(ib, f))), f
    # written exactly (MuJoCo's XML writer alone keeps ~7 significant digits)
    for f in (
        "body_mass",
        "body_com",
        "body_inertia",
        "joint_range",
        "actuator_ctrl_range",
        "actuator_gain",
        "actuator_kp",
        "actuator_kv",
        "gravity",
        "timestep",
    ):
        np.testing.assert_allclose(getattr(ib, f), getattr(ia, f), rtol=1e-15, atol=0, err_msg=f)
    np.testing.assert_allclose(ib.qpos0, ia.qpos0, rtol=1e-5, atol=1e-9, err_msg="qpos0")


@pytest.mark.parametrize("source", list(builtin_models()) + GYM, ids=lambda s: Path(s).stem)
def test_written_model_compiles_to_the_same_model(tmp_path: Path, source: str) -> None:
    """The file compiles (in MuJoCo, without the source's folder) to the same names, tree, layout,
    inertials and ranges; every inertial is explicit, so no compiler needs MuJoCo's inference."""
    m, path = export_mjcf(source, tmp_path)
    text = path.read_text()
    assert 'inertiafromgeom="false"' in text or "inertiafromgeom" not in text
    _same_model(m, mujoco.MjModel.from_xml_path(str(path)))


def test_unnamed_elements_take_model_info_names_and_fused_bodies_stay_fused(tmp_path: Path) -> None:
    src = tmp_path / "src.xml"
    src.write_text(UNNAMED)
    m, path = export_mjcf(str(src), tmp_path)
    info = model_info(m)
    assert info.body_names == ("world", "body1", "body2") and info.joint_names == ("joint0", "hinge")
    again = mujoco.MjModel.from_xml_path(str(path))
    assert again.nbody == 3 and mujoco.mj_id2name(again, mujoco.mjtObj.mjOBJ_BODY, 2) == "body2"
    assert mujoco.mj_id2name(again, mujoco.mjtObj.mjOBJ_SITE, 0) == "site0"
    _same_model(m, again)


def test_compiled_model_is_written_again_only_if_written_before(tmp_path: Path) -> None:
    m, _ = export_mjcf("cartpole", tmp_path)
    (tmp_path / "again").mkdir()
    same, path = export_mjcf(mujoco.MjModel.from_binary_path("m.mjb", {"m.mjb": _mjb(m)}), tmp_path / "again")
    _same_model(m, mujoco.MjModel.from_xml_path(str(path)))
    other = compile_model("cartpole")
    other.opt.timestep = 0.0123  # the same names and tree, another model
    with pytest.raises(ModelLoadError, match="cannot be written back as MJCF"):
        export_mjcf(other, tmp_path)
    with pytest.raises(InvalidArgumentError, match="folder"):
        export_mjcf("cartpole", tmp_path / "missing")


def _mjb(m: mujoco.MjModel) -> bytes:
    from simbackend.models import model_to_bytes

    return model_to_bytes(m)
