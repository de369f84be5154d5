"""What only the Motrix plugin does: loading through Motrix's own compiler, the name mapping, xyzw.

The contract itself is checked by the conformance suite (``pytest contract_tests --sim motrix``);
these tests cover the plugin's own layer: what Motrix's compiler ignores is sorted into notes and
rejections, the state is one permutation of Motrix's arrays, and the plugin is found by entry point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("motrixsim")

from simbackend import available_backends, make_backend
from simbackend.errors import ModelLoadError
from simbackend.registry import backend_provider

FREE_BALL = """<mujoco model="free_ball">
  <option integrator="implicitfast"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="base" pos="0 0 1">
      <freejoint name="root"/>
      <geom type="box" size="0.1 0.2 0.05" mass="2"/>
      <body pos="0 0 -0.3">
        <joint name="ball" type="ball"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/>
        <site name="tip" pos="0 0 -0.3"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "model.xml"
    path.write_text(text)
    return str(path)


def test_registered_by_entry_point_not_by_the_core() -> None:
    assert "motrix" in available_backends()
    assert backend_provider("motrix").startswith("simbackend_motrix:MotrixEngine (simbackend-motrix ")


def test_unnamed_elements_free_and_ball_joints_map_with_wxyz(tmp_path: Path) -> None:
    """Unnamed bodies take ModelInfo's names; the free and ball quaternions come out wxyz and
    round-trip exactly through Motrix's xyzw storage; body quaternions match the state's."""
    sim = make_backend("motrix", _write(tmp_path, FREE_BALL), 3)
    assert sim.body_names == ("world", "base", "body2") and sim.joint_names == ("root", "ball")
    assert sim.nq == 11 and sim.nv == 9
    rng = np.random.default_rng(0)
    qpos = np.zeros((3, 11))
    qpos[:, :3] = rng.normal(size=(3, 3))
    for cols in (slice(3, 7), slice(7, 11)):
        q = rng.normal(size=(3, 4))
        qpos[:, cols] = q / np.linalg.norm(q, axis=1, keepdims=True)
    sim.set_state(None, qpos)
    np.testing.assert_allclose(sim.get_qpos().numpy(), qpos, atol=1e-6)
    base = sim.get_body_quat_w(sim.get_body_ids("base"))[:, 0].numpy()
    sign = np.sign((base * qpos[:, 3:7]).sum(1, keepdims=True))  # q and -q are one rotation
    np.testing.assert_allclose(base * sign, qpos[:, 3:7], atol=1e-6)
    raw = sim.engine.data.dof_pos  # Motrix's own layout: the floating base's quaternion is xyzw
    np.testing.assert_allclose(raw[:, 3:7], qpos[:, [4, 5, 6, 3]], atol=1e-6)


def test_ignored_physics_is_rejected_and_solver_settings_are_notes(tmp_path: Path) -> None:
    """Motrix's compiler skips fluid forces with a log line: the load fails naming them; the
    integrator it replaces by its own is a note."""
    sim = make_backend("motrix", _write(tmp_path, FREE_BALL), 1)
    assert any("integrat" in n for n in sim.notes)
    fluid = FREE_BALL.replace('<option integrator="implicitfast"/>', '<option density="1.2" viscosity="0.1"/>')
    with pytest.raises(ModelLoadError, match=r"Motrix cannot represent <option density>.*<option viscosity>"):
        make_backend("motrix", _write(tmp_path, fluid), 1)


def test_joint_force_cap_under_two_actuators_is_refused(tmp_path: Path) -> None:
    """A joint's actuatorfrcrange is folded into its one actuator's force range (the conformance clause
    ``test_mapping.py`` measures it); under two actuators Motrix has no cap on their sum: refused by name."""
    xml = """<mujoco><worldbody><body name="a" pos="0 0 1">
      <joint name="capped" type="hinge" axis="0 1 0" actuatorfrcrange="-3 3"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/></body></worldbody>
      <actuator><position joint="capped" kp="10"/><motor joint="capped"/></actuator></mujoco>"""
    with pytest.raises(ModelLoadError, match=r"joint 'capped' caps the total force of its 2 actuators"):
        make_backend("motrix", _write(tmp_path, xml), 1)


def test_compiled_model_only_when_written_before(tmp_path: Path) -> None:
    """A compiled MjModel has no MJCF: accepted only when this process wrote the same model
    (a recording's model), refused with a one-line message otherwise."""
    import mujoco

    from simbackend.models import compile_model

    sim = make_backend("motrix", "pendulum", 1)
    again = make_backend("motrix", compile_model("pendulum"), 1)
    assert again.info.fingerprint == sim.info.fingerprint
    unseen = mujoco.MjModel.from_xml_string(FREE_BALL.replace("free_ball", "never_written"))
    with pytest.raises(ModelLoadError, match="cannot be written back as MJCF"):
        make_backend("motrix", unseen, 1)


