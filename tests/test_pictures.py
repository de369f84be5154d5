"""Pictures worth looking at: the default camera frames the moving parts (and follows a floating base), and the
dress adds the floor, light and sky a model lacks, to rgb pictures only.

Measured on videos of every built-in model driven by random controls, on the CPU: in every frame the moving
parts (found in the segmentation image of the same camera) are in the picture, uncut by its edges, and span a
good part of it; the dressed frame has no black background left. On dressed stills: the floor meets the sky at
a level, soft horizon (no floor edge cutting across the sky, no hard line where the floor ends), and every dark
patch on the floor is a shadow touching what casts it (no stray dashes of MuJoCo's shadow map)."""

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


# ----------------------------------------------------------------------
# the horizon and the shadows of dressed pictures
# ----------------------------------------------------------------------
#: luma (0-255) a row of floor-or-sky above the subject may spread over (5th to 95th percentile), and by
#: which the median of neighbouring rows may differ: a floor's far edge across the sky spreads a row over
#: the floor and the sky (~200), a floor ending in a line jumps from floor to sky (~170)
HORIZON_SPREAD = HORIZON_STEP = 40.0
#: a floor pixel is dark below this fraction of its row's median floor luma
DARK = 0.6
#: envs of a tiled view in one pose cast shadows alike: each at least this fraction of the largest (by area,
#: relative to the env's own); the first env's alone was cast where a tiled view's lights became directional
SHADOW_LIKE = 1 / 3


def _luma(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)


def _dressed(model: str, n: int, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rgb (H, W, 3), segmentation (H, W) geom ids, floor (H, W) bool)`` of a dressed picture of ``model``
    in its standing keyframe (its first state), ``n`` > 1 envs tiled; floor: the model's planes of the
    world body (seen in segmentation)."""
    with make_backend("mujoco", model, num_envs=1) as sim:
        m = sim.info.compiled
        key = next((k for k in ("stand", "home") if k in sim.info.keyframe_names), None)
        q = (sim.get_keyframe_qpos(key) if key else sim.get_qpos()[0]).numpy()[None].repeat(n, 0)
    with Renderer(m, *size) as r:
        modes = ("rgb", "segmentation")
        out = (
            r.render_tiled(q, modes=modes, dress=True)
            if n > 1
            else {k: v[0] for k, v in r.render(q, modes=modes, dress=True).items()}
        )
    seg = out["segmentation"][..., 0].numpy()
    planes = np.flatnonzero(
        (np.asarray(m.geom_bodyid) == 0) & (np.asarray(m.geom_type) == int(mujoco.mjtGeom.mjGEOM_PLANE))
    )
    return out["rgb"].numpy(), seg, np.isin(seg, planes)


def _dilate(mask: np.ndarray, k: int = 1) -> np.ndarray:
    for _ in range(k):
        grown = mask.copy()
        grown[1:] |= mask[:-1]
        grown[:-1] |= mask[1:]
        grown[:, 1:] |= mask[:, :-1]
        grown[:, :-1] |= mask[:, 1:]
        mask = grown
    return mask


def horizon_rows(rgb: np.ndarray, seg: np.ndarray, floor: np.ndarray) -> tuple[float, float]:
    """``(spread, step)`` of the floor-or-sky above the subject (everything drawn that is not a floor):
    the largest luma spread of a row (5th to 95th percentile, rows at least half floor-or-sky) and the
    largest difference of neighbouring rows' medians."""
    h, w = floor.shape
    open_ = floor | (seg < 0)
    rows = np.flatnonzero((~open_).any(axis=1))
    top = int(rows[0]) - 1 if rows.size else h
    luma = _luma(rgb)
    spread, step, last = 0.0, 0.0, None
    for y in range(max(top, 0)):
        v = luma[y][open_[y]]
        if v.size < w // 2:
            last = None
            continue
        lo, median, hi = np.percentile(v, (5, 50, 95))
        spread = max(spread, float(hi - lo))
        if last is not None:
            step = max(step, abs(float(median) - last))
        last = float(median)
    return spread, step


def _grow(seed: np.ndarray, within: np.ndarray) -> np.ndarray:
    """The pixels of ``within`` that a path of ``within`` pixels joins to ``seed``."""
    while True:
        grown = _dilate(seed) & within
        if (grown == seed).all():
            return seed
        seed = grown


