"""Pictures of any backend through MuJoCo's offscreen renderer (simbackend.playback).

The renderer draws the compiled model every backend shares, so its images are
checked against geometry computed by hand (depth of a plane and a box seen by a
fixed camera, the box's edges at the predicted pixels, points on a box's
faces), against the model's ids (segmentation), against the physics (the
pendulum's bob moves where the hinge angle says), and across engines (a SAPIEN
and a MuJoCo backend in the same state give the same picture). Video and PNG
files are read back. Every bad argument raises a contract error naming it
before anything is rendered.

Run with ``MUJOCO_GL=egl`` on a machine without a display (``make test`` does).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import mujoco  # tests may import engines (docs/architecture.md, "The dependency rule")
import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    EnvIdError,
    IndexRangeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    RenderingError,
    UnknownNameError,
    UnsupportedFeatureError,
)
from simbackend.playback.api import PlayCapabilities
from simbackend.playback.render import MAX_IMAGE_SIDE, FreeCamera, Renderer, tile_offsets
from simbackend.playback.video import write_png, write_video

REPO = Path(__file__).resolve().parents[1]
W, H = 320, 240

# A fixed camera 3 m above the floor looking straight down (image x = world x, image up = world y),
# fovy 60 deg; a 0.4 x 0.4 x 1.0 box standing on the floor at x = 0.3 (top face at z = 1).
SCENE_XML = """
<mujoco>
  <worldbody>
    <light pos="0 0 5" dir="0 0 -1"/>
    <camera name="top" pos="0 0 3" xyaxes="1 0 0 0 1 0" fovy="60"/>
    <camera name="ortho" pos="0 0 3" xyaxes="1 0 0 0 1 0" fovy="2" projection="orthographic"/>
    <geom name="floor" type="plane" size="5 5 0.1" rgba="0.5 0.5 0.5 1"/>
    <body name="b" pos="0.3 0 0.5">
      <freejoint/>
      <geom name="box" type="box" size="0.2 0.2 0.5" rgba="0.9 0.1 0.1 1"/>
    </body>
  </worldbody>
</mujoco>"""
F = (H / 2) / math.tan(math.radians(30))  # focal length in pixels of camera "top"

# Ids: geoms floor 0, box 1, hidden 2 (group 3: not drawn, so scene indices differ from geom ids),
# ball 3, ball_cap 4; bodies world 0, crate 1, pole 2 (ball and ball_cap); a tendon between two sites
# of the world body (drawn, but not a geom); a site above the ball (never drawn).
SEG_XML = """
<mujoco>
  <worldbody>
    <light pos="0 0 5" dir="0 0 -1"/>
    <camera name="top" pos="0 0 3" xyaxes="1 0 0 0 1 0" fovy="60"/>
    <geom name="floor" type="plane" size="0.8 0.8 0.1" rgba="0.5 0.5 0.5 1"/>
    <site name="s1" pos="-0.6 0.5 0.5" size="0.01"/>
    <site name="s2" pos="0.6 0.5 0.5" size="0.01"/>
    <body name="crate" pos="0.4 -0.3 0.2">
      <geom name="box" type="box" size="0.1 0.1 0.2" rgba="0 0 1 1"/>
      <geom name="hidden" type="sphere" pos="0 0 0.3" size="0.05" group="3"/>
    </body>
    <body name="pole" pos="-0.4 -0.3 0.2">
      <geom name="ball" type="sphere" size="0.1" rgba="0 1 0 1"/>
      <geom name="ball_cap" type="sphere" pos="0 0.2 0" size="0.06" rgba="0 1 1 1"/>
      <site name="marker" pos="0 0 0.15" size="0.05"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="rope" width="0.03" rgba="1 1 0 1"><site site="s1"/><site site="s2"/></spatial>
  </tendon>
