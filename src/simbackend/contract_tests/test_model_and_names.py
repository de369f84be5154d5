"""Conformance: model queries, names and ids, and the shape/dtype/device of every getter.

Talks only to the contract. Runs against every built-in model and against
gymnasium's ant.xml when gymnasium is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import gymnasium_assets, random_qpos, to_np
from simbackend.errors import IndexRangeError
from simbackend.models import analytic

BUILTIN_MODELS = ("pendulum", "double_pendulum", "cartpole", "arm7", "quadruped")

#: expected (has_floating_base, base body name) per model
EXPECTED_BASE = {
    "pendulum": (False, "pendulum"),
    "double_pendulum": (False, "upper_link"),
    "cartpole": (False, "cart"),
    "arm7": (False, "base"),
    "quadruped": (True, "torso"),
    "gym:ant": (True, "torso"),
}

MODEL_PARAMS = [pytest.param(m, id=m) for m in BUILTIN_MODELS] + [pytest.param("gym:ant", id="gym-ant")]

NUM_ENVS = 3
JOINT_FREE, JOINT_BALL, JOINT_SLIDE, JOINT_HINGE = 0, 1, 2, 3


def _source(model: str) -> str:
    if model.startswith("gym:"):
        assets = gymnasium_assets()
        if assets is None:
            pytest.skip("gymnasium is not installed: its MJCF models are absent")
        return str(assets / f"{model[4:]}.xml")
    return model


@pytest.fixture(params=MODEL_PARAMS)
def model(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def sim(make_sim: Callable[..., Any], model: str) -> Any:
    s = make_sim(_source(model), NUM_ENVS)
    # a state that is not the default one, so that values are not trivially zero
    rng = np.random.default_rng(7)
    s.set_state(None, random_qpos(s, rng), rng.normal(scale=0.5, size=(s.num_envs, s.nv)))
    return s


# ----------------------------------------------------------------------------
# the table of every getter and model query with its expected shape
# ----------------------------------------------------------------------------


def getter_table(sim: Any, capabilities: Any) -> dict[str, tuple[Callable[[], Any], tuple[int, ...], torch.dtype]]:
    """name -> (call, expected shape, expected dtype) for every getter of the contract.

    Calls returning a tuple of tensors (gains, Jacobians) appear once per element.
    """
    N, nq, nv = sim.num_envs, sim.nq, sim.nv
    nb, ns, nd, nu = len(sim.body_names), len(sim.site_names), sim.num_dof, sim.num_actuators
    f32, i64 = torch.float32, torch.int64
    two = [0, nb - 1] if nb > 1 else [0]
    t: dict[str, tuple[Callable[[], Any], tuple[int, ...], torch.dtype]] = {
        # state: generalized coordinates
        "get_qpos": (sim.get_qpos, (N, nq), f32),
        "get_qvel": (sim.get_qvel, (N, nv), f32),
        "get_dof_pos": (sim.get_dof_pos, (N, nd), f32),
        "get_dof_vel": (sim.get_dof_vel, (N, nd), f32),
        # base
        "get_base_pos": (sim.get_base_pos, (N, 3), f32),
        "get_base_quat": (sim.get_base_quat, (N, 4), f32),
        "get_base_lin_vel": (sim.get_base_lin_vel, (N, 3), f32),
        "get_base_ang_vel": (sim.get_base_ang_vel, (N, 3), f32),
        # bodies, all and a subset
        "get_body_pos_w": (sim.get_body_pos_w, (N, nb, 3), f32),
        "get_body_quat_w": (sim.get_body_quat_w, (N, nb, 4), f32),
        "get_body_lin_vel_w": (sim.get_body_lin_vel_w, (N, nb, 3), f32),
        "get_body_ang_vel_w": (sim.get_body_ang_vel_w, (N, nb, 3), f32),
        "get_body_pos_b": (sim.get_body_pos_b, (N, nb, 3), f32),
        "get_body_quat_b": (sim.get_body_quat_b, (N, nb, 4), f32),
        "get_body_lin_vel_b": (sim.get_body_lin_vel_b, (N, nb, 3), f32),
        "get_body_ang_vel_b": (sim.get_body_ang_vel_b, (N, nb, 3), f32),
        "get_body_pos_w[ids]": (lambda: sim.get_body_pos_w(two), (N, len(two), 3), f32),
        "get_body_quat_w[ids]": (lambda: sim.get_body_quat_w(two), (N, len(two), 4), f32),
        "get_body_lin_vel_w[ids]": (lambda: sim.get_body_lin_vel_w(two), (N, len(two), 3), f32),
        "get_body_ang_vel_w[ids]": (lambda: sim.get_body_ang_vel_w(two), (N, len(two), 3), f32),
        "get_body_pos_b[ids]": (lambda: sim.get_body_pos_b(two), (N, len(two), 3), f32),
        "get_body_quat_b[ids]": (lambda: sim.get_body_quat_b(two), (N, len(two), 4), f32),
        "get_body_lin_vel_b[ids]": (lambda: sim.get_body_lin_vel_b(two), (N, len(two), 3), f32),
        "get_body_ang_vel_b[ids]": (lambda: sim.get_body_ang_vel_b(two), (N, len(two), 3), f32),
        "get_body_pos_w[int]": (lambda: sim.get_body_pos_w(nb - 1), (N, 1, 3), f32),
        # sites
        "get_site_pos_w": (sim.get_site_pos_w, (N, ns, 3), f32),
        "get_site_quat_w": (sim.get_site_quat_w, (N, ns, 4), f32),
        # model queries
        "get_actuator_ctrl_range": (sim.get_actuator_ctrl_range, (nu, 2), f32),
        "get_joint_range": (sim.get_joint_range, (nd, 2), f32),
        "get_default_qpos": (sim.get_default_qpos, (nq,), f32),
        "get_model_actuator_gains.kp": (lambda: sim.get_model_actuator_gains().kp, (nu,), f32),
        "get_model_actuator_gains.kv": (lambda: sim.get_model_actuator_gains().kv, (nu,), f32),
        "get_env_body_mass": (sim.get_env_body_mass, (N, nb), f32),
        "get_env_gravity": (sim.get_env_gravity, (N, 3), f32),
        # name -> id queries
        "get_body_ids": (lambda: sim.get_body_ids(list(sim.body_names)), (nb,), i64),
        "get_joint_ids": (lambda: sim.get_joint_ids(list(sim.joint_names)), (len(sim.joint_names),), i64),
        "get_site_ids": (lambda: sim.get_site_ids(list(sim.site_names)), (ns,), i64),
        "get_actuator_ids": (lambda: sim.get_actuator_ids(list(sim.actuator_names)), (nu,), i64),
        "get_sensor_ids": (lambda: sim.get_sensor_ids(list(sim.sensor_names)), (len(sim.sensor_names),), i64),
        "get_joint_dof_pos_indices": (lambda: sim.get_joint_dof_pos_indices(list(sim.dof_names)), (nd,), i64),
        "get_joint_dof_vel_indices": (lambda: sim.get_joint_dof_vel_indices(list(sim.dof_names)), (nd,), i64),
        "get_joint_qpos_indices": (lambda: sim.get_joint_qpos_indices(list(sim.dof_names)), (nd,), i64),
        "get_joint_qvel_indices": (lambda: sim.get_joint_qvel_indices(list(sim.dof_names)), (nd,), i64),
    }
    if capabilities.keyframes:
        for k in sim.info.keyframe_names:
            t[f"get_keyframe_qpos({k})"] = (lambda k=k: sim.get_keyframe_qpos(k), (nq,), f32)
    for sid, name in enumerate(sim.sensor_names):
        if sim.info.sensor_type[sid] in capabilities.sensor_types:
            dim = int(sim.info.sensor_dim[sid])
            t[f"get_sensor_data({name})"] = (lambda name=name: sim.get_sensor_data(name), (N, dim), f32)
    if capabilities.site_jacobians:
        for sid, name in enumerate(sim.site_names):
            t[f"jacp({name})"] = (lambda sid=sid: sim.get_site_jacobian_w(sid)[0], (N, 3, nv), f32)
            t[f"jacr({name})"] = (lambda sid=sid: sim.get_site_jacobian_w(sid)[1], (N, 3, nv), f32)
            cols = [nv - 1, 0]
            t[f"jacp({name})[cols]"] = (lambda sid=sid, c=cols: sim.get_site_jacobian_w(sid, c)[0], (N, 3, 2), f32)
            t[f"jacr({name})[cols]"] = (lambda sid=sid, c=cols: sim.get_site_jacobian_w(sid, c)[1], (N, 3, 2), f32)
    return t


def test_every_getter_shape_dtype_device(sim: Any, capabilities: Any) -> None:
    """Clause: outputs are torch tensors on backend.device, reals float32, ids int64, batch first — every getter and model query."""
    bad = []
    for name, (call, shape, dtype) in getter_table(sim, capabilities).items():
        out = call()
        if not isinstance(out, torch.Tensor):
            bad.append(f"{name}: returned {type(out).__name__}, not a torch.Tensor")
            continue
        if tuple(out.shape) != shape:
            bad.append(f"{name}: shape {tuple(out.shape)}, expected {shape}")
        if out.dtype != dtype:
            bad.append(f"{name}: dtype {out.dtype}, expected {dtype}")
        if out.device != sim.device:
            bad.append(f"{name}: device {out.device}, expected {sim.device}")
    assert not bad, "\n".join(bad)


def test_state_getters_finite(sim: Any, capabilities: Any) -> None:
    """Clause: getters describe a valid state — finite values everywhere except unlimited ranges (+-inf)."""
    for name, (call, _, _dtype) in getter_table(sim, capabilities).items():
        out = call()
        if name in ("get_actuator_ctrl_range", "get_joint_range"):
            assert not torch.isnan(out).any(), name
        else:
            assert torch.isfinite(out.double()).all(), name


def test_every_getter_returns_new_tensor(sim: Any, capabilities: Any) -> None:
    """Clause: every getter returns a new tensor the caller owns — mutating it does not change the next read, and the backend never writes into it later."""
    table = getter_table(sim, capabilities)
    first: dict[str, torch.Tensor] = {}
    kept: dict[str, torch.Tensor] = {}
    for name, (call, _, dtype) in table.items():
        out = call()
        kept[name] = out.clone()
        first[name] = out
        out.fill_(-12345 if dtype == torch.int64 else 12345.0)  # the caller scribbles on it
    for name, (call, _, dtype) in table.items():
        again = call()
        assert torch.equal(again, kept[name]), f"{name}: mutating a returned tensor changed the next read"
        assert again is not first[name], f"{name}: returned the same tensor object twice"
        scribbled = first[name]
        assert (scribbled == (-12345 if dtype == torch.int64 else 12345.0)).all(), (
            f"{name}: the next read wrote into the tensor returned before (shared buffer)"
        )
    # reads taken now must not be rewritten by later calls (set_state, step, further reads)
    taken = {name: call() for name, (call, _, _) in table.items()}
    snapshot = {name: v.clone() for name, v in taken.items()}
    rng = np.random.default_rng(3)
    sim.set_state(None, random_qpos(sim, rng), rng.normal(size=(sim.num_envs, sim.nv)))
    ctrl = np.zeros((sim.num_envs, sim.num_actuators))
    sim.step(ctrl if sim.num_actuators else None, nsteps=2)
    for call, _, _ in table.values():
        call()
    for name in taken:
        assert torch.equal(taken[name], snapshot[name]), f"{name}: the backend wrote into a tensor it returned earlier"


# ----------------------------------------------------------------------------
# names and ids
# ----------------------------------------------------------------------------


def _ids(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def test_name_tables_and_ids(sim: Any) -> None:
    """Clause: an id is the index into body_names (world body first), joint_names, site_names, actuator_names, sensor_names."""
    assert sim.body_names[0] == "world"
    for kind, names, lookup in (
        ("body", sim.body_names, sim.get_body_ids),
        ("joint", sim.joint_names, sim.get_joint_ids),
        ("site", sim.site_names, sim.get_site_ids),
        ("actuator", sim.actuator_names, sim.get_actuator_ids),
        ("sensor", sim.sensor_names, sim.get_sensor_ids),
    ):
        assert isinstance(names, tuple) and all(isinstance(n, str) for n in names), kind
        assert len(set(names)) == len(names), f"{kind} names are not unique: {names}"
        ids = lookup(list(names))
        assert ids.dtype == torch.int64 and ids.device == sim.device, kind
        np.testing.assert_array_equal(_ids(ids), np.arange(len(names)), err_msg=kind)
        # reversed order and single names map consistently
        np.testing.assert_array_equal(_ids(lookup(list(reversed(names)))), np.arange(len(names))[::-1], err_msg=kind)
        for i, n in enumerate(names):
            single = lookup(n)
            assert tuple(single.shape) == (1,) and int(single[0]) == i, f"{kind} {n!r}"
    assert len(sim.body_names) == sim.info.nbody
    assert sim.num_actuators == len(sim.actuator_names)
    assert int(sim.get_body_ids("world")[0]) == 0


def test_env_engines_name_the_engine_of_every_env(sim: Any) -> None:
    """Clause: env_engines is a tuple of N registered engine names in env order: the backend's name N times,
    or, for a mixed backend, each engine's block of envs in the order of its name ("mujoco:3,sapien:2")."""
    from simbackend.registry import available_backends

    engines = sim.env_engines
    assert isinstance(engines, tuple) and len(engines) == sim.num_envs
    assert set(engines) <= set(available_backends()), engines
    blocks = [[e, 0] for i, e in enumerate(engines) if i == 0 or engines[i - 1] != e]
    for e in engines:
        next(b for b in blocks if b[0] == e)[1] += 1
    assert len({b[0] for b in blocks}) == len(blocks), f"an engine's envs are not one block: {engines}"
    expected = blocks[0][0] if len(blocks) == 1 else ",".join(f"{e}:{n}" for e, n in blocks)
    assert sim.name == expected


