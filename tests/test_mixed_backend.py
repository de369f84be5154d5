"""Mixed backends (``make_backend("mujoco,motrix", ...)``): routing, isolation, refusals, capabilities, snapshots.

The conformance suite runs unchanged on ``--sim mujoco,motrix`` and ``--sim mujoco,sapien``; this file checks
what only a mix has: that each env's inputs reach its own engine (env i follows, bit for bit, the plain backend
of its engine), that writing one engine's envs leaves the other's alone, that a plan term one engine lacks is
refused naming it, that bad specs build nothing, and how capabilities and snapshots combine.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simbackend.errors import InvalidArgumentError, SimBackendError, SnapshotMismatchError, UnsupportedFeatureError
from simbackend.mixing import MixedEngine, combined_capabilities, lacking, parse_mix
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.registry import available_backends, make_backend

pytestmark = pytest.mark.skipif("motrix" not in available_backends(), reason="the Motrix plugin is not installed")

N = 5  # mujoco envs 0-2, motrix envs 3-4
MIX = "mujoco,motrix"


def _inputs(sim, steps: int, seed: int = 0) -> dict:
    """float32 inputs (what a policy gives): a start state near the stand keyframe, controls, and a
    force on the trunk every third step (the keyframe's unit quaternion is kept: the front end normalises
    quaternions in float64, which a float32 mix then rounds)."""
    g = torch.Generator().manual_seed(seed)
    info = sim.info
    q0 = sim.get_keyframe_qpos("stand").expand(sim.num_envs, -1).clone()
    dof = torch.as_tensor(info.dof_qpos_index)
    q0[:, dof] += 0.05 * torch.randn(sim.num_envs, dof.numel(), generator=g)
    q0[:, :2] += 0.2 * torch.rand(sim.num_envs, 2, generator=g)
    lo, hi = sim.get_actuator_ctrl_range().T
    ctrl = [lo + (hi - lo) * torch.rand(sim.num_envs, sim.num_actuators, generator=g) for _ in range(steps)]
    forces = [20 * torch.randn(sim.num_envs, 1, 3, generator=g) if t % 3 == 0 else None for t in range(steps)]
    return {"q0": q0, "v0": 0.1 * torch.randn(sim.num_envs, sim.nv, generator=g), "ctrl": ctrl, "forces": forces}


def _run(sim, inputs: dict, rows: slice = slice(None)) -> list[torch.Tensor]:
    """Trajectory of qpos, qvel and body positions under ``inputs`` (their ``rows``)."""
    trunk = sim.get_body_ids("torso")
    sim.set_state(None, inputs["q0"][rows], inputs["v0"][rows])
    out = []
    for u, f in zip(inputs["ctrl"], inputs["forces"]):
        if f is not None:
            sim.apply_body_force(trunk, f[rows])
        info = sim.step(u[rows], nsteps=2)
        assert not bool(info["diverged"].any())
        out += [sim.get_qpos(), sim.get_qvel(), sim.get_body_pos_w()]
    return out


def _assert_equal(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(a, b), f"{what}: output {i} differs, max {float((a - b).abs().max()):.3g}"


# ----------------------------------------------------------------------
# (a) each env's inputs reach its own engine
# ----------------------------------------------------------------------
@pytest.mark.parametrize("parallel", [True, False])
def test_env_i_follows_its_engines_plain_backend_bit_for_bit(parallel: bool) -> None:
    """Env i of the MuJoCo block equals env i of plain MuJoCo; env i of the Motrix block equals env
    i - 3 of a plain Motrix backend of two envs; under the same controls and body forces, stepped in
    threads or one part after the other."""
    with make_backend(MIX, "quadruped", N) as sim:
        assert sim.name == "mujoco:3,motrix:2" and sim.engine.parts == (("mujoco", 0, 3), ("motrix", 3, 5))
        sim.engine.parallel = parallel
        inputs = _inputs(sim, 12)
        got = _run(sim, inputs)
    with make_backend("mujoco", "quadruped", N) as plain:
        want_mj = _run(plain, inputs)
    with make_backend("motrix", "quadruped", 2) as plain:
        want_mx = _run(plain, inputs, slice(3, 5))
    _assert_equal([g[:3] for g in got], [w[:3] for w in want_mj], "mujoco block")
    _assert_equal([g[3:] for g in got], want_mx, "motrix block")
    assert not torch.equal(got[-1][:3, :], got[-1][:3, :] * 0), "nothing moved"


# ----------------------------------------------------------------------
# (b) writing one engine's envs leaves the other's alone
# ----------------------------------------------------------------------
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("block", [slice(0, 2), slice(3, 5)])
def test_a_reset_of_one_engines_envs_leaves_the_other_engine_bit_identical(block: slice, masked: bool) -> None:
    """Two mixes under the same inputs; one has some envs of one engine reset mid-run (by ids, or by a
    mask with N rows): every env of the other engine (and every other env of its own) goes on bit for bit as
    in the mix left alone."""
    others = [i for i in range(N) if i not in range(N)[block]]  # the other engine's envs, and the rest of its own
    runs = []
    for reset in (False, True):
        # deferred checks: a mask with N rows reaches the engines' write_state_masked
        with make_backend(MIX, "quadruped", N, deferred_checks=masked) as sim:
            inputs = _inputs(sim, 10, seed=1)
            sim.set_state(None, inputs["q0"], inputs["v0"])
            out = []
            for t, u in enumerate(inputs["ctrl"]):
                if reset and t == 4:
                    if masked:
                        mask = torch.zeros(N, dtype=torch.bool)
                        mask[block] = True
                        sim.set_state(mask, inputs["q0"].flip(0), None)
                    else:
                        ids = list(range(N))[block]
                        sim.set_state(ids, inputs["q0"][[0] * len(ids)], None)
                sim.step(u, nsteps=2)
                out += [sim.get_qpos(), sim.get_qvel(), sim.get_body_lin_vel_w(), sim.get_time()]
            runs.append(out)
    quiet, reset_run = runs
    _assert_equal([x[others] for x in reset_run], [x[others] for x in quiet], "the other engine's envs")
    touched = list(range(N))[block]
    assert not torch.equal(reset_run[-4][touched], quiet[-4][touched]), "the reset changed nothing: a blind test"


# ----------------------------------------------------------------------
# (c) a plan term one engine lacks
# ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["actuator_strength", "joint_damping"])
def test_a_plan_term_one_engine_lacks_is_refused_naming_the_term_and_the_engine(kind: str) -> None:
    plan = RandomizationPlan((Term(kind, Distribution.uniform(0.8, 1.2), name="weak"),), seed=3)
    with make_backend(MIX, "quadruped", 4) as sim, make_backend("mujoco", "quadruped", 4) as plain:
        assert kind in plain.get_dr_capabilities()  # MuJoCo alone applies it
        assert kind not in sim.get_dr_capabilities()
        before = sim.get_qpos().clone()
        with pytest.raises(UnsupportedFeatureError) as e:
            sim.apply_init_randomization(plan)
        msg = str(e.value)
        assert kind in msg and "'weak'" in msg and "motrix (envs 2-3)" in msg and "mujoco (" not in msg, msg
        assert "\n" not in msg and torch.equal(sim.get_qpos(), before)
        assert sim.apply_init_randomization(plan, strict=False) == ["weak"]  # skipped by name when asked


def test_a_plan_of_shared_terms_randomizes_each_engine_from_the_global_env_ids() -> None:
    """A term every engine has reaches both parts; the values drawn for env i are those a plain backend
    draws for env i (draws are keyed by the global env id), read back from each engine."""
    plan = RandomizationPlan(
        (Term("body_mass", Distribution.uniform(0.7, 1.3)), Term("geom_friction", Distribution.uniform(0.5, 1.5))),
        seed=11,
    )
    with make_backend(MIX, "quadruped", 4) as sim, make_backend("mujoco", "quadruped", 4) as plain:
        sim.apply_init_randomization(plan)
        plain.apply_init_randomization(plan)
        for getter in ("get_env_body_mass", "get_env_geom_friction"):
            np.testing.assert_allclose(getattr(sim, getter)(), getattr(plain, getter)(), rtol=1e-6, err_msg=getter)
        motrix = sim.engine.part_engines[1].read_params("body_mass")
        np.testing.assert_allclose(motrix, plain.get_env_body_mass()[2:].double().numpy(), rtol=1e-6)


# ----------------------------------------------------------------------
# (d) bad specs
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sim", "num_envs", "options", "words"),
    [
        ("mujoco,motrx", 4, {}, r"sim: .*unknown engine 'motrx'; did you mean 'motrix'"),
        ("mujoco,mujoco", 4, {}, r"sim: .*'mujoco' named twice"),
        ("mujoco:0,motrix:4", 4, {}, r"sim: .*count of 'mujoco' is 0"),
        ("mujoco:-1,motrix:5", 4, {}, r"sim: .*count of 'mujoco' is '-1'"),
        ("mujoco:2.5,motrix:2", 4, {}, r"sim: .*count of 'mujoco' is '2.5'"),
        ("mujoco:2,motrix:3", 4, {}, r"sim: .*sum to 5, but num_envs is 4"),
        ("mujoco:2,motrix", 4, {}, r"sim: .*every engine a count .* or none"),
        ("mujoco,,motrix", 4, {}, r"sim: .*empty engine name"),
        ("mujoco,motrix,sapien", 2, {}, r"sim: .*2 envs shared among 3 engines"),
        ("mujoco:4", 5, {}, r"sim: .*sum to 4, but num_envs is 5"),
        (MIX, 4, {"shards": 2}, r"shards: a mixed backend"),
        (MIX, 4, {"motrix": {"solver_tolerance": -1}}, r"motrix.solver_tolerance"),
        (MIX, 4, {"mujoco": {"no_such_key": 1}}, r"mujoco.no_such_key"),
        (MIX, 0, {}, r"num_envs"),
        (MIX, 4, {"device": "meta"}, r"device"),
    ],
)
def test_bad_specs_give_one_line_and_build_nothing(monkeypatch, sim, num_envs, options, words) -> None:
    from simbackend.engine import Engine

    built = []
    real = Engine.__init__

    def counting(self, build):
        built.append(type(self).__name__)
        real(self, build)

    monkeypatch.setattr(Engine, "__init__", counting)
    options = dict(options)
    device = options.pop("device", None)
    with pytest.raises(SimBackendError, match=words) as e:
        make_backend(sim, "pendulum", num_envs, device=device, **options).close()
    assert isinstance(e.value, (InvalidArgumentError, ValueError)) and "\n" not in str(e.value)
    assert built == [], f"built {built} before refusing"


def test_specs_are_normalised_and_a_single_engine_keeps_the_plain_path() -> None:
    from simbackend.backends.mujoco import MuJoCoEngine

    with make_backend(" MuJoCo : 3 , Motrix:1 ", "pendulum", 4) as sim:
        assert isinstance(sim.engine, MixedEngine) and sim.name == "mujoco:3,motrix:1"
        assert sim.engine.parts == (("mujoco", 0, 3), ("motrix", 3, 4))
    with make_backend("mujoco:4", "pendulum", 4) as sim:
        assert type(sim.engine) is MuJoCoEngine and sim.name == "mujoco"
    assert parse_mix("mujoco,motrix,sapien", 8).counts == (3, 3, 2)  # numpy.array_split's sizes
    assert [len(a) for a in np.array_split(np.arange(8), 3)] == [3, 3, 2]


def test_one_env_runs_on_the_first_engine_and_keeps_the_mixs_capabilities() -> None:
    with make_backend(MIX, "quadruped", 1) as one, make_backend(MIX, "quadruped", 4) as four:
        assert one.name == "mujoco:1,motrix:0" and one.engine.parts == (("mujoco", 0, 1), ("motrix", 1, 1))
        assert [type(e).name for e in one.engine.part_engines] == ["mujoco"]
        assert one.capabilities == four.capabilities
        assert any(line.startswith("motrix (no envs): holds no env") for line in one.notes)
        one.step(torch.zeros(1, one.num_actuators), 2)


def test_engine_options_reach_their_own_part_only() -> None:
    pytest.importorskip("sapien")
    with make_backend("mujoco,sapien", "pendulum", 2, sapien={"solver": "tgs"}) as sim:
        notes = sim.notes
    assert any(n.startswith("sapien (env 1): solver: PhysX TGS") for n in notes), notes


# ----------------------------------------------------------------------
# (e) capabilities
# ----------------------------------------------------------------------
def test_capabilities_are_what_every_engine_has() -> None:
    with (
        make_backend(MIX, "quadruped", 4) as sim,
        make_backend("mujoco", "quadruped", 1) as mj,
        make_backend("motrix", "quadruped", 1) as mx,
    ):
        caps, a, b = sim.capabilities, mj.capabilities, mx.capabilities
        assert caps == combined_capabilities([a, b])
        assert caps.sensor_types == a.sensor_types & b.sensor_types and "accelerometer" not in caps.sensor_types
        assert caps.domain_randomization == a.domain_randomization & b.domain_randomization
        assert caps.joint_types == a.joint_types & b.joint_types
        assert caps.actuator_kinds == a.actuator_kinds & b.actuator_kinds
        assert caps.snapshot_restore and not caps.snapshot_exact  # Motrix's snapshots are not exact
        assert caps.renderers_absent == a.renderers_absent + b.renderers_absent
        assert not caps.gpu and caps.max_envs is None and not caps.deterministic
        assert lacking(sim.engine, "actuator_strength:init") == ("motrix (envs 2-3)",)
        assert lacking(sim.engine, "sensor_types=accelerometer") == ("motrix (envs 2-3)",)
        assert lacking(sim.engine, "snapshot_exact") == ("motrix (envs 2-3)",)
        assert lacking(sim.engine, "body_mass:init") == ()
        assert type(sim.engine).dtype == torch.float32  # Motrix is float32
        with pytest.raises(UnsupportedFeatureError, match="mujoco:2,motrix:2.*model_fields"):
            sim.engine.model_fields()
    joined = combined_capabilities([a, b, a])
    assert joined == caps  # idempotent


# ----------------------------------------------------------------------
# (f) snapshots
# ----------------------------------------------------------------------
def _round_trip(sim, inputs: dict, rows: slice = slice(None)) -> tuple[torch.Tensor, ...]:
    """Run, snapshot, run on (original), restore, run on twice: the three continuations and the qpos
    at the snapshot."""
    sim.set_state(None, inputs["q0"][rows], inputs["v0"][rows])
    for u in inputs["ctrl"][:6]:
        sim.step(u[rows], nsteps=2)
    snap = sim.get_physics_state()
    at_snap = sim.get_qpos().clone()

    def rest() -> torch.Tensor:
        for u in inputs["ctrl"][6:]:
            sim.step(u[rows], nsteps=2)
        return torch.cat([sim.get_qpos(), sim.get_qvel(), sim.get_time()[:, None].float()], 1)

    original = rest()
    sim.set_physics_state(None, snap)
    first = rest()
    sim.set_physics_state(None, snap)
    return original, first, rest(), snap, at_snap


def test_snapshots_round_trip_across_the_mix_and_stay_in_their_engine() -> None:
    """Save and restore every env of the mix: each block continues as its engine's plain backend does
    after the same round trip (MuJoCo's bit for bit the original, Motrix's as plain Motrix's, which is
    not exact); a row restores into another env of its engine, never into an env of another engine."""
    with make_backend(MIX, "quadruped", 4, solver_iterations=4) as sim:
        inputs = _inputs(sim, 16, seed=2)
        original, first, second, snap, at_snap = _round_trip(sim, inputs)
        widths = [e.state_width for e in sim.engine.part_engines]
        assert sim.engine.state_width == 1 + max(widths) and snap.shape == (4, sim.snapshot_layout.width)
        assert torch.equal(first, second), "restoring one snapshot twice gave two trajectories"
        assert torch.equal(first[:2], original[:2]), "MuJoCo's snapshots are exact"
        with make_backend("motrix", "quadruped", 2, solver_iterations=4) as plain:
            _, plain_first, _, _, _ = _round_trip(plain, inputs, slice(2, 4))
        assert torch.equal(first[2:], plain_first), "the Motrix block's round trip is not plain Motrix's"
        # a row restores into another env of the engine that made it ...
        sim.set_physics_state([1, 3], snap[[0, 2]])
        assert torch.equal(sim.get_qpos()[1], at_snap[0])
        assert (sim.get_qpos()[3] - at_snap[2]).abs().max() < 1e-6  # Motrix recomputes from its own state
        # ... and never into an env of another engine
        before = [sim.get_qpos().clone(), sim.get_qvel().clone(), sim.get_time().clone()]
        with pytest.raises(SnapshotMismatchError, match=r"env_ids \[3\].*'mujoco'.*'motrix'.*set_state") as e:
            sim.set_physics_state([0, 3], snap[[0, 1]])
        assert "\n" not in str(e.value)
        after = [sim.get_qpos(), sim.get_qvel(), sim.get_time()]
        assert all(torch.equal(x, y) for x, y in zip(before, after))


def test_a_diverged_env_of_each_engine_is_put_back_and_the_others_step() -> None:
    """A force far too large for one env of each engine: those two are reported and put back where the step
    found them (each by its own engine's revert), the others step on."""
    with make_backend(MIX, "quadruped", 4) as sim:
        inputs = _inputs(sim, 2, seed=4)
        sim.set_state(None, inputs["q0"], inputs["v0"])
        sim.step(inputs["ctrl"][0], nsteps=2)
        before = [sim.get_qpos().clone(), sim.get_qvel().clone(), sim.get_body_pos_w().clone()]
        force = torch.zeros(4, 1, 3)
        force[[1, 3], 0, 2] = 1e12  # (1e30 makes Motrix 0.x panic in its solver: a plugin bug, reported)
        sim.apply_body_force(sim.get_body_ids("torso"), force)
        info = sim.step(inputs["ctrl"][1], nsteps=2)
        assert info["diverged"].tolist() == [False, True, False, True]
        after = [sim.get_qpos(), sim.get_qvel(), sim.get_body_pos_w()]
        for a, b in zip(after, before):
            assert torch.equal(a[[1, 3]], b[[1, 3]]) and not torch.equal(a[[0, 2]], b[[0, 2]])


def test_simbackend_contract_takes_a_mix(monkeypatch) -> None:
    """``simbackend contract --sim 'MuJoCo, Motrix'`` hands the normalised spec to the suite; a bad spec
    exits 2 naming it, before pytest runs."""
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    calls: list[list[str]] = []
    monkeypatch.setattr(pytest, "main", lambda args, *a, **k: calls.append(list(args)) or 0)
    runner = CliRunner()
    result = runner.invoke(app, ["contract", "--sim", "MuJoCo, Motrix", "-q"])
    assert result.exit_code == 0, result.output
    assert calls[0][calls[0].index("--sim") + 1] == "mujoco,motrix"
    result = runner.invoke(app, ["contract", "--sim", "mujoco,motrx", "-q"])
    assert result.exit_code == 2 and "did you mean 'motrix'" in " ".join(result.output.split()), result.output
    assert len(calls) == 1


def test_a_part_failing_to_build_closes_the_parts_built_before_it(monkeypatch) -> None:
    from simbackend.backends.mujoco import MuJoCoEngine
    from simbackend.registry import register_backend, unregister_backend

    class Broken(MuJoCoEngine):
        name = "broken"

        def __init__(self, build):
            super().__init__(build)
            raise InvalidArgumentError("broken: this engine never builds")

    closed = []
    real_close = MuJoCoEngine.close
    monkeypatch.setattr(MuJoCoEngine, "close", lambda self: closed.append(type(self).name) or real_close(self))
    register_backend("broken", Broken)
    try:
        with pytest.raises(InvalidArgumentError, match="never builds"):
            make_backend("mujoco,broken", "pendulum", 2)
    finally:
        unregister_backend("broken")
    assert closed == ["mujoco"]


def test_a_device_other_than_the_cpu_is_refused_naming_it(monkeypatch) -> None:
    """Where CUDA exists (stood in for here: the check itself is what is tested), a mix refuses it in one
    line naming ``device``, before any engine is built."""
    import simbackend.devices

    monkeypatch.setattr(simbackend.devices, "require_device", lambda device, **k: torch.device("cuda", 0))
    with pytest.raises(InvalidArgumentError, match=r"^device: a mixed backend \('mujoco:2,motrix:2'\) runs on the CPU"):
        make_backend(MIX, "pendulum", 4, device="cuda")


def test_a_part_that_raises_stops_the_others_and_every_env_is_put_back(monkeypatch) -> None:
    """The first part raises early in a step of a million substeps: the part stepping in a thread is told
    to stop (it would take minutes), the error reaches the caller, and every env is where it was."""
    import time

    with make_backend(MIX, "quadruped", 4) as sim:
        inputs = _inputs(sim, 2, seed=5)
        sim.set_state(None, inputs["q0"], inputs["v0"])
        sim.step(inputs["ctrl"][0], nsteps=2)
        before = [sim.get_qpos().clone(), sim.get_qvel().clone(), sim.get_time().clone()]
        first = sim.engine.part_engines[0]
        real_step = first.step

        def failing(ctrl, nsteps, forces):  # an engine failing inside its step, after one substep
            real_step(ctrl, 1, forces)
            raise RuntimeError("part 0 failed")

        monkeypatch.setattr(first, "step", failing)
        t = time.monotonic()
        with pytest.raises(RuntimeError, match="part 0 failed"):
            sim.step(inputs["ctrl"][1], nsteps=10**6)
        assert time.monotonic() - t < 30
        after = [sim.get_qpos(), sim.get_qvel(), sim.get_time()]
        assert all(torch.equal(a, b) for a, b in zip(after, before))
        monkeypatch.undo()
        sim.step(inputs["ctrl"][1], nsteps=2)  # the pool's thread still steps
        assert not torch.equal(sim.get_qpos(), before[0])