</mujoco>"""


def _spec(xml: str):
    return mujoco.MjSpec.from_string(xml)


@pytest.fixture(scope="module")
def scene():
    model = mujoco.MjModel.from_xml_string(SCENE_XML)
    with Renderer(model, W, H) as r:
        yield model, r


@pytest.fixture(scope="module")
def scene_sim():
    sim = make_backend("mujoco", _spec(SCENE_XML), num_envs=2)
    yield sim
    sim.close()


@pytest.fixture(scope="module")
def pendulum():
    sim = make_backend("mujoco", "pendulum", num_envs=4)
    yield sim
    sim.close()


def _components(mask: np.ndarray) -> list[np.ndarray]:
    """4-connected components of a boolean image, as (k, 2) arrays of (row, col)."""
    seen = np.zeros_like(mask, bool)
    out = []
    for r0, c0 in zip(*np.nonzero(mask)):
        if seen[r0, c0]:
            continue
        stack, pix = [(r0, c0)], []
        seen[r0, c0] = True
        while stack:
            r, c = stack.pop()
            pix.append((r, c))
            for rr, cc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if 0 <= rr < mask.shape[0] and 0 <= cc < mask.shape[1] and mask[rr, cc] and not seen[rr, cc]:
                    seen[rr, cc] = True
                    stack.append((rr, cc))
        out.append(np.array(pix))
    return out


def _project(intr: np.ndarray, c2w: np.ndarray, p: np.ndarray) -> np.ndarray:
    """(col, row) of world point p, OpenCV pixel coordinates (pixel centres at integers)."""
    rel = np.linalg.inv(c2w) @ np.append(p, 1.0)
    x, y, z = rel[0], -rel[1], -rel[2]  # GL camera frame -> OpenCV's (y down, z forward)
    return np.array([intr[0, 0] * x / z + intr[0, 2], intr[1, 1] * y / z + intr[1, 2]])


# ----------------------------------------------------------------------
# depth, segmentation, cameras
# ----------------------------------------------------------------------
def test_depth_of_a_known_scene_matches_the_geometry(scene) -> None:
    model, r = scene
    out = r.render(model.qpos0[None], "top", modes=("depth", "segmentation", "rgb"))
    assert out["depth"].shape == (1, H, W, 1) and out["depth"].dtype == torch.float32
    assert out["rgb"].shape == (1, H, W, 3) and out["rgb"].dtype == torch.uint8
    depth = out["depth"][0, ..., 0].numpy()
    seg = out["segmentation"][0, ..., 0].numpy()
    floor, box = seg == 0, seg == 1
    # z-depth: the floor, parallel to the image plane, is 3 m away at every pixel (the distance along
    # each pixel's ray would be up to 1.25 x that in the corners)
    assert floor.sum() > 0.8 * H * W
    np.testing.assert_allclose(depth[floor], 3.0, atol=2e-3)
    assert abs(depth[0, 0] - 3.0) < 2e-3 and abs(depth[H - 1, W - 1] - 3.0) < 2e-3
    # the box's top face (z = 1) is 2 m away
    np.testing.assert_allclose(depth[120, 185:205], 2.0, atol=2e-3)
    # the box's silhouette on the centre row: the left face (x = 0.1) seen down to the floor,
    # u = cx + F x / z, from u(0.1 at z-depth 3) to u(0.5 at z-depth 2) (the right face faces away)
    cols = np.flatnonzero(box[120])
    left, right = W / 2 + F * 0.1 / 3, W / 2 + F * 0.5 / 2
    assert abs(cols[0] + 0.5 - left) <= 1.5 and abs(cols[-1] + 0.5 - right) <= 1.5, (cols[[0, -1]], left, right)
    # the left face, slanted in the image: its z-depth at column c is F * 0.1 / (u - cx)
    for c in (168, 169):
        u = c + 0.5 - W / 2
        assert abs(depth[120, c] - F * 0.1 / u) < 5e-3, (c, depth[120, c], F * 0.1 / u)
    # the top face spans y in [-0.2, 0.2] at z-depth 2: rows cy -+ F * 0.2 / 2
    rows = np.flatnonzero(box[:, 190])
    assert abs(rows[0] + 0.5 - (H / 2 - F * 0.1)) <= 1.5 and abs(rows[-1] + 0.5 - (H / 2 + F * 0.1)) <= 1.5
    # the box is drawn in its colour: red
    red = out["rgb"][0].numpy()[box]
    assert red[:, 0].mean() > 2 * red[:, 1].mean()


def test_camera_params_of_a_fixed_camera(scene) -> None:
    model, r = scene
    p = r.camera_params(np.stack([model.qpos0, model.qpos0]), "top")
    assert p["intrinsic_cv"].shape == (2, 3, 3) and p["cam2world_gl"].shape == (2, 4, 4)
    assert not p["orthographic"]
    np.testing.assert_allclose(
        p["intrinsic_cv"][0].numpy(), [[F, 0, W / 2 - 0.5], [0, F, H / 2 - 0.5], [0, 0, 1]], rtol=1e-5
    )
    np.testing.assert_allclose(
        p["cam2world_gl"][1].numpy(), [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 3], [0, 0, 0, 1]], atol=1e-6
    )


def test_orthographic_depth_and_edges(scene) -> None:
    model, r = scene
    out = r.render(model.qpos0[None], "ortho", modes=("depth", "segmentation"))
    depth, seg = out["depth"][0, ..., 0].numpy(), out["segmentation"][0, ..., 0].numpy()
    np.testing.assert_allclose(depth[seg == 0], 3.0, atol=2e-3)
    np.testing.assert_allclose(depth[seg == 1], 2.0, atol=2e-3)
    # 2 m of view height over 240 rows: the box's top spans x in [0.1, 0.5] at 120 px/m, at any depth
    cols = np.flatnonzero(seg[120] == 1)
    assert abs(cols[0] + 0.5 - (W / 2 + 0.1 * H / 2)) <= 1.5 and abs(cols[-1] + 0.5 - (W / 2 + 0.5 * H / 2)) <= 1.5


def test_segmentation_ids_geoms_bodies_and_background() -> None:
    model = mujoco.MjModel.from_xml_string(SEG_XML)
    with Renderer(model, W, H) as r:
        q = np.zeros((1, 0))
        geom = r.render(q, "top", modes=("segmentation", "depth"))
        body = r.render(q, "top", modes="segmentation", segmentation="body")["segmentation"][0, ..., 0].numpy()
    seg, depth = geom["segmentation"][0, ..., 0].numpy(), geom["depth"][0, ..., 0].numpy()
    assert seg.dtype == np.int32 and body.dtype == np.int32

    def px(x, y, z):  # pixel (row, col) of a world point seen by "top"
        return int(H / 2 - F * y / (3 - z)), int(W / 2 + F * x / (3 - z))

    assert seg[px(0.4, -0.3, 0.4)] == 1 and body[px(0.4, -0.3, 0.4)] == 1  # box / crate
    assert seg[px(-0.4, -0.1, 0.26)] == 4 and body[px(-0.4, -0.1, 0.26)] == 2  # ball_cap / pole
    assert seg[px(-0.4, -0.3, 0.3)] == 3 and body[px(-0.4, -0.3, 0.3)] == 2  # ball / pole
    assert seg[px(0.0, 0.0, 0.0)] == 0 and body[px(0.0, 0.0, 0.0)] == 0  # floor / world
    assert set(np.unique(seg)) == {-1, 0, 1, 3, 4}
    assert set(np.unique(body)) == {-1, 0, 1, 2}
    # background: outside the 1.6 m floor; nothing there, so no depth
    assert seg[0, 0] == -1 and body[0, 0] == -1 and np.isinf(depth[0, 0])
    # the tendon (radius 0.03 at z = 0.5) is drawn, but is not a geom: -1 with a finite depth
    r_, c_ = px(0.0, 0.5, 0.5)
    assert seg[r_, c_] == -1 and body[r_, c_] == -1 and 2.46 < depth[r_, c_] < 2.5, depth[r_, c_]
    # the site "marker" (radius 0.05, 0.15 above the ball's centre) is not drawn: the ball is seen
    assert abs(depth[px(-0.4, -0.3, 0.3)] - 2.7) < 5e-3


def test_free_camera_tracks_a_body(scene) -> None:
    model, r = scene
    q = np.stack([model.qpos0, model.qpos0])
    q[1, :3] += (0.7, -0.4, 0.0)  # the box moved
    cam = FreeCamera(lookat=(0, 0, 0.5), distance=3.0, azimuth=60, elevation=-50, track_body="b")
    seg = r.render(q, cam, modes="segmentation")["segmentation"][..., 0].numpy()
    box = seg == 1
    assert box[0].sum() > 500
    assert (box[0] != box[1]).sum() <= 0.01 * box[0].sum()  # the camera moved with the box
    still = r.render(q, replace(cam, track_body=None), modes="segmentation")["segmentation"][..., 0].numpy()
    assert (still[0] == 1).sum() > 500 and not np.array_equal(still[0] == 1, still[1] == 1)


# ----------------------------------------------------------------------
# through the contract, on every engine
# ----------------------------------------------------------------------
def test_pendulum_bob_moves_where_the_hinge_angle_says(pendulum) -> None:
    sim = pendulum
    angles = torch.tensor([[-0.6], [0.0], [0.6], [0.3]])
    sim.set_state(None, angles)
    cam = FreeCamera(lookat=(0, 0, 0.5), distance=3.0, azimuth=90, elevation=0)  # looks along +y: +x is right
    images = sim.get_camera_images({"side": cam}, modes=("rgb", "segmentation"))["side"]
    rgb, seg = images["rgb"].numpy(), images["segmentation"][..., 0].numpy()
    bob = sim.get_geom_ids("bob").item()
    params = sim._playback.renderer(W, H).camera_params(sim.get_qpos(), cam)
    cols, rows = [], []
    for i, theta in enumerate(angles[:, 0].tolist()):
        assert rgb[i].std() > 5, "blank frame"
        mask = seg[i] == bob
        assert mask.sum() > 30
        r, c = np.nonzero(mask)
        cols.append(c.mean())
        rows.append(r.mean())
        # the bob's centre (-sin(theta), 0, 1 - cos(theta)) projects onto its blob's centroid
        tip = np.array([-math.sin(theta), 0.0, 1.0 - math.cos(theta)])
        u, v = _project(params["intrinsic_cv"][i].numpy().astype(float), params["cam2world_gl"][i].numpy(), tip)
        assert abs(c.mean() - u) < 1.5 and abs(r.mean() - v) < 1.5, (theta, c.mean(), r.mean(), u, v)
        # the pixels of the bob are its colour (0.8, 0.2, 0.2)
        assert rgb[i][mask][:, 0].mean() > 2 * rgb[i][mask][:, 1].mean()
    # theta -0.6 -> bob right of the pivot, 0.6 -> left; swung bobs are higher (smaller row)
    assert cols[0] > cols[1] > cols[3] > cols[2]
    assert rows[0] < rows[1] and rows[2] < rows[1] and abs(rows[0] - rows[2]) < 1.0
    assert not np.array_equal(rgb[0], rgb[2])
    # env ids pick rows, in the order given
    again = sim.get_camera_images({"side": cam}, env_ids=[2, 0], modes="rgb")["side"]["rgb"].numpy()
    np.testing.assert_array_equal(again, rgb[[2, 0]])


def test_sapien_and_mujoco_in_the_same_state_give_the_same_image() -> None:
    pytest.importorskip("sapien")
    mj = make_backend("mujoco", "arm7", num_envs=2)
    sp = make_backend("sapien", "arm7", num_envs=2)
    try:
        q = mj.get_keyframe_qpos("home").expand(2, -1).clone()
        q[1, :7] += torch.linspace(-0.4, 0.4, 7)
        q[1, 9:12] += torch.tensor([0.05, -0.1, 0.0])  # the cube moved (free joint after 7 + 2 finger joints)
        mj.set_state(None, q)
        sp.set_state(None, q)
        a, b = mj.render(), sp.render()
        assert a.shape == (2, H, W, 3) and a.dtype == torch.uint8 and b.device == sp.device
        diff = (a.int() - b.int()).abs()
        assert diff.max() <= 2 and (diff > 0).float().mean() < 1e-3, (diff.max(), (diff > 0).float().mean())
        assert (a[0] != a[1]).any(dim=-1).float().mean() > 0.01  # the two states differ in the picture
        seg_a = mj.get_camera_images("free", modes="segmentation", segmentation="body")["free"]["segmentation"]
        seg_b = sp.get_camera_images("free", modes="segmentation", segmentation="body")["free"]["segmentation"]
        assert (seg_a != seg_b).float().mean() < 1e-3
        # a tiled view of both envs draws both
        assert not torch.equal(mj.render(tile=True), mj.render(env_ids=0)[0])
    finally:
        mj.close()
        sp.close()


def test_tiled_view_places_each_env_at_its_grid_offset(pendulum) -> None:
    sim = pendulum
    angles = torch.tensor([[0.0], [1.0], [-1.0], [0.5]])
    sim.set_state(None, angles)
    spacing = 2.5
    cam = FreeCamera(lookat=(1.25, 1.25, 0.3), distance=7.0, azimuth=90, elevation=-60)
    r = sim._playback.renderer(W, H)
    tiled = r.render_tiled(sim.get_qpos(), cam, modes=("rgb", "segmentation"), spacing=spacing)
    assert tiled["rgb"].shape == (H, W, 3) and tiled["segmentation"].shape == (H, W, 1)
    seg = tiled["segmentation"][..., 0].numpy()
    bob = sim.get_geom_ids("bob").item()
    blobs = _components(seg == bob)
    assert len(blobs) == 4, [len(b) for b in blobs]
    params = r.camera_params(sim.get_qpos()[:1], cam)
    intr, c2w = params["intrinsic_cv"][0].numpy().astype(float), params["cam2world_gl"][0].numpy()
    offsets = tile_offsets(4, spacing)
    np.testing.assert_allclose(offsets, [[0, 0, 0], [2.5, 0, 0], [0, 2.5, 0], [2.5, 2.5, 0]])
    centroids = np.array([b.mean(0) for b in blobs])  # (row, col)
    for k, theta in enumerate(angles[:, 0].tolist()):
        tip = np.array([-math.sin(theta), 0.0, 1.0 - math.cos(theta)]) + offsets[k]
        u, v = _project(intr, c2w, tip)
        nearest = np.min(np.hypot(centroids[:, 1] - u, centroids[:, 0] - v))
        assert nearest < 2.0, (k, u, v, centroids)
    # through the contract: one picture of the chosen envs
    picture = sim.render(env_ids=[0, 1, 2], tile=True, spacing=spacing)
    assert picture.shape == (H, W, 3) and picture.float().std() > 1


def test_tiled_floor_is_drawn_once_and_covers_every_env() -> None:
    xml = """<mujoco><worldbody><light pos="0 0 4" dir="0 0 -1"/>
      <geom name="floor" type="plane" size="0.5 0.5 0.1" rgba="0.4 0.4 0.4 1"/>
      <body name="ball" pos="0 0 0.2"><freejoint/><geom name="ball" size="0.1" rgba="1 0 0 1"/></body>
      </worldbody></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    q = np.tile(model.qpos0, (9, 1))
    cam = FreeCamera(lookat=(1.5, 1.5, 0), distance=8.0, azimuth=90, elevation=-90)  # top-down on the 3 x 3 grid
    with Renderer(model, W, H) as r:
        seg = r.render_tiled(q, cam, modes="segmentation", spacing=1.5)["segmentation"][..., 0].numpy()
        n_floor = sum(
            1 for g in r._scene.geoms[: r._scene.ngeom] if g.objid == 0 and g.type == mujoco.mjtGeom.mjGEOM_PLANE
        )
        params = r.camera_params(q[:1], cam)
    intr, c2w = params["intrinsic_cv"][0].numpy().astype(float), params["cam2world_gl"][0].numpy()
    assert len(_components(seg == 1)) == 9
    # the 1 m floor repeated edge to edge: 4 x 4 tiles cover [-0.5, 3.5]^2, one plane each (not 9 overlapping)
    assert n_floor == 16
    for x, y in ((0.75, 0.75), (2.25, 0.0), (3.4, 3.4), (-0.4, 3.0)):  # between and beyond the envs
        u, v = _project(intr, c2w, np.array([x, y, 0.0]))
        assert seg[int(round(v)), int(round(u))] == 0, (x, y)
    u, v = _project(intr, c2w, np.array([3.7, 1.5, 0.0]))  # beyond the tiles: background
    assert seg[int(round(v)), int(round(u))] == -1