def test_dof_names_and_index_maps(sim: Any) -> None:
    """Clause: get_dof_pos/vel are the hinge/slide joints in joint order; the joint index queries agree with the qpos/qvel layout."""
    info = sim.info
    jt = np.asarray(info.joint_type)
    expected_dof = [n for n, t in zip(sim.joint_names, jt) if t in (JOINT_SLIDE, JOINT_HINGE)]
    assert sim.dof_names == tuple(expected_dof)
    assert sim.num_dof == len(expected_dof)
    nd = sim.num_dof
    names = list(sim.dof_names)
    np.testing.assert_array_equal(_ids(sim.get_joint_dof_pos_indices(names)), np.arange(nd))
    np.testing.assert_array_equal(_ids(sim.get_joint_dof_vel_indices(names)), np.arange(nd))
    jids = _ids(sim.get_joint_ids(names))
    qcols = _ids(sim.get_joint_qpos_indices(names))
    vcols = _ids(sim.get_joint_qvel_indices(names))
    np.testing.assert_array_equal(qcols, np.asarray(info.joint_qposadr)[jids])
    np.testing.assert_array_equal(vcols, np.asarray(info.joint_dofadr)[jids])
    np.testing.assert_array_equal(qcols, info.dof_qpos_index)
    np.testing.assert_array_equal(vcols, info.dof_qvel_index)
    assert ((qcols >= 0) & (qcols < sim.nq)).all() and ((vcols >= 0) & (vcols < sim.nv)).all()
    # a subset in a different order maps column by column
    if nd >= 2:
        sub = [names[-1], names[0]]
        np.testing.assert_array_equal(_ids(sim.get_joint_dof_pos_indices(sub)), [nd - 1, 0])
        np.testing.assert_array_equal(_ids(sim.get_joint_qpos_indices(sub)), qcols[[nd - 1, 0]])
        np.testing.assert_array_equal(_ids(sim.get_joint_qvel_indices(sub)), vcols[[nd - 1, 0]])
    # the dof getters are exactly those columns of qpos/qvel (set a distinct value in every column)
    rng = np.random.default_rng(11)
    qpos = random_qpos(sim, rng)
    qvel = rng.normal(size=(sim.num_envs, sim.nv))
    sim.set_state(None, qpos, qvel)
    np.testing.assert_array_equal(to_np(sim.get_dof_pos()), to_np(sim.get_qpos())[:, qcols])
    np.testing.assert_array_equal(to_np(sim.get_dof_vel()), to_np(sim.get_qvel())[:, vcols])
    np.testing.assert_allclose(to_np(sim.get_dof_pos()), qpos[:, qcols], atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_dof_vel()), qvel[:, vcols], atol=1e-6, rtol=1e-6)
    # free and ball joints have no dof column, but qpos/qvel columns: 7/6 and 4/3
    for j, (name, t) in enumerate(zip(sim.joint_names, jt)):
        if t in (JOINT_FREE, JOINT_BALL):
            for query in (sim.get_joint_dof_pos_indices, sim.get_joint_dof_vel_indices):
                with pytest.raises(IndexRangeError):
                    query([name])
            width_q, width_v = (7, 6) if t == JOINT_FREE else (4, 3)
            np.testing.assert_array_equal(
                _ids(sim.get_joint_qpos_indices(name)), info.joint_qposadr[j] + np.arange(width_q)
            )
            np.testing.assert_array_equal(
                _ids(sim.get_joint_qvel_indices(name)), info.joint_dofadr[j] + np.arange(width_v)
            )


