"""Model sources a real user brings: URDF robots with package:// meshes, added actuators, clear errors.

The URDFs and meshes (binary and ASCII STL, OBJ) are written by the tests, laid out as a
ROS package: ``<ws>/src/my_robot/{urdf/arm.urdf, meshes/*.stl|obj}``.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import mujoco
import numpy as np
import pytest

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, ModelLoadError
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
BOX_FACES = [
    (0, 1, 3),
    (0, 3, 2),
    (4, 6, 7),
    (4, 7, 5),
    (0, 4, 5),
    (0, 5, 1),
    (2, 3, 7),
    (2, 7, 6),
    (0, 2, 6),
    (0, 6, 4),
    (1, 5, 7),
    (1, 7, 3),
]


def _box_corners(half: tuple[float, float, float], offset=(0.0, 0.0, 0.0)) -> np.ndarray:
    hx, hy, hz = half
    return np.array([[x, y, z] for x in (-hx, hx) for y in (-hy, hy) for z in (-hz, hz)]) + np.asarray(offset)


def _box_triangles(half: tuple[float, float, float]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    v = _box_corners(half)
    return [(v[a], v[b], v[c]) for a, b, c in BOX_FACES]


def write_stl(path: Path, half: tuple[float, float, float]) -> None:
    """A binary STL box of half sizes ``half`` (its header starts with "solid", as some exporters write)."""
    tris = _box_triangles(half)
    data = bytearray(b"solid simbackend test box".ljust(80, b" ")) + struct.pack("<I", len(tris))
    for a, b, c in tris:
        n = np.cross(b - a, c - a)
        data += struct.pack("<12fH", *(n / np.linalg.norm(n)), *a, *b, *c, 0)
    path.write_bytes(bytes(data))


def write_ascii_stl(path: Path, half: tuple[float, float, float]) -> None:
    """An ASCII STL box of half sizes ``half``."""
    lines = ["solid box"]
    for a, b, c in _box_triangles(half):
        n = np.cross(b - a, c - a) / np.linalg.norm(np.cross(b - a, c - a))
        lines += [f"  facet normal {n[0]:e} {n[1]:e} {n[2]:e}", "    outer loop"]
        lines += [f"      vertex {p[0]:e} {p[1]:e} {p[2]:e}" for p in (a, b, c)]
        lines += ["    endloop", "  endfacet"]
    path.write_text("\n".join(lines + ["endsolid box"]) + "\n")


def write_obj(path: Path, half: tuple[float, float, float], offset: tuple[float, float, float]) -> None:
    """A Wavefront OBJ box of half sizes ``half`` centred at ``offset``."""
    lines = [f"v {x} {y} {z}" for x, y, z in _box_corners(half, offset)]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in BOX_FACES]
    path.write_text("\n".join(lines) + "\n")


def make_package(
    root: Path,
    name: str = "my_robot",
    uris: dict | None = None,
    manifest: str | None = None,
    urdf_text: str = ARM_URDF,
    base_half: tuple[float, float, float] = (0.1, 0.1, 0.05),
) -> Path:
    """``root/name`` laid out as a ROS package with the arm URDF; returns the URDF path."""
    pkg = root / name
    (pkg / "meshes").mkdir(parents=True)
    (pkg / "urdf").mkdir()
    write_stl(pkg / "meshes" / "base.stl", base_half)
    write_obj(pkg / "meshes" / "fore.obj", (0.1, 0.02, 0.02), (0.1, 0.0, 0.0))
    if manifest:
        (pkg / "package.xml").write_text(f"<package format='2'><name>{manifest}</name></package>")
    urdf = pkg / "urdf" / "arm.urdf"
    urdf.write_text(urdf_text.format(**(uris or PACKAGE_URIS)))
    return urdf


def _parent(m: mujoco.MjModel, body: str) -> str:
    info = model_info(m)
    return info.body_names[int(info.body_parent[info.body_names.index(body)])]


def _mesh_geom_half_sizes(m: mujoco.MjModel) -> list[list[float]]:
    """The sorted half sizes of each mesh geom's bounding box, in geom order."""
    geoms = np.flatnonzero(m.geom_type == mujoco.mjtGeom.mjGEOM_MESH)
    return [sorted(np.round(m.geom_aabb[g, 3:], 6).tolist()) for g in geoms]