def test_point_cloud_lies_on_the_box_faces_in_the_world_frame(tmp_path: Path) -> None:
    xml = """<mujoco><worldbody><light pos="0 0 4" dir="0 0 -1"/>
      <body name="crate"><freejoint/><geom name="box" type="box" size="0.2 0.3 0.4" rgba="0.9 0.2 0.1 1"/></body>
      </worldbody></mujoco>"""
    sim = make_backend("mujoco", _spec(xml), num_envs=2)
    try:
        half = np.array([0.2, 0.3, 0.4])
        yaw = [0.5, -0.3]
        q = torch.zeros(2, 7)
        q[:, :3] = torch.tensor([[0.1, -0.2, 0.5], [-0.3, 0.2, 0.6]])
        q[:, 3] = torch.cos(torch.tensor(yaw) / 2)
        q[:, 6] = torch.sin(torch.tensor(yaw) / 2)
        sim.set_state(None, q)
        cams = {
            "west": FreeCamera(lookat=(0, 0, 0.5), distance=2.0, azimuth=0, elevation=-30),  # from -x
            "east": FreeCamera(lookat=(0, 0, 0.5), distance=2.0, azimuth=180, elevation=-30),
        }  # from +x
        w, h = 96, 72
        pc = sim.get_point_cloud(cams, width=w, height=h)
        n, p = 2, 2 * w * h
        assert pc["xyz"].shape == (n, p, 3) and pc["xyz"].dtype == torch.float32
        assert pc["rgb"].shape == (n, p, 3) and pc["rgb"].dtype == torch.uint8
        assert pc["segmentation"].shape == (n, p) and pc["valid"].shape == (n, p) and pc["valid"].dtype == torch.bool
        images = sim.get_camera_images(cams, modes=("depth", "segmentation"), width=w, height=h)
        for i in range(n):
            valid, xyz, seg = pc["valid"][i].numpy(), pc["xyz"][i].numpy().astype(float), pc["segmentation"][i].numpy()
            # invalid exactly where nothing was hit; their xyz is 0
            depth = np.concatenate([images[c]["depth"][i].reshape(-1).numpy() for c in cams])
            np.testing.assert_array_equal(valid, np.isfinite(depth))
            assert 0.05 < valid.mean() < 0.9 and (xyz[~valid] == 0).all()
            np.testing.assert_array_equal(seg[valid], 0)
            np.testing.assert_array_equal(seg[~valid], -1)
            # into the box frame: every point on the surface, within 3 mm
            c, s = math.cos(yaw[i]), math.sin(yaw[i])
            rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
            local = (xyz[valid] - q[i, :3].numpy()) @ rot
            surface = np.max(np.abs(local) - half, axis=1)
            assert np.abs(surface).max() < 3e-3, np.abs(surface).max()
            # fused: the west camera sees the -x side of the box, the east camera the +x side
            west, east = local[: valid[: w * h].sum()], local[valid[: w * h].sum() :]
            assert len(west) > 200 and len(east) > 200
            assert west[:, 0].mean() < -0.05 and east[:, 0].mean() > 0.05
            rgb = pc["rgb"][i].numpy()[valid]
            assert rgb[:, 0].mean() > 2 * rgb[:, 2].mean()  # the box's colour
    finally:
        sim.close()