def shadows(rgb: np.ndarray, seg: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(subject, shadow, stray)``: everything drawn that is not a floor, the dark floor pixels (below
    :data:`DARK` of their row's median floor luma, at or below the subject's top) that a path of dark
    pixels joins to the subject (widened by a fiftieth of the picture's width), and the count of the
    other dark floor pixels: shadows touch what casts them, stray dashes do not."""
    h, w = floor.shape
    subject = (seg >= 0) & ~floor
    luma = _luma(rgb)
    dark = np.zeros_like(floor)
    for y in range(int(np.flatnonzero(subject.any(axis=1))[0]), h):
        v = luma[y][floor[y]]
        if v.size >= 8:
            dark[y] = floor[y] & (luma[y] < DARK * np.median(v))
    shadow = _grow(_dilate(subject, max(2, w // 50)) & dark, dark)
    return subject, shadow, int((dark & ~shadow).sum())


def _components(mask: np.ndarray) -> list[np.ndarray]:
    """The connected parts of ``mask``."""
    parts, left = [], mask.copy()
    while left.any():
        seed = np.zeros_like(left)
        seed.flat[int(np.flatnonzero(left)[0])] = True
        part = _grow(seed, left)
        parts.append(part)
        left &= ~part
    return parts


@pytest.mark.parametrize(
    ("model", "n"),
    [("quadruped", 1), ("quadruped", 4), ("box_drop", 1), ("pendulum", 1)],
    ids=["quadruped", "quadruped-tiled", "box_drop", "pendulum"],
)
def test_the_floor_meets_the_sky_at_a_level_soft_horizon(model: str, n: int) -> None:
    """A model's own finite floor (the quadruped's 10 m square seen corner-on, box_drop's 2 m one) and the
    dress's floor (the pendulum) reach the horizon and fade into the sky: above the subject every row of
    floor-or-sky is one colour (no floor edge cutting across the sky), and it changes smoothly from row to
    row (no hard line where the floor or the far clipping plane ends it)."""
    rgb, seg, floor = _dressed(model, n, (160, 120))
    spread, step = horizon_rows(rgb, seg, floor)
    assert spread < HORIZON_SPREAD, f"{model}: a row of floor-or-sky spreads over {spread:.0f} levels of luma"
    assert step < HORIZON_STEP, f"{model}: neighbouring rows of floor-or-sky differ by {step:.0f} levels of luma"


def test_shadows_on_the_floor_touch_what_casts_them(tmp_path: Path) -> None:
    """MuJoCo's shadow map made a floor shade itself: stray dark dashes all over a floor under a tilted
    directional light, and around the envs of a tiled view, whose lights become directional; and it covered
    the first env of a tiled view only. Dressed, every dark patch on the floor is a shadow joined to a
    subject, and every env of a tiled view casts one."""
    xml = tmp_path / "lit.xml"
    xml.write_text(
        '<mujoco><worldbody><light directional="true" pos="0 0 4" dir="0.2 0.3 -1"/>'
        '<geom name="floor" type="plane" size="10 10 0.1" rgba="0.3 0.35 0.4 1"/>'
        '<body pos="0 0 0.2"><freejoint/><geom type="box" size="0.3 0.2 0.2" rgba="0.8 0.5 0.2 1"/></body>'
        "</worldbody></mujoco>"
    )
    for model, n in ((str(xml), 1), (str(xml), 4), ("quadruped", 4)):
        rgb, seg, floor = _dressed(model, n, (W, H))
        subject, shadow, stray = shadows(rgb, seg, floor)
        assert stray == 0, f"{model} ({n} envs): {stray} dark floor pixels away from any shadow"
        envs = _components(_dilate(subject, 3))  # an env's parts, joined
        assert len(envs) == n, f"{model} ({n} envs): {len(envs)} separate subjects in the picture"
        # the envs stand alike: each casts a shadow alike (its area over the env's, within a factor)
        cast = [(shadow & _dilate(env, W // 50)).sum() / (env & subject).sum() for env in envs]
        assert min(cast) > SHADOW_LIKE * max(cast), f"{model} ({n} envs): shadows of {np.round(cast, 2)} of each env"
