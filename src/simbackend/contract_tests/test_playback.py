"""Conformance: pictures of a backend's state (``render``, ``get_camera_images``, ``get_play_capabilities``).

The pictures come from the core (MuJoCo's renderer on the compiled model every
backend carries), so these clauses check what a backend controls: that it
carries its compiled model, that the pictures follow its current state, and
that it declares what it can draw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import to_np
from simbackend.errors import UnsupportedFeatureError


def test_play_capabilities_match_the_rendering_capability(make_sim: Any) -> None:
    """Clause: get_play_capabilities() lists a renderer exactly where capabilities.rendering is declared, with
    the camera modes and the model's cameras plus "free"; absent renderers carry a reason."""
    sim = make_sim("arm7", 1)
    play = sim.get_play_capabilities()
    assert bool(play.renderers) == bool(sim.capabilities.rendering)
    if play.renderers:
        assert set(play.camera_modes) == {"rgb", "depth", "segmentation", "point_cloud"}
        assert play.cameras[-1] == "free"
    assert all(isinstance(v, str) and v for v in play.absent.values())


def test_pictures_follow_the_current_state(make_sim: Any, require: Any) -> None:
    """Clause: render(env_ids) gives (n, H, W, 3) uint8 on the backend's device, one picture per env in the
    order asked, drawn at each env's current state (set_state changes the picture at once, without a step);
    depth is (n, H, W, 1) float32 metres and segmentation (n, H, W, 1) int32 ids of the model's geoms."""
    require("rendering")
    sim = make_sim("pendulum", 2)
    sim.set_state(None, torch.tensor([[0.0], [1.2]]))
    images = sim.render([1, 0], width=64, height=48)
    assert images.shape == (2, 48, 64, 3) and images.dtype == torch.uint8 and images.device == sim.device
    assert not torch.equal(images[0], images[1]), "two states, one picture"
    again = sim.render([0], width=64, height=48)
    assert torch.equal(again[0], images[1])
    sim.set_state([0], torch.tensor([[1.2]]))
    assert torch.equal(sim.render([0], width=64, height=48)[0], images[0])
    obs = sim.get_camera_images("free", [0, 1], modes=("depth", "segmentation"), width=64, height=48)["free"]
    depth, seg = obs["depth"], obs["segmentation"]
    assert depth.shape == (2, 48, 64, 1) and depth.dtype == torch.float32
    assert seg.shape == (2, 48, 64, 1) and seg.dtype == torch.int32
    ids = set(np.unique(to_np(seg)).astype(int).tolist())
    assert ids - {-1} and ids <= set(range(-1, sim.info.ngeom))
    assert np.isfinite(to_np(depth)[to_np(seg) >= 0]).all()


def test_rendering_absent_raises(make_sim: Any, capabilities: Any) -> None:
    """Clause: a backend that declares rendering absent raises UnsupportedFeatureError from render."""
    if capabilities.rendering:
        pytest.skip("the backend declares rendering")
    sim = make_sim("pendulum", 1)
    with pytest.raises(UnsupportedFeatureError):
        sim.render()


def test_the_default_camera_frames_the_moving_parts_and_the_dress_is_rgb_only(make_sim: Any, require: Any) -> None:
    """Clause: the default camera ("free") shows the moving parts of the backend's state, the same in render and
    in get_camera_images; render's dress (floor, light, sky the model lacks) is in the rgb picture only:
    render(dress=False) is get_camera_images' rgb, and the dressed pendulum leaves no black background."""
    require("rendering")
    sim = make_sim("pendulum", 2)
    sim.set_state(None, torch.tensor([[0.3], [-2.0]]))
    bare = sim.render(width=80, height=60, dress=False)
    obs = sim.get_camera_images("free", modes=("rgb", "segmentation"), segmentation="body", width=80, height=60)
    assert torch.equal(bare, obs["free"]["rgb"])
    dressed = to_np(sim.render(width=80, height=60))
    assert (dressed.max(axis=-1) < 8).mean() < 0.02 and (to_np(bare).max(axis=-1) < 8).mean() > 0.5
    pendulum = to_np(obs["free"]["segmentation"])[..., 0] == sim.get_body_ids("pendulum").item()
    for k in range(2):  # the swinging body is in the picture, away from its edges
        ys, xs = np.nonzero(pendulum[k])
        assert ys.size and 0 < ys.min() and ys.max() < 59 and 0 < xs.min() and xs.max() < 79, k