def test_link_states_are_current_after_a_step() -> None:
    """Motrix's link states after a step describe the state before its last substep; the backend's
    bodies agree with its qpos after every step (free fall: the base moves with the free joint)."""
    sim = make_backend("motrix", "box_drop", 2)
    for _ in range(3):
        sim.step(None, nsteps=5)
        np.testing.assert_allclose(sim.get_base_pos().numpy(), sim.get_qpos()[:, :3].numpy(), atol=1e-6)
        np.testing.assert_allclose(sim.get_base_lin_vel().numpy(), sim.get_qvel()[:, :3].numpy(), atol=1e-5)


def test_randomized_values_survive_a_full_set_state() -> None:
    """A set_state of every env starts a fresh Motrix batch (to drop contact warm starts): the
    randomized masses and gravity are carried into it."""
    from simbackend.randomization import RandomizationPlan

    sim = make_backend("motrix", "box_drop", 4)
    plan = RandomizationPlan.from_dict(
        {
            "version": 1,
            "seed": 3,
            "terms": [
                {
                    "kind": "body_mass",
                    "targets": ["box"],
                    "phase": "init",
                    "operation": "scale",
                    "distribution": {"kind": "uniform", "low": [0.5], "high": [2.0]},
                },
                {
                    "kind": "gravity",
                    "phase": "init",
                    "operation": "add",
                    "distribution": {"kind": "uniform", "low": [-1, -1, 0], "high": [1, 1, 0]},
                },
            ],
        }
    )
    sim.apply_init_randomization(plan)
    mass, gravity = sim.engine.read_params("body_mass"), sim.engine.read_params("gravity")
    sim.set_state(None, sim.get_qpos())
    np.testing.assert_array_equal(sim.engine.read_params("body_mass"), mass)
    np.testing.assert_array_equal(sim.engine.read_params("gravity"), gravity)
    assert np.ptp(mass[:, 1]) > 0 and np.ptp(gravity[:, 0]) > 0


def test_three_commands_of_the_plugin_readme() -> None:
    """The README shows how a third party installs and checks the plugin."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for command in ("pip install", "simbackend contract --sim motrix", "simbackend parity --sim motrix"):
        assert command in text, command


def test_no_actuator_model_steps() -> None:
    """Motrix panics on an empty control array; a model without actuators still steps."""
    sim = make_backend("motrix", "box_drop", 2)
    assert sim.num_actuators == 0
    info = sim.step(None, nsteps=3)
    assert not info["diverged"].any() and torch.isfinite(sim.get_qpos()).all()


def test_inertia_with_rotated_principal_axes_reads_back_and_randomizes(tmp_path: Path) -> None:
    """Motrix holds full inertia tensors; the contract's principal moments are read back in the body's
    principal axes (a full inertia with off-diagonal terms, so the axes are rotated), and a scale of
    them round-trips through Motrix's override."""
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    xml = """<mujoco><worldbody><body name="rod" pos="0 0 1"><joint type="hinge" axis="0 1 0"/>
      <inertial pos="0.1 0 0" mass="2" fullinertia="0.3 0.25 0.2 0.05 -0.02 0.01"/>
      <geom type="sphere" size=".05" contype="0" conaffinity="0"/></body></worldbody></mujoco>"""
    sim = make_backend("motrix", _write(tmp_path, xml), 2)
    rod = sim.info.body_names.index("rod")
    assert not np.allclose(sim.info.body_iquat[rod], [1, 0, 0, 0], atol=1e-3)
    np.testing.assert_allclose(
        sim.engine.read_params("body_inertia")[:, rod], np.tile(sim.info.body_inertia[rod], (2, 1)), rtol=1e-5
    )
    sim.apply_init_randomization(
        RandomizationPlan(
            (Term("body_inertia", Distribution.fixed([1.5]), operation="scale", targets=("rod",)),), seed=0
        )
    )
    np.testing.assert_allclose(
        sim.engine.read_params("body_inertia")[:, rod], np.tile(1.5 * sim.info.body_inertia[rod], (2, 1)), rtol=1e-5
    )
    fields = sim.model_fields()["body_inertia"][rod]
    assert abs(fields[0, 1] - 0.05) < 1e-6 and abs(fields[0, 2] + 0.02) < 1e-6 and abs(fields[1, 2] - 0.01) < 1e-6