def test_model_query_values(sim: Any, model: str, capabilities: Any) -> None:
    """Clause: model queries — ctrl/joint ranges [low, high] with low <= high, default qpos with unit quaternions, gravity along -Z, world body massless."""
    ctrl_range = to_np(sim.get_actuator_ctrl_range())
    joint_range = to_np(sim.get_joint_range())
    assert not np.isnan(ctrl_range).any() and not np.isnan(joint_range).any()
    assert (ctrl_range[:, 0] <= ctrl_range[:, 1]).all(), ctrl_range
    assert (joint_range[:, 0] <= joint_range[:, 1]).all(), joint_range
    # joint ranges are per dof: they hold the model's per-joint limits in dof order
    expected = np.asarray(sim.info.joint_range)[sim.info.dof_joints]
    np.testing.assert_allclose(joint_range, expected.astype(np.float32), rtol=0, atol=0)
    q0 = to_np(sim.get_default_qpos())
    for start in sim.info.quat_qpos_index:
        assert abs(np.linalg.norm(q0[start : start + 4]) - 1) < 1e-6
    gravity = to_np(sim.get_env_gravity())
    if not model.startswith("gym:"):
        np.testing.assert_allclose(gravity, np.tile([0, 0, -analytic.GRAVITY], (sim.num_envs, 1)), atol=1e-6)
    assert gravity[:, 2].max() < 0 and np.abs(gravity[:, :2]).max() < 1e-6
    mass = to_np(sim.get_env_body_mass())
    assert (mass[:, 0] == 0).all() and (mass[:, 1:] >= 0).all() and mass[:, 1:].sum(axis=1).min() > 0
    gains = sim.get_model_actuator_gains()
    kp, kv = to_np(gains.kp), to_np(gains.kv)
    assert (kp >= 0).all() and (kv >= 0).all()
    kinds = sim.info.actuator_kind
    for a, kind in enumerate(kinds):
        if kind == "motor":
            assert kp[a] == 0 and kv[a] == 0, sim.actuator_names[a]
        if kind == "position":
            assert kp[a] > 0, sim.actuator_names[a]
    assert sim.physics_dt > 0 and math.isfinite(sim.physics_dt)


