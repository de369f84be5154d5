"""Model sources a real user brings: URDF robots with package:// meshes, added actuators, clear errors.

The URDFs and meshes (binary STL, OBJ) are written by the tests, laid out as a
ROS package: ``<ws>/src/my_robot/{urdf/arm.urdf, meshes/*.stl|obj}``.
"""

from __future__ import annotations

import struct
from pathlib import Path

import mujoco
import numpy as np
import pytest

from simbackend.errors import ModelLoadError
from simbackend.models import ActuatorSpec, compile_model, model_info
from simbackend.registry import available_backends, make_backend

ARM_URDF = """<?xml version="1.0"?>
<robot name="my_robot">
  <link name="base_link">
    <inertial><mass value="2.0"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><mesh filename="{base}"/></geometry></collision>
  </link>
  <joint name="shoulder" type="revolute">
    <parent link="base_link"/><child link="upper"/><origin xyz="0 0 0.2"/><axis xyz="0 0 1"/>
    <limit lower="-1.5" upper="1.5" effort="50" velocity="3"/>
  </joint>
  <link name="upper">
    <inertial><origin xyz="0 0 0.15"/><mass value="1.0"/>
      <inertia ixx="0.008" iyy="0.008" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 0.15"/><geometry><box size="0.05 0.05 0.3"/></geometry></collision>
  </link>
  <joint name="elbow" type="continuous">
    <parent link="upper"/><child link="fore"/><origin xyz="0 0 0.3"/><axis xyz="0 1 0"/>
  </joint>
  <link name="fore">
    <inertial><origin xyz="0.1 0 0"/><mass value="0.5"/>
      <inertia ixx="0.0005" iyy="0.002" izz="0.002" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><mesh filename="{fore}"/></geometry></collision>
  </link>
  <joint name="slide" type="prismatic">
    <parent link="fore"/><child link="finger"/><origin xyz="0.2 0 0"/><axis xyz="1 0 0"/>
    <limit lower="0" upper="0.1" effort="20" velocity="1"/>
  </joint>
  <link name="finger">
    <inertial><mass value="0.1"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial>
  </link>
  <joint name="tool_joint" type="fixed">
    <parent link="finger"/><child link="tool0"/><origin xyz="0.05 0 0"/>
  </joint>
  <link name="tool0"/>
</robot>
"""

PACKAGE_URIS = {"base": "package://my_robot/meshes/base.stl", "fore": "package://my_robot/meshes/fore.obj"}
LINKS = ("base_link", "upper", "fore", "finger", "tool0")


#: the 12 outward triangles of a box whose 8 corners are ordered x, then y, then z (``_box_corners``)
BOX_FACES = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1),
             (2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3)]


def _box_corners(half: tuple[float, float, float], offset=(0.0, 0.0, 0.0)) -> np.ndarray:
    hx, hy, hz = half
    return np.array([[x, y, z] for x in (-hx, hx) for y in (-hy, hy) for z in (-hz, hz)]) + np.asarray(offset)


def _box_triangles(half: tuple[float, float, float]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    v = _box_corners(half)
    return [(v[a], v[b], v[c]) for a, b, c in BOX_FACES]


def write_stl(path: Path, half: tuple[float, float, float]) -> None:
    """A binary STL box of half sizes ``half``."""
    tris = _box_triangles(half)
    data = bytearray(b"simbackend test box".ljust(80, b" ")) + struct.pack("<I", len(tris))
    for a, b, c in tris:
        n = np.cross(b - a, c - a)
        data += struct.pack("<12fH", *(n / np.linalg.norm(n)), *a, *b, *c, 0)
    path.write_bytes(bytes(data))


def write_obj(path: Path, half: tuple[float, float, float], offset: tuple[float, float, float]) -> None:
    """A Wavefront OBJ box of half sizes ``half`` centred at ``offset``."""
    lines = [f"v {x} {y} {z}" for x, y, z in _box_corners(half, offset)]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in BOX_FACES]
    path.write_text("\n".join(lines) + "\n")


def make_package(root: Path, name: str = "my_robot", uris: dict | None = None, manifest: str | None = None) -> Path:
    """``root/name`` laid out as a ROS package with the arm URDF; returns the URDF path."""
    pkg = root / name
    (pkg / "meshes").mkdir(parents=True)
    (pkg / "urdf").mkdir()
    write_stl(pkg / "meshes" / "base.stl", (0.1, 0.1, 0.05))
    write_obj(pkg / "meshes" / "fore.obj", (0.1, 0.02, 0.02), (0.1, 0.0, 0.0))
    if manifest:
        (pkg / "package.xml").write_text(f"<package format='2'><name>{manifest}</name></package>")
    urdf = pkg / "urdf" / "arm.urdf"
    urdf.write_text(ARM_URDF.format(**(uris or PACKAGE_URIS)))
    return urdf


def _parent(m: mujoco.MjModel, body: str) -> str:
    info = model_info(m)
    return info.body_names[int(info.body_parent[info.body_names.index(body)])]


