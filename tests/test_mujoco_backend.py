"""MuJoCo backend specifics the engine-neutral suite cannot reach: engine errors,
on-demand derived quantities, options, per-env model fields."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import InvalidArgumentError, SimBackendError

WELD_XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <body name="anchor" mocap="true" pos="0 0 1"/>
    <body name="box" pos="0 0 1">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <equality><weld body1="anchor" body2="box"/></equality>
</mujoco>
"""


def test_mujoco_simulation_error_is_reported_per_env(tmp_path):
    """A mujoco.batch.SimulationError in some envs becomes info['diverged'] for them; the others advance."""
    path = tmp_path / "weld.xml"
    path.write_text(WELD_XML)
    with make_backend("mujoco", path, 4) as sim:
        qpos0 = sim.get_qpos()
        eq_type = sim.engine.batch.expand("eq_type")
        good = int(eq_type[1, 0])
        eq_type[[1, 3], 0] = 99  # an unknown constraint type: MuJoCo raises in those envs
        info = sim.step(None, nsteps=3)
        assert info["diverged"].tolist() == [False, True, False, True]
        time = sim.engine.batch.bind("time")
        assert time[1] == 0 and time[3] == 0 and (time[[0, 2]] > 0).all()
        torch.testing.assert_close(sim.get_qpos()[[1, 3]], qpos0[[1, 3]], rtol=0, atol=0)
        eq_type[[1, 3], 0] = good
        assert not sim.step(None)["diverged"].any()


def _count_forward(sim, monkeypatch):
    calls = []
    real = sim.engine.batch.forward

    def spy(ids=None, stage=None):
        calls.append(None if ids is None else list(ids))
        return real(ids, stage=stage)

    monkeypatch.setattr(sim.engine.batch, "forward", spy)
    return calls


def test_derived_quantities_are_computed_once_on_demand(monkeypatch):
    """step leaves derived fields stale; the first derived read computes them once for all envs; qpos/qvel and a floating base's state never trigger it.

    (A field read for the first time is bound then and costs one forward of its own: the batch
    refreshes only bound fields, so binding all of them up front would tax every step.)
    """
    with make_backend("mujoco", "quadruped", 4) as sim:
        sim.get_body_pos_w([1]), sim.get_body_quat_w([1]), sim.get_site_pos_w()  # bind the fields
        calls = _count_forward(sim, monkeypatch)
        ctrl = np.zeros((4, sim.num_actuators))
        for _ in range(3):
            sim.step(ctrl, nsteps=2)
            sim.get_qpos(), sim.get_qvel(), sim.get_dof_pos()
            sim.get_base_pos(), sim.get_base_quat(), sim.get_base_lin_vel(), sim.get_base_ang_vel()
        assert calls == [], "reading state rows and the floating base must not run the stages"
        sim.get_body_pos_w([2])
        sim.get_body_quat_w([2])
        sim.get_site_pos_w()
        assert calls == [None], "one forward for all envs, then the fields are current"


def test_set_state_refreshes_only_the_named_envs_when_current(monkeypatch):
    """set_state on some envs recomputes derived fields for those envs only when the others are current."""
    with make_backend("mujoco", "arm7", 4) as sim:
        sim.get_body_pos_w([1])
        calls = _count_forward(sim, monkeypatch)
        q = sim.get_qpos()[[2, 0]].numpy() + 0.1
        sim.set_state([2, 0], q)
        assert calls == [[0, 2]]
        sim.step(np.zeros((4, 7)))
        sim.set_state([1], sim.get_qpos()[[1]].numpy())
        assert calls == [[0, 2]], "stale envs: nothing to keep, the next read computes all"
        sim.get_body_pos_w([1])
        assert calls == [[0, 2], None]


def test_options_are_validated():
    """nthread must be an int >= 0 and unknown options are named; device must exist."""
    with make_backend("mujoco", "pendulum", 2, nthread=1) as sim:
        assert sim.engine.nthread == 1
    with pytest.raises(InvalidArgumentError, match="nthread"):
        make_backend("mujoco", "pendulum", 2, nthread=-1)
    with pytest.raises(InvalidArgumentError, match="threads: unknown option; closest known keys: nthread"):
        make_backend("mujoco", "pendulum", 2, threads=2)
    if not torch.cuda.is_available():
        with pytest.raises(SimBackendError, match="cuda"):
            make_backend("mujoco", "pendulum", 2, device="cuda")


def test_per_env_model_fields_show_in_mass_and_gravity():
    """get_env_body_mass/get_env_gravity report per-env values once the batch expands those fields."""
    with make_backend("mujoco", "pendulum", 3) as sim:
        np.testing.assert_allclose(sim.get_env_body_mass()[:, 1].numpy(), 1.0)
        sim.engine.batch.expand("body_mass")[1, 1] = 2.5
        sim.engine.batch.expand("opt.gravity")[2] = (0, 0, -1.62)
        np.testing.assert_allclose(sim.get_env_body_mass()[:, 1].numpy(), [1.0, 2.5, 1.0])
        np.testing.assert_allclose(sim.get_env_gravity()[2].numpy(), [0, 0, -1.62], rtol=1e-6)