# ----------------------------------------------------------------------
# video and PNG
# ----------------------------------------------------------------------
def test_video_and_png_round_trip(tmp_path: Path, pendulum) -> None:
    import imageio

    sim = pendulum
    frames = []
    for k in range(12):
        sim.set_state(None, torch.full((4, 1), 0.1 * k))
        # odd sizes: padded to 66 x 50; undressed, so that frames differ by more than the codec's loss
        frames.append(sim.render(env_ids=0, width=65, height=49, dress=False)[0])
    path = tmp_path / "pendulum.mp4"
    assert write_video(path, iter(frames), fps=25, progress=True, total=12) == 12
    reader = imageio.get_reader(str(path), format="FFMPEG")
    meta = reader.get_meta_data()
    back = [f for f in reader]
    reader.close()
    assert len(back) == 12 and back[0].shape == (50, 66, 3)
    assert meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p") and meta["fps"] == 25
    # lossy, but the pictures are the ones written (and in order)
    written = np.stack([f.numpy() for f in frames]).astype(int)
    for k in range(12):
        err = np.abs(back[k][:49, :65].astype(int)[None] - written).mean(axis=(1, 2, 3))
        assert err[k] < 4 and int(np.argmin(err)) == k, (k, err)
    # PNG: exact
    png = write_png(tmp_path / "frame.png", frames[3])
    import imageio.v3 as iio

    np.testing.assert_array_equal(iio.imread(png), frames[3].numpy())