def _one_line_error(exc: type[Exception], call, *fragments: str) -> str:
    """Run ``call``, expect ``exc`` with a one-line message holding every fragment; return the message."""
    with pytest.raises(exc) as err:
        call()
    msg = str(err.value)
    assert "\n" not in msg, msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


# ----------------------------------------------------------------------------
# URDF: links kept, nothing invented
# ----------------------------------------------------------------------------


def test_urdf_keeps_every_link_with_its_parent(tmp_path: Path) -> None:
    m = compile_model(make_package(tmp_path / "ws" / "src"))
    info = model_info(m)
    for link in LINKS:
        assert link in info.body_names, f"link {link!r} lost: {info.body_names}"
    assert [_parent(m, b) for b in LINKS] == ["world", "base_link", "upper", "fore", "finger"]
    assert info.joint_names == ("shoulder", "elbow", "slide")
    assert [mujoco.mjtJoint(int(t)).name for t in info.joint_type] == ["mjJNT_HINGE", "mjJNT_HINGE", "mjJNT_SLIDE"]
    np.testing.assert_allclose(info.joint_range, [[-1.5, 1.5], [-np.inf, np.inf], [0.0, 0.1]])
    # tool0 sits 0.05 m along the finger: its own body, at its URDF pose
    data = mujoco.MjData(m)
    mujoco.mj_forward(m, data)
    np.testing.assert_allclose(data.xpos[info.body_names.index("tool0")], [0.25, 0, 0.5], atol=1e-9)


def test_fuse_static_is_the_users_choice(tmp_path: Path) -> None:
    urdf = make_package(tmp_path)
    m = compile_model(urdf, fuse_static=True)
    names = model_info(m).body_names
    assert "tool0" not in names and "base_link" not in names and _parent(m, "upper") == "world"
    # the file's own <mujoco><compiler fusestatic=...> is followed unless the option says otherwise
    asks = tmp_path / "asks_fusing.urdf"
    asks.write_text(urdf.read_text().replace("</robot>", '<mujoco><compiler fusestatic="true"/></mujoco></robot>'))
    assert "tool0" not in model_info(compile_model(asks)).body_names
    assert "tool0" in model_info(compile_model(asks, fuse_static=False)).body_names
    # MJCF: the file's own setting (MuJoCo's default: not fused) unless told
    mjcf = tmp_path / "welded.xml"
    mjcf.write_text(
        '<mujoco><worldbody><body name="a"><joint type="hinge"/><geom size=".1"/>'
        '<body name="fixed" pos="0 0 1"><geom size=".1"/></body></body></worldbody></mujoco>'
    )
    assert "fixed" in model_info(compile_model(mjcf)).body_names
    assert "fixed" not in model_info(compile_model(mjcf, fuse_static=True)).body_names


def test_links_without_inertial_get_no_mass(tmp_path: Path) -> None:
    """URDF: no <inertial> means no mass; MuJoCo's mass-from-geometry is the file's explicit choice."""
    text = ARM_URDF.replace(
        '<link name="tool0"/>',
        '<link name="tool0"><collision><geometry><box size="0.2 0.2 0.2"/></geometry></collision></link>',
    )
    m = compile_model(make_package(tmp_path / "a", urdf_text=text))
    assert m.body_mass[model_info(m).body_names.index("tool0")] == 0.0  # 8 kg at 1000 kg/m^3 if invented
    # a moving link without <inertial>: one line naming the link and both fixes
    moving = re.sub(r'(<link name="finger">)\s*<inertial>.*?</inertial>', r"\1", ARM_URDF, flags=re.S)
    moving = moving.replace(
        '</link>\n  <joint name="tool_joint"',
        '<collision><geometry><box size="0.02 0.02 0.02"/></geometry></collision></link>\n  <joint name="tool_joint"',
    )
    urdf = make_package(tmp_path / "b", urdf_text=moving)
    _one_line_error(
        ModelLoadError, lambda: compile_model(urdf), str(urdf), "'finger'", "<inertial>", 'inertiafromgeom="true"'
    )
    asks = urdf.with_name("asks.urdf")
    asks.write_text(urdf.read_text().replace("</robot>", '<mujoco><compiler inertiafromgeom="true"/></mujoco></robot>'))
    m = compile_model(asks)
    np.testing.assert_allclose(m.body_mass[model_info(m).body_names.index("finger")], 1000 * 0.02**3)


