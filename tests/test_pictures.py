"""Pictures worth looking at: the default camera frames the moving parts (and follows a floating base), and the
dress adds the floor, light and sky a model lacks, to rgb pictures only.

Measured on videos of every built-in model driven by random controls, on the CPU: in every frame the moving
parts (found in the segmentation image of the same camera) are in the picture, uncut by its edges, and span a
good part of it; the dressed frame has no black background left."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import ArgumentTypeError
from simbackend.models.builtin import builtin_models
from simbackend.playback.render import FreeCamera, Renderer
from simbackend.playback.render.dress import Dress
from simbackend.playback.render.framing import has_ground, moving_parts

W, H = 320, 240


def _moving_mask(sim, seg: torch.Tensor) -> np.ndarray:
    """``(n, H, W)`` bool: pixels of bodies that move relative to the world."""
    moving_bodies = np.flatnonzero(np.asarray(sim.info.compiled.body_weldid) != 0)
    return np.isin(seg[..., 0].cpu().numpy(), moving_bodies)


@pytest.mark.parametrize("model", builtin_models())
def test_videos_of_every_builtin_model_frame_the_moving_parts(model: str) -> None:
    with make_backend("mujoco", model, num_envs=1, seed=3) as sim:
        key = "home" if "home" in sim.info.keyframe_names else None
        if key:
            sim.set_state(None, sim.get_keyframe_qpos(key)[None])
        lo, hi = sim.get_actuator_ctrl_range().unbind(-1) if sim.num_actuators else (None, None)
        gen = torch.Generator().manual_seed(0)
        spans, cut = [], 0
        for frame in range(12):
            if sim.num_actuators:
                u = lo + (hi - lo) * torch.rand(sim.num_actuators, generator=gen)
                sim.step(u[None], nsteps=40)
            else:
                sim.step(None, nsteps=40)
            rgb = sim.render([0], width=W, height=H)[0].numpy()
            seg = sim.get_camera_images("free", [0], modes="segmentation", segmentation="body", width=W, height=H)
            mask = _moving_mask(sim, seg["free"]["segmentation"])[0]
            assert mask.any(), f"{model}: frame {frame} shows none of the moving parts"
            ys, xs = np.nonzero(mask)
            spans.append(max((ys.max() - ys.min() + 1) / H, (xs.max() - xs.min() + 1) / W))
            edge = np.concatenate([mask[0], mask[-1], mask[:, 0], mask[:, -1]])
            cut += int(edge.sum())
            # dressed: no black background left (the sky and the floor fill what the model does not)
            black = (rgb.max(axis=-1) < 8).mean()
            assert black < 0.02, f"{model}: frame {frame} is {black:.0%} black"
        assert cut == 0, f"{model}: the moving parts touch the picture's edge ({cut} pixels)"
        assert min(spans) >= 0.2, f"{model}: the moving parts span only {min(spans):.0%} of the picture"


def test_moving_parts_of_known_models() -> None:
    def parts(name: str):
        with make_backend("mujoco", name, num_envs=1) as sim:
            return moving_parts(sim.info.compiled), sim.get_body_ids(
                "cart" if name == "cartpole" else sim.info.body_names[1]
            )

    pend, _ = parts("pendulum")  # a 1 m rod and a 5 cm bob swinging full turns about the pivot at z = 1
    assert pend.track == -1 and pend.planar
    np.testing.assert_allclose(pend.center, (0, 0, 1), atol=0.05)
    assert 0.9 < pend.half_extent[0] <= 1.05 and 0.9 < pend.half_extent[2] <= 1.05
    assert pend.half_extent[1] == pytest.approx(0.05)  # the bob's radius: it swings in the x-z plane
    assert pend.floor_z == pytest.approx(-0.05, abs=5e-3)  # the bob's lowest point
    cart, cart_id = parts("cartpole")  # the cart carries the whole model along the rail: followed, not swept
    assert cart.track == int(cart_id[0]) and cart.planar and cart.anchor == (0.0, 0.0, 1.0)
    assert cart.half_extent[0] < 1.1  # the pole's swing, not the 6 m rail
    quad, base = parts("quadruped")  # a floating base, legs in every direction
    assert quad.track == int(base[0]) and not quad.planar


def test_the_free_camera_follows_a_floating_base(tmp_path: Path) -> None:
    xml = tmp_path / "drift.xml"
    xml.write_text(
        '<mujoco><option gravity="0 0 0"/><worldbody>'
        '<body name="probe" pos="0 0 1"><freejoint/><geom type="box" size="0.2 0.1 0.1" rgba="1 0 0 1"/></body>'
        "</worldbody></mujoco>"
    )
    with make_backend("mujoco", str(xml), num_envs=1) as sim:
        cam = FreeCamera.framing(sim.info.compiled)
        assert cam.track_body == "probe" and cam.lookat == (0.0, 0.0, 0.0)
        centres = []
        for x in (0.0, 25.0, -40.0):
            q = sim.get_qpos().clone()
            q[0, 0] = x
            sim.set_state(None, q)
            seg = sim.get_camera_images("free", modes="segmentation", width=W, height=H)["free"]["segmentation"]
            ys, xs = np.nonzero(seg[0, ..., 0].numpy() >= 0)
            assert xs.size > 100, x
            centres.append((xs.mean(), ys.mean()))
        # the box stays where it was in the picture, wherever it drifts
        np.testing.assert_allclose(centres[1], centres[0], atol=1.0)
        np.testing.assert_allclose(centres[2], centres[0], atol=1.0)


def test_framing_honours_a_models_own_view(tmp_path: Path) -> None:
    xml = tmp_path / "view.xml"
    xml.write_text(
        '<mujoco><visual><global azimuth="30" elevation="-60"/></visual><worldbody>'
        '<body><joint type="hinge" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 0 0 -1" size="0.05"/></body>'
        "</worldbody></mujoco>"
    )
    cam = FreeCamera.framing(mujoco.MjModel.from_xml_path(str(xml)))
    assert (cam.azimuth, cam.elevation) == (30.0, -60.0)


def _rgb_depth_seg(r: Renderer, q: np.ndarray, dress: bool) -> dict:
    return {k: v.numpy() for k, v in r.render(q, modes=("rgb", "depth", "segmentation"), dress=dress).items()}


def test_the_dress_is_in_rgb_only_and_changes_nothing_else() -> None:
    with make_backend("mujoco", "pendulum", num_envs=1) as sim:
        model = sim.info.compiled
        q = sim.get_qpos().numpy()
        with Renderer(model, W, H) as r:
            bare, dressed = _rgb_depth_seg(r, q, False), _rgb_depth_seg(r, q, True)
            again = _rgb_depth_seg(r, q, False)
            # depth and segmentation never see the dress; the undressed picture is unchanged after a dressed one
            np.testing.assert_array_equal(dressed["depth"], bare["depth"])
            np.testing.assert_array_equal(dressed["segmentation"], bare["segmentation"])
            np.testing.assert_array_equal(again["rgb"], bare["rgb"])
            # the pendulum has no floor and no skybox: the dressed picture has a floor and a sky where it had black
            background = bare["segmentation"][..., 0] < 0
            assert (bare["rgb"][background].max(axis=-1) < 8).mean() > 0.95
            assert (dressed["rgb"][background].max(axis=-1) >= 8).mean() > 0.99
            # the floor is under the pendulum: the bottom rows are floor, the top rows sky (bluer than the floor)
            top, bottom = dressed["rgb"][0, 0].astype(int), dressed["rgb"][0, -1].astype(int)
            assert (top[:, 2] - top[:, 0]).mean() > 40 and (bottom[:, 2] - bottom[:, 0]).mean() < 40


def test_the_dress_adds_only_what_a_model_lacks(tmp_path: Path) -> None:
    full = tmp_path / "full.xml"
    full.write_text(
        '<mujoco><asset><texture type="skybox" builtin="gradient" rgb1="0.3 0.5 0.7" rgb2="0 0 0" width="32"'
        ' height="32"/></asset><worldbody><light pos="0 0 3"/><geom type="plane" size="2 2 0.1"/>'
        '<body pos="0 0 0.5"><freejoint/><geom type="sphere" size="0.1" rgba="0 1 0 1"/></body>'
        "</worldbody></mujoco>"
    )
    model = mujoco.MjModel.from_xml_path(str(full))
    dress = Dress.of(model, moving_parts(model))
    assert has_ground(model) and not (dress.floor or dress.light or dress.sky)
    with Renderer(model, W, H) as r:  # nothing lacking: the dressed picture is the bare one
        q = model.qpos0[None]
        np.testing.assert_array_equal(r.render(q, dress=True)["rgb"], r.render(q, dress=False)["rgb"])
    with make_backend("mujoco", "pendulum", num_envs=1) as sim:  # a light, no floor, no sky
        m = sim.info.compiled
        d = Dress.of(m, moving_parts(m))
        assert d.floor and d.sky and not d.light


def test_render_checks_the_dress_flag() -> None:
    with make_backend("mujoco", "pendulum", num_envs=2) as sim:
        with pytest.raises(ArgumentTypeError, match="dress: expected a bool, got str 'no'"):
            sim.render(dress="no")
        with Renderer(sim.info.compiled, W, H) as r:
            with pytest.raises(ArgumentTypeError, match="dress: expected a bool, got int 1"):
                r.render(sim.get_qpos(), dress=1)
        tiled = sim.render(tile=True, width=W, height=H)  # a dressed tiled view: the floor under both envs
        assert tiled.shape == (H, W, 3) and (tiled.numpy().max(axis=-1) < 8).mean() < 0.02


def test_the_moving_parts_are_read_once_per_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling the parts' poses takes tens of milliseconds: a renderer does it once, not per picture or per
    tiled frame."""
    import simbackend.playback.render.cameras as cameras_module
    import simbackend.playback.render.renderer as renderer_module

    calls = []

    def counted(model):
        calls.append(1)
        return moving_parts(model)

    monkeypatch.setattr(renderer_module, "moving_parts", counted)
    monkeypatch.setattr(cameras_module, "moving_parts", counted)
    with make_backend("mujoco", "quadruped", num_envs=4) as sim, Renderer(sim.info.compiled, W, H) as r:
        q = sim.get_qpos()
        for _ in range(3):
            r.render_tiled(q, dress=True)
            r.render(q[:1], dress=True)
        r.render(q[:1], modes=("segmentation",))
    assert len(calls) == 1