def test_video_errors_name_the_argument_and_leave_no_file(tmp_path: Path) -> None:
    frame = np.zeros((8, 10, 3), np.uint8)
    with pytest.raises(InvalidArgumentError, match="path: expected a file name ending in .mp4"):
        write_video(tmp_path / "a.avi", [frame], progress=False)
    with pytest.raises(InvalidArgumentError, match="path: folder .* does not exist"):
        write_video(tmp_path / "missing" / "a.mp4", [frame], progress=False)
    with pytest.raises(InvalidArgumentError, match="frames: no frames"):
        write_video(tmp_path / "empty.mp4", [], progress=False)
    assert not (tmp_path / "empty.mp4").exists()
    with pytest.raises(InputShapeError, match=r"frames\[2\]: expected shape \(8, 10, 3\), got \(8, 12, 3\)"):
        write_video(tmp_path / "sizes.mp4", [frame, frame, np.zeros((8, 12, 3), np.uint8)], progress=False)
    assert not (tmp_path / "sizes.mp4").exists()
    with pytest.raises(InputDTypeError, match=r"frames\[0\]: expected uint8"):
        write_video(tmp_path / "f.mp4", [frame.astype(np.float32)], progress=False)
    with pytest.raises(InvalidArgumentError, match="fps"):
        write_video(tmp_path / "f.mp4", [frame], fps=0, progress=False)
    with pytest.raises(InvalidArgumentError, match="path: expected a file name ending in .png"):
        write_png(tmp_path / "a.jpg", frame)
    with pytest.raises(InputShapeError, match="frame: expected shape"):
        write_png(tmp_path / "a.png", np.zeros((8, 10, 4), np.uint8))