def test_visual_meshes_are_left_to_mujocos_discardvisual(tmp_path: Path) -> None:
    """Visual geometry (often COLLADA, from packages not installed) is not resolved unless the file keeps it."""
    text = ARM_URDF.replace(
        '<link name="tool0"/>',
        '<link name="tool0"><visual><geometry>'
        '<mesh filename="package://gui_only/tool.dae"/></geometry></visual></link>',
    )
    urdf = make_package(tmp_path, urdf_text=text)
    assert compile_model(urdf).nmesh == 2
    keeps = urdf.with_name("keeps_visuals.urdf")
    keeps.write_text(urdf.read_text().replace("</robot>", '<mujoco><compiler discardvisual="false"/></mujoco></robot>'))
    _one_line_error(
        ModelLoadError, lambda: compile_model(keeps), "package://gui_only/tool.dae", "no package 'gui_only'"
    )


# ----------------------------------------------------------------------------
# mesh files: package://, file://, relative; binary and ASCII STL, OBJ
# ----------------------------------------------------------------------------


def test_package_uris_resolve_from_the_files_ancestors(tmp_path: Path) -> None:
    m = compile_model(make_package(tmp_path / "ws" / "src"))
    assert m.nmesh == 2
    assert [int(m.mesh_vertnum[k]) for k in range(m.nmesh)] == [8, 8]
    # the STL box (0.2 x 0.2 x 0.1) and the OBJ box (0.2 x 0.04 x 0.04) keep their sizes
    assert _mesh_geom_half_sizes(m) == [[0.05, 0.1, 0.1], [0.02, 0.02, 0.1]]


def test_ascii_stl_reads_like_binary(tmp_path: Path) -> None:
    urdf = make_package(tmp_path, uris={"base": "../meshes/ascii.stl", "fore": "../meshes/fore.obj"})
    write_ascii_stl(urdf.parent.parent / "meshes" / "ascii.stl", (0.1, 0.1, 0.05))
    m = compile_model(urdf)
    assert int(m.mesh_vertnum[0]) == 8
    assert _mesh_geom_half_sizes(m)[0] == [0.05, 0.1, 0.1]
    broken = urdf.parent.parent / "meshes" / "broken.stl"
    broken.write_text(
        "solid x\n facet normal 0 0 1\n  outer loop\n   vertex 0 0 0\n   vertex 1 0 0\n"
        "  endloop\n endfacet\nendsolid x\n"
    )
    bad = urdf.with_name("broken.urdf")
    bad.write_text(urdf.read_text().replace("ascii.stl", "broken.stl"))
    _one_line_error(ModelLoadError, lambda: compile_model(bad), str(broken), "ASCII STL")


def test_package_dirs_option(tmp_path: Path) -> None:
    """A URDF outside its package (copied elsewhere) finds it through package_dirs."""
    urdf = make_package(tmp_path / "ws" / "src")
    loose = tmp_path / "elsewhere" / "arm.urdf"
    loose.parent.mkdir()
    loose.write_text(urdf.read_text())
    msg = _one_line_error(
        ModelLoadError,
        lambda: compile_model(loose),
        "package://my_robot/meshes/base.stl",
        str(loose),
        "no package 'my_robot'",
        "package_dirs",
    )
    assert "ROS_PACKAGE_PATH" in msg and str(loose.parent) in msg  # where it looked
    assert compile_model(loose, package_dirs=tmp_path / "ws" / "src").nmesh == 2  # a folder of packages
    (tmp_path / "ws" / "src" / "my_robot" / "my_robot").mkdir()  # a Python module named like its package
    assert compile_model(loose, package_dirs=[tmp_path / "ws" / "src" / "my_robot"]).nmesh == 2  # the package
    assert compile_model(loose, package_dirs=[str(tmp_path / "ws")]).nmesh == 2  # packages further down