def test_builtin_model_specifics(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: names and model queries are the compiled model's — arm7/quadruped keyframes, ctrl ranges and gains match the MJCF."""
    arm = make_sim("arm7", 2)
    assert arm.joint_names[:7] == tuple(f"joint{k}" for k in range(1, 8))
    assert arm.actuator_names == tuple(f"act{k}" for k in range(1, 8))
    assert "ee_site" in arm.site_names and "cube" in arm.body_names and "cube_free" in arm.joint_names
    assert arm.nq == 14 and arm.nv == 13 and arm.num_dof == 7
    np.testing.assert_allclose(to_np(arm.get_actuator_ctrl_range()), analytic.ARM7_JOINT_RANGES, atol=1e-6)
    np.testing.assert_allclose(to_np(arm.get_joint_range()), analytic.ARM7_JOINT_RANGES, atol=1e-6)
    np.testing.assert_allclose(to_np(arm.get_model_actuator_gains().kp), analytic.ARM7_KP, rtol=1e-6)
    cube_adr = int(arm.info.joint_qposadr[int(arm.get_joint_ids("cube_free")[0])])
    np.testing.assert_allclose(
        to_np(arm.get_default_qpos())[cube_adr : cube_adr + 7], np.r_[analytic.ARM7_CUBE_POS, 1, 0, 0, 0], atol=1e-6
    )
    quad = make_sim("quadruped", 2)
    assert quad.nq == 19 and quad.nv == 18 and quad.num_dof == 12 and quad.num_actuators == 12
    assert quad.dof_names == tuple(
        f"{leg}_{part}" for leg in analytic.QUADRUPED_LEGS for part in ("hip", "thigh", "calf")
    )
    np.testing.assert_allclose(to_np(quad.get_actuator_ctrl_range()), np.tile([-1.0, 1.0], (12, 1)))
    if capabilities.keyframes:
        home = to_np(arm.get_keyframe_qpos("home"))
        assert home.shape == (arm.nq,)
        np.testing.assert_allclose(home[:7], analytic.ARM7_HOME, atol=1e-6)
        np.testing.assert_allclose(home[cube_adr : cube_adr + 7], np.r_[analytic.ARM7_CUBE_POS, 1, 0, 0, 0], atol=1e-6)
        stand = to_np(quad.get_keyframe_qpos("stand"))
        assert stand.shape == (quad.nq,)
        np.testing.assert_allclose(stand, analytic.QUADRUPED_STAND_QPOS, atol=1e-6)


def test_floating_base_and_base_body(sim: Any, model: str) -> None:
    """Clause: the base is the root body of the first kinematic tree; has_floating_base iff it hangs on a free joint."""
    floating, base_name = EXPECTED_BASE[model]
    assert sim.has_floating_base is floating
    assert isinstance(sim.base_body_id, int)
    assert sim.body_names[sim.base_body_id] == base_name
    assert int(sim.get_body_ids(base_name)[0]) == sim.base_body_id
    # the base getters read that body
    base = sim.base_body_id
    np.testing.assert_array_equal(to_np(sim.get_base_pos()), to_np(sim.get_body_pos_w([base]))[:, 0])
    np.testing.assert_array_equal(to_np(sim.get_base_quat()), to_np(sim.get_body_quat_w([base]))[:, 0])
    if floating:
        # a floating base's pose is the first free joint's qpos block
        root = [j for j, t in enumerate(sim.info.joint_type) if t == JOINT_FREE][0]
        adr = int(sim.info.joint_qposadr[root])
        qpos = to_np(sim.get_qpos())
        np.testing.assert_allclose(to_np(sim.get_base_pos()), qpos[:, adr : adr + 3], atol=1e-6)
        bq, jq = to_np(sim.get_base_quat()), qpos[:, adr + 3 : adr + 7]
        assert np.minimum(np.abs(bq - jq).max(-1), np.abs(bq + jq).max(-1)).max() < 1e-6


@pytest.mark.parametrize("kf_model", ["arm7", "quadruped"])
def test_keyframe_qpos_shapes(make_sim: Callable[..., Any], require: Callable[..., None], kf_model: str) -> None:
    """Clause: get_keyframe_qpos(name) is (nq,) float32 with unit quaternions, for every keyframe of the model."""
    require("keyframes")
    sim = make_sim(kf_model, NUM_ENVS)
    names = sim.info.keyframe_names
    assert names, f"{kf_model} ships keyframes"
    for k in names:
        q = sim.get_keyframe_qpos(k)
        assert tuple(q.shape) == (sim.nq,) and q.dtype == torch.float32 and q.device == sim.device
        qn = to_np(q)
        assert np.isfinite(qn).all()
        for start in sim.info.quat_qpos_index:
            assert abs(np.linalg.norm(qn[start : start + 4]) - 1) < 1e-6