# ----------------------------------------------------------------------
# capabilities, bad input, life cycle
# ----------------------------------------------------------------------
def test_play_capabilities(pendulum, monkeypatch) -> None:
    caps = pendulum.get_play_capabilities()
    assert isinstance(caps, PlayCapabilities)
    assert caps.renderers == ("mujoco",) and caps.cameras == ("free",) and caps.tiled and caps.video
    assert caps.camera_modes == ("rgb", "depth", "segmentation", "point_cloud") and dict(caps.absent) == {}
    sim = make_backend("mujoco", _spec(SCENE_XML), num_envs=1)
    try:
        assert sim.get_play_capabilities().cameras == ("top", "ortho", "free")
        caps = replace(sim.capabilities, renderers_absent=(("sapien", "needs a Vulkan GPU"),))
        monkeypatch.setattr(type(sim.engine), "capabilities", property(lambda self: caps))
        assert sim.get_play_capabilities().absent == {"sapien": "needs a Vulkan GPU"}
        # a backend without its compiled model cannot be drawn, and says why
        monkeypatch.setattr(sim, "_info", replace(sim.info, compiled=None))
        caps = sim.get_play_capabilities()
        assert caps.renderers == () and caps.cameras == () and not caps.tiled and "compiled" in caps.absent["mujoco"]
        with pytest.raises(UnsupportedFeatureError, match="rendering"):
            sim.render()
    finally:
        sim.close()