# ----------------------------------------------------------------------------
# URDF: links kept, package:// resolved
# ----------------------------------------------------------------------------

def test_urdf_keeps_every_link_with_its_parent(tmp_path: Path) -> None:
    m = compile_model(make_package(tmp_path / "ws" / "src"))
    names = model_info(m).body_names
    for link in LINKS:
        assert link in names, f"link {link!r} lost: {names}"
    assert [_parent(m, b) for b in LINKS] == ["world", "base_link", "upper", "fore", "finger"]
    assert model_info(m).joint_names == ("shoulder", "elbow", "slide")


def test_fuse_static_is_the_users_choice(tmp_path: Path) -> None:
    urdf = make_package(tmp_path)
    names = model_info(compile_model(urdf, fuse_static=True)).body_names
    assert "tool0" not in names and "base_link" not in names and "upper" in names
    # MJCF: the file's own setting unless told; fuse_static=True fuses there too
    mjcf = tmp_path / "welded.xml"
    mjcf.write_text('<mujoco><worldbody><body name="a"><joint type="hinge"/><geom size=".1"/>'
                    '<body name="fixed" pos="0 0 1"><geom size=".1"/></body></body></worldbody></mujoco>')
    assert "fixed" in model_info(compile_model(mjcf)).body_names
    assert "fixed" not in model_info(compile_model(mjcf, fuse_static=True)).body_names


def test_package_uris_resolve_from_the_files_ancestors(tmp_path: Path) -> None:
    m = compile_model(make_package(tmp_path / "ws" / "src"))
    assert m.nmesh == 2
    verts = [int(m.mesh_vertnum[k]) for k in range(m.nmesh)]
    assert verts == [8, 8]
    # the STL box keeps its size: the base mesh's geom is 0.2 x 0.2 x 0.1
    g = int(np.flatnonzero(m.geom_type == mujoco.mjtGeom.mjGEOM_MESH)[0])
    np.testing.assert_allclose(np.sort(m.geom_aabb[g, 3:]), [0.05, 0.1, 0.1], atol=1e-6)


def test_package_dirs_option(tmp_path: Path) -> None:
    """A URDF outside its package (copied elsewhere) finds it through package_dirs."""
    urdf = make_package(tmp_path / "ws" / "src")
    loose = tmp_path / "elsewhere" / "arm.urdf"
    loose.parent.mkdir()
    loose.write_text(urdf.read_text())
    with pytest.raises(ModelLoadError) as err:
        compile_model(loose)
    msg = str(err.value)
    assert "package://my_robot/meshes/base.stl" in msg and str(loose) in msg and "\n" not in msg
    assert "package_dirs" in msg
    assert compile_model(loose, package_dirs=tmp_path / "ws" / "src").nmesh == 2        # a folder of packages
    assert compile_model(loose, package_dirs=[tmp_path / "ws" / "src" / "my_robot"]).nmesh == 2  # the package


