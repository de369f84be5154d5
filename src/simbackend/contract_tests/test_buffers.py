"""Conformance: fixed-size contact buffers (``capabilities.contact_buffers``) never truncate silently.

An engine that holds contacts and constraint rows in buffers of a fixed size per env (MuJoCo Warp's
``nconmax``, ``njmax``) declares the options that size them. A step that needs more than a buffer holds
would drop contacts and go on with the wrong physics; the contract instead reports the envs it
overflowed as diverged, their state kept, as it reports any failure the engine saw. An engine whose
buffers grow as needed declares none, and these clauses are skipped for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simbackend.contract_tests.helpers import to_np

#: a box resting on the floor: 4 contacts, 16 constraint rows (pyramidal friction, condim 3)
BOX_MJCF = """
<mujoco model="box_on_floor">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="box" pos="0 0 0.1">
      <freejoint/>
      <geom name="box_geom" type="box" size="0.1 0.1 0.1" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture
def box_model(tmp_path: Path) -> Path:
    path = tmp_path / "box_on_floor.xml"
    path.write_text(BOX_MJCF)
    return path


def _buffers(make_sim: Callable[..., Any], model: Path) -> tuple[Any, tuple[tuple[str, str], ...]]:
    sim = make_sim(model, 2)
    buffers = sim.capabilities.contact_buffers
    if not buffers:
        pytest.skip(f"backend {sim.name!r} declares no fixed-size contact buffers (capabilities.contact_buffers)")
    return sim, buffers


def test_own_buffer_sizes_hold_a_resting_box(make_sim: Callable[..., Any], box_model: Path) -> None:
    """Clause: with the engine's own buffer sizes, a box resting on the floor steps without an overflow
    reported and stays at rest."""
    sim, _ = _buffers(make_sim, box_model)
    for _ in range(10):
        assert not bool(sim.step(None, 5)["diverged"].any())
    np.testing.assert_allclose(to_np(sim.get_qpos())[:, 2], [0.1, 0.1], atol=2e-3)


def test_overflowing_a_buffer_is_reported(make_sim: Callable[..., Any], sim_name: str, box_model: Path) -> None:
    """Clause: a step that needs more contacts or constraint rows than a declared buffer holds reports
    the env as diverged and leaves its state as it was (never a step on a truncated contact set); a
    buffer of one entry cannot hold a box resting on four corners."""
    _, buffers = _buffers(make_sim, box_model)
    for key, _what in buffers:
        sim = make_sim(box_model, 2, **{sim_name: {key: 1}})
        qpos = sim.get_qpos().clone()
        qpos[0, 2] = 0.098  # env 0 pressed 2 mm into the floor: four contacts now
        qpos[1, 2] = 1.0  # env 1 in the air: no contact in this step
        sim.set_state([0, 1], qpos, None)
        before = to_np(sim.get_qpos()).copy()
        diverged = to_np(sim.step(None, 1)["diverged"])
        assert diverged[0], f"{sim_name}.{key}=1: a box on four contacts was not reported"
        np.testing.assert_array_equal(to_np(sim.get_qpos())[0], before[0], err_msg=f"{key}: state not kept")
