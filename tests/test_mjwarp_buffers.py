"""MuJoCo Warp's contact and constraint buffers: sized from a MuJoCo probe of the model, the option block
winning over it, and an overflow reported (diverged envs, one warning naming the option and a value that
fits), never MuJoCo Warp's raw prints and a silently truncated contact set.

The conformance clauses (``contract_tests/test_buffers.py``) check the report on any engine that
declares buffers; these check what is MuJoCo Warp's own. The model is the clauses' box (its kernels are
compiled once for both)."""

from __future__ import annotations

import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest

pytest.importorskip("mujoco_warp")

from simbackend import make_backend  # noqa: E402
from simbackend.backends.mjwarp.engine import BufferOverflowWarning, buffer_sizes, ground_bound  # noqa: E402
from simbackend.contract_tests.test_buffers import BOX_MJCF  # noqa: E402
from simbackend.models import compile_model  # noqa: E402
from simbackend.robots import get_robot, robot_scene  # noqa: E402


@pytest.fixture
def box(tmp_path: Path) -> Path:
    path = tmp_path / "box_on_floor.xml"
    path.write_text(BOX_MJCF)
    return path


def _pressed(sim) -> None:  # type: ignore[no-untyped-def]
    """Env 0's box 2 mm into the floor (four contacts, 16 rows), env 1's in the air (none)."""
    qpos = sim.get_qpos().clone()
    qpos[0, 2], qpos[1, 2] = 0.098, 1.0
    sim.set_state([0, 1], qpos, None)


def test_sizes_hold_go1_fallen_on_its_side_and_flailing() -> None:
    """Go1 dropped on its side under random targets makes 76 constraint rows in MuJoCo under its scene's
    elliptic friction cone (3 rows a contact; 100 under the pyramidal cone's 4: more than the 64 of MuJoCo
    Warp's own sizing, which overflowed in such an evaluation: issue 50); the sizes picked hold it, as does
    the bound for the robot lying on the ground. The built-in quadruped's sizes too."""
    m = mujoco.MjModel.from_xml_path(str(robot_scene(get_robot("go1")).path))
    nconmax, njmax = buffer_sizes(m)
    assert (nconmax, njmax) == (64, 192)
    assert buffer_sizes(compile_model("quadruped")) == (48, 192)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    lo, hi = m.actuator_ctrlrange.T
    d.qpos[3:7] = (0.5**0.5, 0.5**0.5, 0.0, 0.0)  # on its side, 0.2 m up
    d.qpos[2] += 0.2
    ncon = nefc = 0
    for t in range(800):
        if t % 5 == 0:
            d.ctrl[:] = rng.uniform(lo, hi)
        mujoco.mj_step(m, d)
        ncon, nefc = max(ncon, d.ncon), max(nefc, d.nefc)
    assert 64 < nefc <= njmax and ncon <= nconmax, (ncon, nefc)
    assert ground_bound(m)[1] >= nefc


def test_never_below_mujoco_warps_own_sizing() -> None:
    """A model with a height field (a terrain) keeps at least what MuJoCo Warp sizes for it itself
    (96 contacts and 384 rows for a free box: it counts height-field contacts generously), though the
    box alone needs MuJoCo Warp's smallest sizes."""
    hfield = BOX_MJCF.replace(
        "<worldbody>", '<asset><hfield name="h" nrow="3" ncol="3" size="1 1 0.1 0.1"/></asset><worldbody>'
    ).replace('<geom name="floor"', '<geom type="hfield" hfield="h" pos="3 0 0"/><geom name="floor"')
    assert buffer_sizes(mujoco.MjModel.from_xml_string(BOX_MJCF)) == (48, 64)
    assert buffer_sizes(mujoco.MjModel.from_xml_string(hfield)) == (96, 384)


def test_option_block_wins_over_the_probe(box: Path) -> None:
    """``mjwarp={'njmax': ..., 'nconmax': ...}`` (a robot's ``engine_options`` arrive the same way) is
    what the engine allocates; unset, its own sizes (here MuJoCo Warp's smallest: a box needs few)."""
    sim = make_backend("mjwarp", box, 2, mjwarp={"njmax": 200, "nconmax": 40})
    assert dict(sim.capabilities.contact_buffers) == {
        "nconmax": "contacts per env (40 here)",
        "njmax": "constraint rows per env (200 here)",
    }
    own = dict(make_backend("mjwarp", box, 2).capabilities.contact_buffers)
    assert own == {"nconmax": "contacts per env (48 here)", "njmax": "constraint rows per env (64 here)"}


def test_overflow_warns_once_naming_the_option_and_prints_nothing_raw(
    box: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An overflow of ``njmax``: env 0 reported (env 1, in the air, not), one warning naming
    ``mjwarp.njmax``, what was needed and a value that fits (which then holds), and none of MuJoCo
    Warp's raw ``nefc overflow`` lines."""
    sim = make_backend("mjwarp", box, 2, mjwarp={"njmax": 8})
    _pressed(sim)
    with pytest.warns(BufferOverflowWarning) as caught:
        assert sim.step(None, 1)["diverged"].tolist() == [True, False]
        assert sim.step(None, 1)["diverged"].tolist() == [True, False]
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "env(s) 0 needed 16 constraint rows, more than mjwarp.njmax=8" in text
    assert "mjwarp={'njmax': 24}" in text
    assert "overflow" not in capfd.readouterr().out
    fitting = make_backend("mjwarp", box, 2, mjwarp={"njmax": 24})
    _pressed(fitting)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BufferOverflowWarning)
        assert not fitting.step(None, 1)["diverged"].any()


def test_deferred_checks_report_an_overflow_by_mask_alone(box: Path) -> None:
    """With deferred checks (a GPU's way, here on the CPU) a step reads nothing back: the overflow is in
    the mask, and no warning (which would read the flags on the host) is given."""
    sim = make_backend("mjwarp", box, 2, mjwarp={"njmax": 8}, deferred_checks=True)
    _pressed(sim)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BufferOverflowWarning)
        assert sim.step(None, 1)["diverged"].tolist() == [True, False]


def test_contact_pool_overflow_names_nconmax(box: Path) -> None:
    """MuJoCo Warp pools contacts over the envs (``nconmax`` x envs): beyond the pool every env is
    reported (which contacts were dropped is not known), and the warning names ``mjwarp.nconmax``."""
    sim = make_backend("mjwarp", box, 2, mjwarp={"nconmax": 1})
    _pressed(sim)
    with pytest.warns(BufferOverflowWarning, match=r"made 4 contacts together, more than mjwarp\.nconmax=1"):
        diverged = sim.step(None, 1)["diverged"]
    assert diverged.tolist() == [True, True]
    np.testing.assert_allclose(sim.get_qpos()[:, 2].numpy(), [0.098, 1.0], rtol=1e-6)
