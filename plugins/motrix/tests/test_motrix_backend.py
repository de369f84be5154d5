"""What only the Motrix plugin does: loading through Motrix's own compiler, the name mapping, xyzw.

The contract itself is checked by the conformance suite (``pytest contract_tests --sim motrix``);
these tests cover the plugin's own layer: what Motrix's compiler ignores is sorted into notes and
rejections, the state is one permutation of Motrix's arrays, and the plugin is found by entry point.
"""

from __future__ import annotations

from pathlib import Path

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