# ----------------------------------------------------------------------------
# height fields and rays
# ----------------------------------------------------------------------------
def _hfield_mjcf(heights: np.ndarray, bodies: str = "", pos: tuple = (0.3, -0.2, -0.1), extra: str = "") -> str:
    """A world-body height field geom ``terrain`` of ``heights`` (row 0 at -y, columns along +x, 0.1 m
    apart, MuJoCo's hfield order) at ``pos`` + its lowest point, base 0.5 m; MJCF's ``elevation`` lists
    rows from +y, and MuJoCo normalizes it to [0, 1] (the range is the size's z)."""
    lo, hi = float(heights.min()), float(heights.max())
    nrow, ncol = heights.shape
    elevation = " ".join(f"{v:.9g}" for v in (heights[::-1] - lo).ravel())
    size = f"{0.05 * (ncol - 1)} {0.05 * (nrow - 1)} {max(hi - lo, 1e-3)} 0.5"
    return f"""<mujoco><asset><hfield name="terrain" nrow="{nrow}" ncol="{ncol}" size="{size}" elevation="{elevation}"/>
      </asset><worldbody><geom name="terrain" type="hfield" hfield="terrain" pos="{pos[0]} {pos[1]} {pos[2] + lo}"/>
      {extra}{bodies}</worldbody></mujoco>"""


def _random_field() -> np.ndarray:
    return np.random.default_rng(0).uniform(0.0, 0.3, (13, 17))


#: a body for models that need one (Motrix cannot hold a model without degrees of freedom)
_BALL = '<body name="ball" pos="0 0 1"><freejoint/><geom type="sphere" size="0.1"/></body>'


def test_colliding_height_fields_load_with_a_note_or_are_refused(tmp_path: Path) -> None:
    """Motrix collides height fields unlike MuJoCo (see the next test): a colliding one loads with a note
    saying so (the default, native_hfield True); motrix={"native_hfield": False} refuses it in one line
    naming the geom and the option; a visual-only one collides in neither engine and loads without a note."""
    path = _write(tmp_path, _hfield_mjcf(_random_field(), _BALL))
    with pytest.raises(
        ModelLoadError, match=r"Motrix collides height fields unlike MuJoCo \(geom 'terrain'.*native_hfield"
    ):
        make_backend("motrix", path, 1, motrix={"native_hfield": False})
    native = make_backend("motrix", path, 1)
    assert any("height-field collision" in n for n in native.notes)
    visual = _hfield_mjcf(_random_field(), _BALL).replace(
        'hfield="terrain" pos', 'hfield="terrain" contype="0" conaffinity="0" pos'
    )
    assert not any("height" in n for n in make_backend("motrix", _write(tmp_path, visual), 1).notes)


