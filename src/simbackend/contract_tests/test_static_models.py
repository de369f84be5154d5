"""Conformance: a model without degrees of freedom (a static scene: terrain, walls, posts) loads and steps.

Such a model is what a terrain or a scene is before a robot is added to it, and a quick check that a
scene file compiles. Every engine loads it: the state is empty (``(N, 0)``), a step advances time and
changes nothing, the bodies stay where the model puts them, and an empty state can be written back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend.contract_tests.helpers import to_np

STATIC_MJCF = """
<mujoco model="static_scene">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <geom name="step" type="box" size="0.5 0.5 0.05" pos="1 0 0.05"/>
    <body name="post" pos="-1 0.5 0.25">
      <geom name="post_geom" type="box" size="0.1 0.1 0.25"/>
      <site name="post_top" pos="0 0 0.25"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_model_without_dofs_loads_and_steps(make_sim: Callable[..., Any], tmp_path: Path) -> None:
    """Clause: a model with no degrees of freedom (nq = nv = 0) loads on every engine; its state is
    ``(N, 0)``, ``step`` advances time with nothing diverged, body and site poses are the model's, and
    ``set_state`` of the empty state (and a snapshot, where declared) is accepted."""
    path = tmp_path / "static_scene.xml"
    path.write_text(STATIC_MJCF)
    sim = make_sim(path, 2)
    assert (sim.info.nq, sim.info.nv) == (0, 0)
    assert tuple(sim.get_qpos().shape) == (2, 0) and tuple(sim.get_qvel().shape) == (2, 0)
    info = sim.step(None, 5)
    assert not bool(info["diverged"].any())
    np.testing.assert_allclose(to_np(sim.get_time()), [5 * 0.002] * 2, rtol=1e-6)
    post = sim.get_body_id("post")
    np.testing.assert_allclose(to_np(sim.get_body_pos_w([post]))[:, 0], [[-1, 0.5, 0.25]] * 2, atol=1e-6)
    site = sim.info.site_names.index("post_top")
    np.testing.assert_allclose(to_np(sim.get_site_pos_w([site]))[:, 0], [[-1, 0.5, 0.5]] * 2, atol=1e-6)
    sim.set_state([1], torch.zeros((1, 0)), torch.zeros((1, 0)))
    if sim.capabilities.snapshot_restore:  # an empty state's snapshot restores
        sim.set_physics_state([0, 1], sim.get_physics_state())
    sim.step(None, 1)
    np.testing.assert_allclose(to_np(sim.get_body_pos_w([post]))[:, 0], [[-1, 0.5, 0.25]] * 2, atol=1e-6)