@pytest.mark.parametrize(
    "call,error,needle",
    [
        (lambda s: s.render(camera="topp"), UnknownNameError, "unknown camera name 'topp'; closest known names: 'top'"),
        (lambda s: s.render(camera=5), IndexRangeError, r"camera: camera ids must be in \[0, 2\), got 5"),
        (lambda s: s.render(camera=1.5), ArgumentTypeError, "camera: expected a camera name"),
        (lambda s: s.render(width=0), InvalidArgumentError, "width: expected a number of pixels >= 1"),
        (lambda s: s.render(height=-3), InvalidArgumentError, "height: expected a number of pixels >= 1"),
        (lambda s: s.render(width=32.0), ArgumentTypeError, "width: expected an integer"),
        (lambda s: s.render(height=True), ArgumentTypeError, "height: expected an integer"),
        (lambda s: s.render(width=MAX_IMAGE_SIDE + 1), InvalidArgumentError, "width: .* above the largest"),
        (lambda s: s.render(env_ids=[0, 7]), EnvIdError, "env_ids"),
        (lambda s: s.render(env_ids=[1, 1]), EnvIdError, "env_ids: duplicated"),
        (lambda s: s.render(tile="yes"), ArgumentTypeError, "tile: expected a bool"),
        (lambda s: s.render(tile=True, spacing=-1.0), InvalidArgumentError, "spacing: expected a finite number > 0"),
        (lambda s: s.render(tile=True, env_ids=[]), InvalidArgumentError, "env_ids: a tiled view needs"),
        (lambda s: s.render(spacing=2.0), InvalidArgumentError, "spacing: only used with tile=True"),
        (lambda s: s.render(camera=FreeCamera(track_body="bx")), UnknownNameError, "unknown body name 'bx'"),
        (
            lambda s: s.get_camera_images("top", modes=("rgb", "rgbd")),
            InvalidArgumentError,
            "modes: unknown mode 'rgbd'",
        ),
        (lambda s: s.get_camera_images("top", modes=()), InvalidArgumentError, "modes: expected at least one"),
        (lambda s: s.get_camera_images("top", modes="point_cloud"), InvalidArgumentError, "modes: 'point_cloud'"),
        (
            lambda s: s.get_camera_images("top", segmentation="link"),
            InvalidArgumentError,
            "segmentation: expected one of",
        ),
        (lambda s: s.get_camera_images(["top", "top"]), InvalidArgumentError, "cameras: camera 'top' named twice"),
        (lambda s: s.get_camera_images([]), ArgumentTypeError, "cameras: expected a camera"),
        (lambda s: s.get_camera_images({"a": "nope"}), UnknownNameError, "unknown camera name 'nope'"),
        (lambda s: s.get_point_cloud(["top", "bottom"]), UnknownNameError, "unknown camera name 'bottom'"),
        (lambda s: s.get_point_cloud("top", height=10**6), InvalidArgumentError, "height: "),
    ],
)
def test_bad_arguments_raise_naming_them_before_rendering(scene_sim, call, error, needle) -> None:
    try:
        with pytest.raises(error, match=needle) as info:
            call(scene_sim)
        assert "\n" not in str(info.value)
        assert not scene_sim._playback.renderers, "a renderer was created before the check"
    finally:
        scene_sim._playback.close()  # the next case starts without renderers whatever happened


@pytest.mark.parametrize(
    "kwargs,error,needle",
    [
        (dict(distance=0.0), InvalidArgumentError, "FreeCamera.distance: expected a finite number > 0"),
        (dict(distance=float("nan")), InvalidArgumentError, "FreeCamera.distance: expected a finite number"),
        (dict(elevation=100), InvalidArgumentError, r"FreeCamera.elevation: expected a finite number in \[-90, 90\]"),
        (dict(azimuth="east"), ArgumentTypeError, "FreeCamera.azimuth: expected a finite number"),
        (dict(lookat=(1, 2)), InputShapeError, r"FreeCamera.lookat: expected shape \(3,\), got \(2,\)"),
        (dict(lookat=(0, float("inf"), 0)), InvalidArgumentError, "FreeCamera.lookat: expected finite values"),
        (dict(track_body=3), ArgumentTypeError, "FreeCamera.track_body: expected a body name"),
    ],
)
def test_free_camera_fields_are_validated(kwargs, error, needle) -> None:
    with pytest.raises(error, match=needle):
        FreeCamera(**kwargs)