def test_mujoco_autoreset_is_off_on_the_backend_copy_only():
    """The backend disables MuJoCo's silent auto-reset on its own copy of the model."""
    import mujoco

    from simbackend.models import compile_model

    m = compile_model("pendulum")
    with make_backend("mujoco", m, 1) as sim:
        flag = int(mujoco.mjtDisableBit.mjDSBL_AUTORESET)
        assert sim.engine.model.opt.disableflags & flag
        assert not m.opt.disableflags & flag


FIELDS_XML = """
<mujoco>
  <compiler angle="degree"/>
  <option timestep="0.004" gravity="0.5 0 -9"/>
  <worldbody>
    <body name="box" pos="0 0 1">
      <joint name="slide" type="slide" axis="1 0 0" range="-0.5 0.25"/>
      <geom type="box" size="0.1 0.2 0.3" mass="3" pos="0.05 0 0" euler="0 0 30"/>
      <body name="arm" pos="0 0 -1">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <inertial pos="0 0 -0.1" mass="0.5" diaginertia="0.01 0.02 0.03"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="limited" joint="slide" ctrlrange="-1 1" forcerange="-7 3"/>
    <motor name="unlimited" joint="hinge"/>
  </actuator>
</mujoco>
"""


def test_model_fields_read_the_compiled_model(tmp_path):
    """model_fields: a rotated box's inertia tensor is R diag(I) R^T about its centre, in the body frame."""
    path = tmp_path / "fields.xml"
    path.write_text(FIELDS_XML)
    with make_backend("mujoco", str(path), 2) as sim:
        f = sim.model_fields()
    assert set(f) == {
        "body_mass",
        "body_com",
        "body_inertia",
        "joint_range",
        "actuator_ctrl_range",
        "actuator_force_range",
        "timestep",
        "gravity",
    }
    assert all(v.dtype == np.float64 for v in f.values())
    assert f["body_mass"].shape == (3,) and f["body_com"].shape == (3, 3) and f["body_inertia"].shape == (3, 3, 3)
    np.testing.assert_allclose(f["body_mass"], [0.0, 3.0, 0.5])
    np.testing.assert_allclose(f["body_com"], [[0, 0, 0], [0.05, 0, 0], [0, 0, -0.1]], atol=1e-12)
    np.testing.assert_allclose(f["body_inertia"][2], np.diag([0.01, 0.02, 0.03]), atol=1e-12)
    hx, hy, hz, m = 0.1, 0.2, 0.3, 3.0
    principal = m / 3 * np.array([hy**2 + hz**2, hx**2 + hz**2, hx**2 + hy**2])
    c, s = np.cos(np.pi / 6), np.sin(np.pi / 6)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    inertia = f["body_inertia"][1]
    np.testing.assert_allclose(inertia, rot @ np.diag(principal) @ rot.T, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(inertia, inertia.T)
    assert inertia[0, 1] != 0  # the rotation shows: not the principal moments
    np.testing.assert_array_equal(f["body_inertia"][0], np.zeros((3, 3)))
    np.testing.assert_allclose(f["joint_range"], [[-0.5, 0.25], [-np.inf, np.inf]])
    np.testing.assert_allclose(f["actuator_ctrl_range"], [[-1, 1], [-np.inf, np.inf]])
    np.testing.assert_allclose(f["actuator_force_range"], [[-7, 3], [-np.inf, np.inf]])
    assert f["timestep"].shape == () and float(f["timestep"]) == 0.004
    np.testing.assert_allclose(f["gravity"], [0.5, 0, -9])


def test_model_fields_is_optional_in_the_contract():
    """A backend that does not override model_fields says so with UnsupportedFeatureError."""
    from simbackend.backends.mujoco import MuJoCoEngine
    from simbackend.contract import SimBackend
    from simbackend.engine import Engine
    from simbackend.errors import UnsupportedFeatureError

    class NoFields(MuJoCoEngine):
        name = "nofields"
        model_fields = Engine.model_fields

    with (
        SimBackend(NoFields, "pendulum", 1) as sim,
        pytest.raises(UnsupportedFeatureError, match="'nofields'.*model_fields"),
    ):
        sim.model_fields()


def test_body_force_lever_arm_moves_with_the_body_over_substeps():
    """Reproducer: with nsteps > 1 the origin->com shift must use each substep's pose, not the call's first one.

    Fifty single steps (re-applying the force) and raw MuJoCo with the force at
    the moving frame origin agree; one 50-substep call must match them.
    """
    import mujoco

    from simbackend.models import compile_model

    def run(nsteps_per_call: int) -> np.ndarray:
        sim = make_backend("mujoco", "cartpole", 1)
        sim.set_state(None, [[0.1, 0.3]], [[0.5, 0.5]])
        for _ in range(50 // nsteps_per_call):
            sim.apply_body_force([2], [[[3.0, 0.0, 0.0]]])
            sim.step([[0.0]], nsteps=nsteps_per_call)
        return sim.get_qvel().numpy()[0].astype(np.float64)

    m = compile_model("cartpole")
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = [0.1, 0.3], [0.5, 0.5]
    for _ in range(50):
        mujoco.mj_forward(m, d)
        f = np.array([3.0, 0.0, 0.0])
        d.xfrc_applied[2, :3] = f
        d.xfrc_applied[2, 3:] = np.cross(d.xpos[2] - d.xipos[2], f)
        mujoco.mj_step(m, d)
    np.testing.assert_allclose(run(1), d.qvel, atol=1e-6)
    np.testing.assert_allclose(run(50), d.qvel, atol=1e-6)


def test_snapshot_restores_bit_for_bit_across_thread_counts():
    """A snapshot taken on one thread continues bit for bit on a two-thread batch of the same model
    (the batch's results do not depend on its thread count); two solver iterations make the warm
    start, which the snapshot holds, change the result."""
    ctrl = [torch.rand(8, 12, generator=torch.Generator().manual_seed(k)) for k in range(30)]
    one = make_backend("mujoco", "quadruped", 8, nthread=1, solver_iterations=2)
    two = make_backend("mujoco", "quadruped", 8, nthread=2, solver_iterations=2)
    assert two.engine.nthread == 2
    one.set_state(None, one.get_keyframe_qpos("stand").expand(8, -1))
    for c in ctrl[:10]:
        one.step(c, nsteps=2)
    two.set_physics_state(None, one.get_physics_state())
    for c in ctrl[10:]:
        one.step(c, nsteps=2)
        two.step(c, nsteps=2)
    assert torch.equal(one.get_qpos(), two.get_qpos()) and torch.equal(one.get_qvel(), two.get_qvel())
    assert torch.equal(one.get_time(), two.get_time())


def _world_xml(static_geoms: int, flags: str = "") -> str:
    """A box and a ball with an accelerometer (a sensor of the acceleration stage) over a world of
    ``static_geoms`` small boxes (a generated terrain's kind of world)."""
    tiles = "".join(
        f'<geom type="box" size="0.05 0.05 0.05" pos="{i % 20 * 0.1 - 1} {i // 20 * 0.1 - 1} -0.05"/>'
        for i in range(static_geoms)
    )
    return f"""
<mujoco>
  <option timestep="0.004">{flags}</option>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>{tiles}
    <body name="box" pos="0 0 0.3"><freejoint/><geom type="box" size="0.1 0.07 0.05" mass="1"/>
      <site name="imu"/></body>
    <body name="ball" pos="0.5 0.2 0.4"><freejoint/><geom size="0.08" mass="0.5"/></body>
  </worldbody>
  <sensor><accelerometer name="acc" site="imu"/></sensor>
</mujoco>
"""


def _trajectory(sim) -> list[torch.Tensor]:
    """Steps with a reset between them and body forces on some (a push that turns the box: its lever arm is
    re-shifted at every substep's pose), reading derived fields, the sensor and contact forces each step."""
    rows = []
    box = sim.get_body_ids(["box"])
    for i in range(40):
        if i == 20:
            q = sim.get_qpos()[[1]].clone()
            q[0, 2] += 0.2
            sim.set_state([1], q)
        if 25 <= i < 30:
            sim.apply_body_force(box, torch.tensor([[[30.0, 0.0, 40.0]]]).repeat(3, 1, 1), torch.ones(3, 1, 3))
        sim.step(None, nsteps=3)
        rows.append(torch.cat([sim.get_qpos(), sim.get_body_pos_w().flatten(1), sim.get_sensor_data("acc")], 1))
        if sim.contact_sensing:
            rows.append(sim.get_body_contact_force_w().flatten(1))
    return rows


@pytest.mark.parametrize("contact_sensing", [False, True])
def test_a_persistent_batch_gives_the_same_bits_and_no_forward_pass(tmp_path, monkeypatch, contact_sensing):
    """A world of 100+ static geoms runs a persistent batch with sleeping on and every tree's policy "never":
    the same bits as a shared batch (states, derived fields, an acceleration-stage sensor, contact forces,
    across a set_state and body forces), and a step leaves the derived fields current, so reading them runs no
    forward pass, nor does re-posing body forces at every substep (with contact sensing, or after body forces,
    the acceleration-stage sensor still asks for one)."""
    path = tmp_path / "world.xml"
    path.write_text(_world_xml(120))
    opts = {"contact_sensing": contact_sensing}
    with make_backend("mujoco", path, 3, mujoco={"persistent": False}, **opts) as shared:
        assert not shared.engine.persistent
        want = _trajectory(shared)
    with make_backend("mujoco", path, 3, **opts) as sim:
        assert sim.engine.persistent
        assert (sim.engine.model.tree_sleep_policy == int(mujoco.mjtSleepPolicy.mjSLEEP_NEVER)).all()
        got = _trajectory(sim)
        sim.get_body_quat_w(), sim.get_base_lin_vel()  # bound on first read (a forward pass each)
        calls = _count_forward(sim, monkeypatch)
        sim.step(None)
        sim.get_body_pos_w(), sim.get_body_quat_w(), sim.get_base_lin_vel()
        assert calls == []
        sim.get_sensor_data("acc")
        assert calls == ([None] if contact_sensing else [])  # the step stopped short of its stage to keep the forces
        calls.clear()
        sim.apply_body_force(sim.get_body_ids(["box"]), torch.ones(3, 1, 3))  # substep by substep, each posed
        sim.step(None, nsteps=3)
        sim.get_body_pos_w(), sim.get_body_quat_w(), sim.get_base_lin_vel()
        assert calls == []
        sim.get_sensor_data("acc")  # read without the forces, which the step cleared: a forward pass
        assert calls == [None]
    for a, b in zip(want, got, strict=True):
        assert torch.equal(a, b)


def test_a_persistent_batch_sees_per_env_model_fields_written_between_steps(tmp_path):
    """A persistent batch continues each step from the stages the last one computed; per-env masses, gravity
    and friction written between steps (domain randomization) still act from the next substep, bit for bit
    as on the shared batch."""
    path = tmp_path / "world.xml"
    path.write_text(_world_xml(120))
    runs = []
    for persistent in (False, True):
        with make_backend("mujoco", path, 3, mujoco={"persistent": persistent}, contact_sensing=True) as sim:
            e, m, rows = sim.engine, sim.engine.model, []
            for i in range(30):
                sim.step(None, nsteps=3)
                rows.append(torch.cat([sim.get_qpos(), sim.get_body_pos_w().flatten(1), sim.get_sensor_data("acc")], 1))
                if i in (5, 15):
                    k = 1.5 if i == 5 else 0.5
                    e.write_params(
                        np.arange(3),
                        {
                            "body_mass": np.tile(m.body_mass, (3, 1)) * k,
                            "gravity": np.tile(m.opt.gravity, (3, 1)) * k,
                            "geom_friction": np.tile(m.geom_friction, (3, 1, 1)) * 0.3 * k,
                        },
                    )
            runs.append(torch.stack(rows))
    assert torch.equal(runs[0], runs[1])


def test_a_model_that_enables_sleep_loads_and_nothing_sleeps(tmp_path):
    """A model with MuJoCo's sleeping enabled used to be refused by the shared batch; it now runs on a
    persistent one, and no body sleeps: a ball at rest for 2 s falls when lifted, as without the flag."""
    runs = []
    for flags in ('<flag sleep="enable"/>', ""):
        path = tmp_path / "sleepy.xml"
        path.write_text(_world_xml(0, flags))
        with make_backend("mujoco", path, 2) as sim:
            assert sim.engine.persistent == bool(flags)
            sim.step(None, nsteps=500)
            q = sim.get_qpos().clone()
            q[:, 9] += 0.3  # the ball, 0.3 m up
            sim.set_state(None, q)
            sim.step(None, nsteps=50)
            runs.append(sim.get_qpos())
    assert float(runs[0][0, 9]) < float(q[0, 9]) - 0.05  # it fell
    assert torch.equal(runs[0], runs[1])


def test_persistent_option_is_checked_and_ipc_needs_it(tmp_path):
    """``mujoco.persistent`` is True, False or unset; a model enabling IPC refuses False in one line."""
    with pytest.raises(InvalidArgumentError, match="mujoco.persistent: expected True or False"):
        make_backend("mujoco", "pendulum", 2, mujoco={"persistent": "yes"})
    path = tmp_path / "ipc.xml"
    path.write_text(
        _world_xml(0, '<flag ipc="enable"/>').replace('timestep="0.004"', 'timestep="0.004" integrator="discrete"')
    )
    with pytest.raises(InvalidArgumentError, match="mujoco.persistent: False, but the model enables IPC"):
        make_backend("mujoco", path, 2, mujoco={"persistent": False})
    with make_backend("mujoco", path, 2) as sim:  # unset: persistent, as IPC needs
        assert sim.engine.persistent
        sim.step(None, nsteps=5)
    with make_backend("mujoco", "pendulum", 2, mujoco={"persistent": True}) as sim:
        assert sim.engine.persistent