def test_package_dirs_come_before_the_files_ancestors(tmp_path: Path) -> None:
    urdf = make_package(tmp_path / "ws" / "src")  # base box 0.2 x 0.2 x 0.1
    make_package(tmp_path / "overlay", base_half=(0.3, 0.3, 0.3))  # the same package, base 0.6^3
    assert _mesh_geom_half_sizes(compile_model(urdf))[0] == [0.05, 0.1, 0.1]
    assert _mesh_geom_half_sizes(compile_model(urdf, package_dirs=tmp_path / "overlay"))[0] == [0.3, 0.3, 0.3]


def test_nested_workspace_and_ignored_folders(tmp_path: Path) -> None:
    """ws/src/<repo>/<package> is found below a package_dirs entry; COLCON_IGNORE'd trees and the
    insides of other packages are not searched."""
    urdf = make_package(tmp_path / "ws" / "src" / "vendor_repo", name="robot_pkg", manifest="my_robot")
    loose = tmp_path / "arm.urdf"
    loose.write_text(urdf.read_text())
    assert compile_model(loose, package_dirs=tmp_path / "ws" / "src").nmesh == 2
    (tmp_path / "ws" / "src" / "vendor_repo" / "COLCON_IGNORE").touch()
    _one_line_error(
        ModelLoadError, lambda: compile_model(loose, package_dirs=tmp_path / "ws" / "src"), "no package 'my_robot'"
    )
    # a folder named my_robot inside another package is not that package
    other = make_package(tmp_path / "ws2", name="other_pkg", manifest="other_pkg")
    (other.parent.parent / "my_robot").mkdir()
    _one_line_error(
        ModelLoadError, lambda: compile_model(loose, package_dirs=tmp_path / "ws2"), "no package 'my_robot'"
    )