def test_renderer_checks_states_and_sizes(scene) -> None:
    model, r = scene
    with pytest.raises(InputShapeError, match=r"qpos: expected shape \(n, 7\), got \(7,\)"):
        r.render(model.qpos0)
    with pytest.raises(InputShapeError, match=r"qpos: expected shape \(n, 7\), got \(1, 6\)"):
        r.render(np.zeros((1, 6)))
    bad = np.tile(model.qpos0, (3, 1))
    bad[2, 0] = np.nan
    with pytest.raises(NonFiniteError, match=r"qpos: .* env ids \[2\]"):
        r.render(bad)
    with pytest.raises(InvalidArgumentError, match="qpos: a tiled view needs at least one state"):
        r.render_tiled(np.zeros((0, 7)))
    with pytest.raises(ArgumentTypeError, match="model: expected a compiled mujoco.MjModel"):
        Renderer("scene.xml")
    with pytest.raises(InvalidArgumentError, match=r"samples: expected an integer in \[0, 16\], got 17"):
        Renderer(model, samples=17)
    with pytest.raises(ArgumentTypeError, match="shadow_size: expected an integer"):
        Renderer(model, shadow_size=512.0)
    assert r.render(np.zeros((0, 7)))["rgb"].shape == (0, H, W, 3)


def test_framebuffer_grows_past_the_models_offscreen_size_and_closing(scene) -> None:
    model, _ = scene
    assert model.vis.global_.offwidth == 640 and model.vis.global_.offheight == 480
    with Renderer(model, 800, 600) as big:
        depth = big.render(model.qpos0[None], "top", modes="depth")["depth"][0, ..., 0].numpy()
        seg = big.render(model.qpos0[None], "top", modes="segmentation")["segmentation"][0, ..., 0].numpy()
    assert depth.shape == (600, 800)
    # the whole 800 x 600 image is drawn (the floor's z-depth is 3 m everywhere, corners included)
    np.testing.assert_allclose(depth[seg == 0], 3.0, atol=2e-3)
    assert (seg == 0).mean() > 0.8 and seg[599, 799] == 0
    assert model.vis.global_.offwidth == 640  # the model is not changed
    assert (model.vis.quality.shadowsize, model.vis.quality.offsamples) == (4096, 4)
    assert big.closed
    with pytest.raises(RenderingError, match="closed"):
        big.render(model.qpos0[None], "top")
    big.close()  # idempotent


def test_backend_close_frees_renderers_and_blocks_calls() -> None:
    sim = make_backend("mujoco", "pendulum", num_envs=1)
    sim.render(width=32, height=24)
    sim.render(width=48, height=24)
    renderers = list(sim._playback.renderers.values())
    assert len(renderers) == 2 and not any(r.closed for r in renderers)
    sim._playback.close()
    assert all(r.closed for r in renderers)
    sim.close()
    with pytest.raises(BackendClosedError):
        sim.render()


# ----------------------------------------------------------------------
# headless OpenGL
# ----------------------------------------------------------------------
def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {
        k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY", "PYOPENGL_PLATFORM")
    }
    base.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=base, capture_output=True, text=True, timeout=300
    )


DRAW = """
    import numpy as np
    from simbackend.models import compile_model
    from simbackend.playback.render import Renderer
    model = compile_model("pendulum")
    with Renderer(model, 64, 48) as r:
        img = r.render(model.qpos0[None])["rgb"].numpy()
    print("STD", float(img.std()))
"""


def test_headless_gl_is_chosen_or_explained() -> None:
    # nothing chosen, no display, mujoco not imported yet: the renderer picks EGL itself
    proc = _python(
        "import os\nimport simbackend.playback.render\nprint('GL', os.environ['MUJOCO_GL'])\n" + textwrap.dedent(DRAW)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "GL egl" in proc.stdout and float(proc.stdout.split("STD")[1]) > 1
    # mujoco imported first with MUJOCO_GL explicitly set to GLFW, and no display: a clear one-line error
    proc = _python(
        """
        import mujoco
        from simbackend.errors import RenderingError
        from simbackend.models import compile_model
        from simbackend.playback.render import Renderer
        try:
            Renderer(compile_model("pendulum"), 64, 48)
        except RenderingError as e:
            print("ERROR", e)
        """,
        MUJOCO_GL="glfw",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.split("ERROR ", 1)[1].strip()
    assert "MUJOCO_GL='glfw'" in line and "set MUJOCO_GL=egl" in line and "before importing mujoco" in line
    assert "\n" not in line


def test_mujoco_imported_first_without_a_choice_still_renders() -> None:
    # mujoco chose GLFW only because MUJOCO_GL was unset: the renderer uses MuJoCo's EGL context instead
    proc = _python("import mujoco\n" + textwrap.dedent(DRAW))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split("STD")[1]) > 1