def test_package_found_by_its_manifest_name_and_ros_package_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package folder named differently from the package (package.xml says the name), and ROS_PACKAGE_PATH."""
    urdf = make_package(tmp_path / "src", name="my_robot_description", manifest="my_robot")
    assert compile_model(urdf).nmesh == 2
    loose = tmp_path / "loose.urdf"
    loose.write_text(urdf.read_text())
    monkeypatch.setenv("ROS_PACKAGE_PATH", str(tmp_path / "src"))
    assert compile_model(loose).nmesh == 2


def test_relative_and_file_uris(tmp_path: Path) -> None:
    meshes = tmp_path / "pkg" / "meshes"
    urdf = make_package(tmp_path, name="pkg", uris={"base": "../meshes/base.stl", "fore": f"file://{meshes / 'fore.obj'}"})
    assert compile_model(urdf).nmesh == 2


def test_missing_mesh_is_one_line(tmp_path: Path) -> None:
    urdf = make_package(tmp_path, uris={"base": "package://my_robot/meshes/nope.stl", "fore": "../meshes/fore.obj"})
    with pytest.raises(ModelLoadError, match="nope.stl") as err:
        compile_model(urdf)
    assert "\n" not in str(err.value) and "does not exist" in str(err.value)


# ----------------------------------------------------------------------------
# actuators
# ----------------------------------------------------------------------------

def test_position_servos_on_every_joint(tmp_path: Path) -> None:
    m = compile_model(make_package(tmp_path), actuators=[{"joints": ".*", "kind": "position", "kp": 80.0, "kv": 4.0}])
    info = model_info(m)
    assert info.actuator_names == ("shoulder", "elbow", "slide")
    assert info.actuator_kind == ("position",) * 3
    np.testing.assert_allclose(info.actuator_kp, [80, 80, 80])
    np.testing.assert_allclose(info.actuator_kv, [4, 4, 4])
    np.testing.assert_array_equal(info.actuator_joint, [0, 1, 2])
    # ctrl range: the joint's range where it is limited (the continuous elbow is not)
    np.testing.assert_allclose(info.actuator_ctrl_range, [[-1.5, 1.5], [-np.inf, np.inf], [0.0, 0.1]])


def test_mixed_specs_names_and_ranges() -> None:
    m = compile_model("double_pendulum", actuators=[
        ActuatorSpec(joints=["shoulder"], kind="position", kp=30.0, name="{joint}_servo", ctrl_range=(-1, 1)),
        {"joints": "elb.*", "kind": "velocity", "kv": 2.0, "force_range": [-3, 3], "name": "{joint}_vel"},
    ])
    info = model_info(m)
    assert info.actuator_names[-2:] == ("shoulder_servo", "elbow_vel")
    assert info.actuator_kind[-2:] == ("position", "velocity")
    np.testing.assert_allclose(info.actuator_ctrl_range[-2], [-1, 1])
    np.testing.assert_allclose(m.actuator_forcerange[-1], [-3, 3])
    # hinge ranges of an MJCF in degrees become radians in the servo's ctrl range
    mjcf = compile_model("arm7", actuators=[{"joints": ["joint1"], "kind": "position", "kp": 1.0, "name": "extra"}])
    j = model_info(mjcf).joint_names.index("joint1")
    np.testing.assert_allclose(model_info(mjcf).actuator_ctrl_range[-1], model_info(mjcf).joint_range[j])


def test_spec_source_is_not_modified() -> None:
    from simbackend.models import builtin_model_path

    spec = mujoco.MjSpec.from_file(str(builtin_model_path("pendulum")))
    before = len(spec.actuators)
    compile_model(spec, actuators=[{"joints": ".*", "kind": "motor", "name": "{joint}_extra"}])
    assert len(spec.actuators) == before


@pytest.mark.parametrize("specs, fragment", [
    ([{"joints": "nothing.*", "kind": "position", "kp": 1}], "actuators[0].joints"),
    ([{"joints": ["shoulder"], "kind": "position", "kp": 0}], "actuators[0].kp"),
    ([{"joints": ["shoulder"], "kind": "velocity"}], "actuators[0].kv"),
    ([{"joints": ["shoulder"], "kind": "spring"}], "actuators[0].kind"),
    ([{"joints": ["shouldr"], "kind": "motor"}], "shoulder"),
    ([{"joints": ".*", "kind": "motor"}, {"joints": ["elbow"], "kind": "motor", "name": "e2"}], "actuators[1].joints"),
    ([{"joints": ["elbow"], "kind": "motor", "name": "shoulder_motor"}], "actuators[0].name"),
    ([{"joints": ".*", "kind": "motor", "strength": 3}], "strength"),
    ([{"joints": "(", "kind": "motor"}], "regular expression"),
    ("motor", "actuators"),
])
def test_bad_actuator_specs(specs, fragment: str) -> None:
    with pytest.raises(ModelLoadError) as err:
        compile_model("double_pendulum", actuators=specs)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_free_joint_cannot_take_an_actuator() -> None:
    with pytest.raises(ModelLoadError, match="not a hinge or slide"):
        compile_model("box_drop", actuators=[{"joints": ["box_free"], "kind": "motor"}])


@pytest.mark.parametrize("sim", available_backends())
def test_urdf_robot_driven_by_step_on_every_backend(sim: str, tmp_path: Path) -> None:
    """The URDF arm, servos added by option, meshes from package://, reaches its targets on every backend."""
    urdf = make_package(tmp_path / "ws" / "src")
    loose = tmp_path / "arm.urdf"
    loose.write_text(urdf.read_text())
    with make_backend(sim, str(loose), 2, package_dirs=[tmp_path / "ws" / "src"],
                      actuators=[{"joints": ".*", "kind": "position", "kp": 100.0, "kv": 2.0}]) as s:
        assert set(LINKS) <= set(s.body_names)
        target = np.array([[0.5, -0.4, 0.05], [-0.3, 0.8, 0.02]])
        for _ in range(50):
            s.step(target, nsteps=10)
        np.testing.assert_allclose(s.get_dof_pos().numpy(), target, atol=0.02)
        tool = s.get_body_ids("tool0")
        assert np.isfinite(s.get_body_pos_w(tool).numpy()).all()


# ----------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------

def test_source_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="is a folder"):
        compile_model(tmp_path)
    empty = tmp_path / "empty.xml"
    empty.write_text("")
    with pytest.raises(ModelLoadError, match="empty"):
        compile_model(empty)
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco>\n<worldbody>\n<body>\n<geom type='sphere' size='-1'/>\n</body></worldbody></mujoco>")
    with pytest.raises(ModelLoadError) as err:
        compile_model(bad)
    assert "\n" not in str(err.value) and str(bad) in str(err.value)
    with pytest.raises(ModelLoadError, match="compiled mujoco.MjModel"):
        compile_model(compile_model("pendulum"), actuators=[{"joints": ".*", "kind": "motor"}])
    with pytest.raises(ModelLoadError, match="package_dirs"):
        compile_model("pendulum", package_dirs=tmp_path / "missing")
    with pytest.raises(ModelLoadError, match="fuse_static"):
        compile_model("pendulum", fuse_static="yes")