def test_package_found_by_manifest_name_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package folder named differently from the package (package.xml names it), ROS_PACKAGE_PATH, AMENT_PREFIX_PATH."""
    monkeypatch.delenv("ROS_PACKAGE_PATH", raising=False)
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    urdf = make_package(tmp_path / "src", name="my_robot_description", manifest="my_robot")
    assert compile_model(urdf).nmesh == 2
    loose = tmp_path / "loose" / "arm.urdf"
    loose.parent.mkdir()
    loose.write_text(urdf.read_text())
    _one_line_error(ModelLoadError, lambda: compile_model(loose), "no package 'my_robot'")
    monkeypatch.setenv("ROS_PACKAGE_PATH", f"{tmp_path / 'nowhere'}{os.pathsep}{tmp_path / 'src'}")
    assert compile_model(loose).nmesh == 2
    # ROS 2: an install prefix's share/<package>
    monkeypatch.delenv("ROS_PACKAGE_PATH")
    make_package(tmp_path / "install" / "share")
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "install"))
    assert compile_model(loose).nmesh == 2


def test_relative_file_uris_and_meshdir(tmp_path: Path) -> None:
    meshes = tmp_path / "pkg" / "meshes"
    urdf = make_package(
        tmp_path, name="pkg", uris={"base": "../meshes/base.stl", "fore": f"file://{meshes / 'fore.obj'}"}
    )
    assert compile_model(urdf).nmesh == 2
    # file:// URIs are percent-encoded
    spaced = tmp_path / "my meshes"
    spaced.mkdir()
    write_stl(spaced / "base.stl", (0.1, 0.1, 0.05))
    encoded = urdf.with_name("encoded.urdf")
    encoded.write_text(urdf.read_text().replace("../meshes/base.stl", f"file://{tmp_path}/my%20meshes/base.stl"))
    assert compile_model(encoded).nmesh == 2
    # the file's own meshdir: relative paths start there
    with_dir = urdf.with_name("meshdir.urdf")
    with_dir.write_text(
        ARM_URDF.format(base="base.stl", fore="fore.obj").replace(
            "</robot>", '<mujoco><compiler meshdir="../meshes"/></mujoco></robot>'
        )
    )
    assert compile_model(with_dir).nmesh == 2


def test_missing_meshes_are_one_line(tmp_path: Path) -> None:
    urdf = make_package(tmp_path, uris={"base": "package://my_robot/meshes/nope.stl", "fore": "../meshes/fore.obj"})
    _one_line_error(
        ModelLoadError, lambda: compile_model(urdf), str(urdf), "package://my_robot/meshes/nope.stl", "does not exist"
    )
    # the letter case differs (a description written on a case-insensitive filesystem)
    cased = urdf.with_name("cased.urdf")
    cased.write_text(urdf.read_text().replace("nope.stl", "BASE.STL"))
    _one_line_error(ModelLoadError, lambda: compile_model(cased), "'base.stl'", "case-sensitive")
    schemed = urdf.with_name("gazebo.urdf")
    schemed.write_text(urdf.read_text().replace("package://my_robot/meshes/nope.stl", "model://my_robot/base.stl"))
    _one_line_error(
        ModelLoadError, lambda: compile_model(schemed), "model://my_robot/base.stl", "unsupported URI scheme"
    )


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


def test_specs_by_list_and_regex_with_names_and_ranges(tmp_path: Path) -> None:
    m = compile_model(
        make_package(tmp_path),
        actuators=[
            ActuatorSpec(
                joints=["shoulder"], kind="position", kp=np.float32(30.0), name="{joint}_servo", ctrl_range=(-1, 1)
            ),
            {"joints": "elb.*", "kind": "velocity", "kv": 2, "force_range": [-3, 3], "name": "{joint}_vel"},
            {"joints": ["slide"], "kind": "motor", "gear": 50.0, "ctrl_range": np.array([-1.0, 1.0])},
        ],
    )
    info = model_info(m)
    assert info.actuator_names == ("shoulder_servo", "elbow_vel", "slide")
    assert info.actuator_kind == ("position", "velocity", "motor")
    np.testing.assert_allclose(info.actuator_kp, [30, 0, 0])
    np.testing.assert_allclose(info.actuator_kv, [0, 2, 0])
    np.testing.assert_allclose(info.actuator_ctrl_range, [[-1, 1], [-np.inf, np.inf], [-1, 1]])
    np.testing.assert_allclose(m.actuator_forcerange[1], [-3, 3])
    np.testing.assert_allclose(m.actuator_gear[:, 0], [1, 1, 50])


def test_servo_ctrl_range_follows_the_compiled_joint_range(tmp_path: Path) -> None:
    """Ranges written in degrees become radians, slide ranges stay metres, gear scales them."""
    mjcf = tmp_path / "degrees.xml"
    mjcf.write_text(
        '<mujoco><compiler angle="degree"/><worldbody><body><joint name="a" range="-90 45"/>'
        '<joint name="b" type="slide" axis="1 0 0" range="-0.2 0.3"/><joint name="c" axis="1 0 0"/>'
        '<joint name="d" axis="0 1 0" limited="false" range="-10 10"/><geom type="box" size=".1 .2 .3"/>'
        "</body></worldbody></mujoco>"
    )
    info = model_info(compile_model(mjcf, actuators=[{"kind": "position", "kp": 5.0}]))
    np.testing.assert_allclose(info.actuator_ctrl_range[:2], info.joint_range[:2])
    np.testing.assert_allclose(info.actuator_ctrl_range[:2], [[-np.pi / 2, np.pi / 4], [-0.2, 0.3]])
    assert np.isinf(info.actuator_ctrl_range[2:]).all()  # c has no range, d is explicitly unlimited
    geared = model_info(compile_model(mjcf, actuators=[{"joints": ["b"], "kind": "position", "kp": 1.0, "gear": -2.0}]))
    np.testing.assert_allclose(geared.actuator_ctrl_range, [[-0.6, 0.4]])  # gear -2 times [-0.2, 0.3]


def test_actuators_on_builtin_and_spec_sources() -> None:
    from simbackend.models import builtin_model_path

    m = compile_model("double_pendulum", actuators=[{"kind": "position", "kp": 10.0, "name": "{joint}_pos"}])
    assert model_info(m).actuator_names == ("shoulder_motor", "elbow_motor", "shoulder_pos", "elbow_pos")
    spec = mujoco.MjSpec.from_file(str(builtin_model_path("pendulum")))
    before = len(spec.actuators)
    m = compile_model(spec, actuators=[{"joints": ".*", "kind": "motor", "name": "{joint}_extra"}])
    assert model_info(m).actuator_names[-1] == "hinge_extra"
    assert len(spec.actuators) == before  # the caller's spec is not modified


@pytest.mark.parametrize(
    "specs, error, fragment",
    [
        ([{"joints": "nothing.*", "kind": "position", "kp": 1}], InvalidArgumentError, "actuators[0].joints"),
        ([{"joints": ["shoulder"], "kind": "position", "kp": 0}], InvalidArgumentError, "actuators[0].kp"),
        ([{"joints": ["shoulder"], "kind": "position"}], InvalidArgumentError, "actuators[0].kp"),
        ([{"joints": ["shoulder"], "kind": "position", "kp": 1, "kv": -1}], InvalidArgumentError, "actuators[0].kv"),
        ([{"joints": ["shoulder"], "kind": "velocity"}], InvalidArgumentError, "actuators[0].kv"),
        ([{"joints": ["shoulder"], "kind": "motor", "kp": 3}], InvalidArgumentError, "actuators[0].kp"),
        ([{"joints": ["shoulder"], "kind": "motor", "kv": 3}], InvalidArgumentError, "actuators[0].kv"),
        ([{"joints": ["shoulder"], "kind": "spring"}], InvalidArgumentError, "actuators[0].kind"),
        ([{"joints": ["shoulder"], "kind": "motor", "gear": 0}], InvalidArgumentError, "actuators[0].gear"),
        ([{"joints": ["shoulder"], "kind": "motor", "gear": "2"}], ArgumentTypeError, "actuators[0].gear"),
        (
            [{"joints": ["shoulder"], "kind": "motor", "ctrl_range": [1, -1]}],
            InvalidArgumentError,
            "actuators[0].ctrl_range",
        ),
        ([{"joints": ["shoulder"], "kind": "motor", "force_range": 5}], ArgumentTypeError, "actuators[0].force_range"),
        (
            [{"joints": ["shoulder"], "kind": "motor", "force_range": [0, float("nan")]}],
            InvalidArgumentError,
            "force_range",
        ),
        ([{"joints": ["shouldr"], "kind": "motor"}], InvalidArgumentError, "closest known names: 'shoulder'"),
        ([{"joints": [], "kind": "motor"}], InvalidArgumentError, "actuators[0].joints"),
        ([{"joints": 3, "kind": "motor"}], ArgumentTypeError, "actuators[0].joints"),
        ([{"joints": "(", "kind": "motor"}], InvalidArgumentError, "regular expression"),
        (
            [{"kind": "motor"}, {"joints": ["elbow"], "kind": "motor", "name": "e2"}],
            InvalidArgumentError,
            "actuators[1].joints: joint 'elbow' is selected by actuators[0]",
        ),
        ([{"joints": ["elbow"], "kind": "motor", "name": "shoulder_motor"}], InvalidArgumentError, "actuators[0].name"),
        ([{"kind": "motor", "name": "servo"}], InvalidArgumentError, "use {joint}"),
        ([{"kind": "motor", "name": "{joint}_{side}"}], InvalidArgumentError, "actuators[0].name"),
        ([{"kind": "motor", "name": "{joint"}], InvalidArgumentError, "actuators[0].name"),
        ([{"joints": ".*", "kind": "motor", "strength": 3}], ArgumentTypeError, "strength"),
        ("motor", ArgumentTypeError, "actuators"),
        ([3], ArgumentTypeError, "actuators[0]"),
    ],
)
def test_bad_actuator_specs(specs, error: type[Exception], fragment: str) -> None:
    _one_line_error(error, lambda: compile_model("double_pendulum", actuators=specs), fragment)


def test_free_and_ball_joints_take_no_actuator() -> None:
    free = [{"joints": ["box_free"], "kind": "motor"}]
    _one_line_error(
        InvalidArgumentError,
        lambda: compile_model("box_drop", actuators=free),
        "actuators[0].joints",
        "'box_free' is a free joint",
    )
    # a regex skips them: nothing else in box_drop
    _one_line_error(
        InvalidArgumentError,
        lambda: compile_model("box_drop", actuators=[{"kind": "motor"}]),
        "matches no hinge or slide joint",
    )


@pytest.mark.parametrize("sim", available_backends())
def test_urdf_robot_driven_by_step_on_every_backend(sim: str, tmp_path: Path) -> None:
    """The URDF arm, servos added by option, meshes from package://, reaches its targets on every backend."""
    urdf = make_package(tmp_path / "ws" / "src")
    loose = tmp_path / "arm.urdf"
    loose.write_text(urdf.read_text())
    with make_backend(
        sim,
        str(loose),
        2,
        package_dirs=[tmp_path / "ws" / "src"],
        actuators=[{"joints": ".*", "kind": "position", "kp": 100.0, "kv": 2.0}],
    ) as s:
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
    (tmp_path / "robot.urdf").write_text("<robot name='r'><link name='a'/></robot>")
    _one_line_error(ModelLoadError, lambda: compile_model(tmp_path), "is a folder", "robot.urdf")
    empty = tmp_path / "empty.xml"
    empty.write_text("")
    _one_line_error(ModelLoadError, lambda: compile_model(empty), "empty", str(empty))
    mesh = tmp_path / "part.stl"
    write_stl(mesh, (0.1, 0.1, 0.1))
    _one_line_error(ModelLoadError, lambda: compile_model(mesh), str(mesh), "not an XML file", "'.stl'")
    text = tmp_path / "notes.xml"
    text.write_text("just some notes\n")
    _one_line_error(ModelLoadError, lambda: compile_model(text), str(text), "not an XML file")
    sdf = tmp_path / "world.sdf"
    sdf.write_text("<?xml version='1.0'?><sdf version='1.6'><model name='m'/></sdf>")
    _one_line_error(ModelLoadError, lambda: compile_model(sdf), "root element <sdf>")
    xacro = tmp_path / "arm.urdf.xacro"
    xacro.write_text(
        '<robot name="r" xmlns:xacro="http://www.ros.org/wiki/xacro"><xacro:property name="l" value="1"/>'
        '<link name="a"/></robot>'
    )
    _one_line_error(ModelLoadError, lambda: compile_model(xacro), "xacro", "expand it")
    _one_line_error(
        ModelLoadError, lambda: compile_model("pendulm"), "neither a model file nor a built-in", "'pendulum'"
    )
    _one_line_error(ModelLoadError, lambda: compile_model(tmp_path / "nope.urdf"), "not found")