def test_height_field_surface_is_mujocos_but_its_collision_is_not(tmp_path: Path) -> None:
    """The surface Motrix loads is MuJoCo's: its samples (rows from -y), the geom's offset, and its own rays
    hit MuJoCo's triangles (diagonal (r, c)-(r+1, c+1)) within float32. Free bodies dropped on the treads
    of a stepped field come to rest: spheres where MuJoCo's do (within 1 mm: both engines' contact softness on a
    plane, 0.0-0.4 mm), boxes deeper (the refusal's reason; should this fail, Motrix collides boxes as
    MuJoCo does now: reconsider check_height_fields)."""
    import motrixsim as mx
    import mujoco
    from motrixsim import low

    field = _random_field()
    sim = make_backend("motrix", _write(tmp_path, _hfield_mjcf(field, _BALL)), 1, motrix={"native_hfield": True})
    m, mm = sim.engine.model, sim.engine.mx_model
    geom = mm.get_geom("terrain")
    np.testing.assert_allclose(geom.hfield.height_matrix, field - field.min(), atol=1e-6)
    np.testing.assert_allclose(geom.local_pose[:3], [0.3, -0.2, -0.1 + field.min()], atol=1e-7)
    data = mx.SceneData(mm)
    low.enable_immediate_raycast(mm)
    mm.step(data)  # Motrix's immediate rays need a completed broad phase
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    rng = np.random.default_rng(1)
    for x, y in np.stack([rng.uniform(-0.5, 1.1, 40), rng.uniform(-0.8, 0.4, 40)], 1):
        hit = low.raycast_closest(mm, data, low.RaycastInfo(low.Ray([x, y, 0.5], [0.0, 0.0, -1.0]), 5.0))
        ref = mujoco.mj_ray(m, d, np.array([x, y, 0.5]), np.array([0.0, 0.0, -1.0]), None, 1, -1, np.zeros(1, np.int32))
        assert hit is not None and abs(hit.distance - ref) < 1e-5

    stairs = np.tile((np.arange(21) // 5) * 0.1, (9, 1))  # 0.4 m flat treads, 0.1 m risers one cell wide
    treads = [0.3 - 1.0 + 0.2 + 0.5 * k for k in range(4)]  # x of the treads' middles
    bodies = "".join(
        f'<body name="{shape}{k}" pos="{x} {y} {0.1 * k + 0.102 - 0.1}"><freejoint/>'
        f'<geom type="{shape}" size="0.1 0.1 0.1" mass="1"/></body>'
        for k, x in enumerate(treads)
        for shape, y in (("sphere", -0.45), ("box", 0.05))
    )
    path = _write(tmp_path, _hfield_mjcf(stairs, bodies))
    rest, speed = {}, {}
    for name, opts in (("mujoco", {}), ("motrix", {"motrix": {"native_hfield": True}})):
        s = make_backend(name, path, 1, **opts)
        s.step(None, nsteps=int(0.6 / s.physics_dt))
        rest[name] = s.get_body_pos_w()[0, 1:, 2].double().numpy()  # sphere0, box0, sphere1, ...
        speed[name] = s.get_qvel()[0].reshape(-1, 6).abs().amax(1).numpy()
    tops = np.repeat(0.1 * np.arange(4) - 0.1 + 0.1, 2)  # tread k's top (z = -0.1 + 0.1 k), + 0.1 to the centre
    np.testing.assert_allclose(rest["mujoco"], tops, atol=5e-4)
    assert (speed["mujoco"] < 0.01).all()
    spheres, boxes = slice(0, None, 2), slice(1, None, 2)
    np.testing.assert_allclose(rest["motrix"][spheres], rest["mujoco"][spheres], atol=1e-3)
    assert (speed["motrix"][spheres] < 0.01).all()
    assert (rest["mujoco"][boxes] - rest["motrix"][boxes] > 3e-3).all()  # Motrix: ~6 mm deep, rocking


def test_rays_agree_with_mujocos_on_a_height_field(tmp_path: Path) -> None:
    """The scanner's rays (mj_ray on the compiled model posed at Motrix's state) agree with the MuJoCo
    backend's on a height field (from above, slanted, from below onto its base, from the side onto its
    wall), on moved free bodies right after set_state, a visual-only box (transparent) and an unbounded
    plane, with the scanned body excluded; misses read max_distance."""
    bodies = (
        '<body name="robot" pos="0 0 1"><freejoint/><geom type="sphere" size="0.15"/></body>'
        '<body name="crate" pos="1 0 1"><freejoint/><geom type="box" size="0.2 0.1 0.05"/></body>'
    )
    extra = (
        '<geom name="ghost" type="box" pos="0.3 -0.2 0.6" size="0.3 0.3 0.05" contype="0" conaffinity="0"/>'
        '<geom name="floor" type="plane" pos="0 0 -1" size="0.1 0.1 0.1"/>'
    )
    path = _write(tmp_path, _hfield_mjcf(_random_field(), bodies, extra=extra))
    sims = {
        "mujoco": make_backend("mujoco", path, 3),
        "motrix": make_backend("motrix", path, 3, motrix={"native_hfield": True}),
    }
    rng = np.random.default_rng(2)
    qpos = sims["mujoco"].get_qpos().numpy().astype(np.float64)
    qpos[:, 0:3] = [[0.1, -0.3, 0.8], [0.7, 0.1, 0.9], [3.0, 3.0, 0.5]]
    qpos[:, 7:10] = np.stack([rng.uniform(-0.4, 1.0, 3), rng.uniform(-0.7, 0.3, 3), [0.45, 0.5, 0.55]], 1)
    quat = rng.normal(size=(3, 4))
    qpos[:, 10:14] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    qpos = qpos.astype(np.float32).astype(np.float64)  # the state both engines hold
    points = np.stack([rng.uniform(-1.0, 1.0, 60), rng.uniform(-1.0, 1.0, 60), np.zeros(60)], 1)
    scans: dict[str, tuple[str, np.ndarray, dict[str, Any]]] = {
        "down": ("robot", points, {"alignment": "world", "max_distance": 5.0}),
        "slanted": ("world", points + [0.3, -0.2, 1.0], {"direction": (0.4, -0.2, -1.0)}),
        "below": ("world", points * [1, 1, 0] + [0.3, -0.2, -0.8], {"direction": (0, 0, 1), "max_distance": 2.0}),
        "side": ("world", points * [0, 1, 0.3] + [2.0, -0.2, 0.0], {"direction": (-1, 0, 0), "max_distance": 3.0}),
    }
    got = {}
    for name, sim in sims.items():
        sim.set_state(None, qpos)
        got[name] = {k: sim.create_height_scanner(b, p, **kw).distances().numpy() for k, (b, p, kw) in scans.items()}
    for k in scans:
        np.testing.assert_allclose(got["motrix"][k], got["mujoco"][k], atol=1e-5, err_msg=k)
    floor = np.abs(got["mujoco"]["down"] - (qpos[:, 2:3] + 1.0)) < 1e-5  # rays past the field meet the plane
    assert 0 < floor.mean() < 0.9
    for k in ("below", "side"):  # some rays meet the field's base or wall, the others miss
        assert 0 < (got["mujoco"][k] < scans[k][2]["max_distance"] - 1e-6).mean() < 1, k