def test_compiler_messages_keep_the_files_line(tmp_path: Path) -> None:
    """MuJoCo's multi-line messages become one line naming the file, the element and its line in that file."""
    prolog = '<?xml version="1.0"?>\n<!-- a comment\n     over two lines -->\n'
    bad = tmp_path / "bad.xml"
    bad.write_text(
        prolog + "<mujoco>\n<worldbody>\n<body>\n<geom type='sphere' size='-1'/>\n</body></worldbody></mujoco>"
    )
    _one_line_error(ModelLoadError, lambda: compile_model(bad), str(bad), "size")
    urdf = tmp_path / "bad.urdf"
    urdf.write_text(
        prolog + '<robot name="r">\n  <link name="a"/>\n'
        '  <joint name="j" type="revolute"><parent link="a"/><child link="missing"/></joint>\n</robot>'
    )
    _one_line_error(ModelLoadError, lambda: compile_model(urdf), str(urdf), "Element 'joint', line 6")


def test_option_errors_name_the_option(tmp_path: Path) -> None:
    compiled = compile_model("pendulum")
    assert compile_model(compiled) is compiled
    _one_line_error(
        InvalidArgumentError,
        lambda: compile_model(compiled, actuators=[{"kind": "motor"}]),
        "actuators",
        "compiled mujoco.MjModel",
    )
    _one_line_error(InvalidArgumentError, lambda: compile_model(compiled, fuse_static=False), "fuse_static")
    _one_line_error(InvalidArgumentError, lambda: compile_model(compiled, package_dirs=tmp_path), "package_dirs")
    _one_line_error(
        InvalidArgumentError,
        lambda: compile_model("pendulum", package_dirs=tmp_path / "missing"),
        "package_dirs[0]",
        "not a folder",
    )
    _one_line_error(ArgumentTypeError, lambda: compile_model("pendulum", package_dirs=[tmp_path, 3]), "package_dirs[1]")
    _one_line_error(ArgumentTypeError, lambda: compile_model("pendulum", package_dirs={"a": 1}), "package_dirs")
    _one_line_error(ArgumentTypeError, lambda: compile_model("pendulum", fuse_static="yes"), "fuse_static")
