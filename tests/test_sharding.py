"""Sharded backends (``shards=K``): bit-identity to the unsharded backend, options, and faults.

The conformance suite runs unchanged on sharded MuJoCo and SAPIEN in ``make test``
(``--sim-option shards=2``); this file checks what only a sharded backend has:
that env i follows the unsharded env i bit for bit for K = 1, 2, 3, and what a
dead, hung, raising or interrupted shard does.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("ray")

from simbackend.errors import (  # noqa: E402
    ArgumentTypeError,
    BackendClosedError,
    InvalidArgumentError,
    ShardFailedError,
)
from simbackend.randomization import Distribution, RandomizationPlan, Term  # noqa: E402
from simbackend.registry import make_backend  # noqa: E402
from simbackend.sharding import ShardRestartWarning  # noqa: E402

POOL = {"pool": True}  # actors kept between tests (about a second each to start)
N = 5  # uneven splits: K = 2 -> 3 + 2, K = 3 -> 2 + 2 + 1


def _plan() -> RandomizationPlan:
    D = Distribution
    return RandomizationPlan(
        (
            Term("body_mass", D.uniform(0.7, 1.3), targets=("link.*",)),
            Term("geom_friction", D.uniform(0.5, 1.5), components=("sliding",)),
            Term("joint_damping", D.uniform(0.5, 2.0)),
        ),
        seed=7,
    )


def _trace(sim, steps: int = 12) -> list[torch.Tensor]:
    """A run that touches every path a shard serves: randomization, set_state, pre-step control,
    external forces, frames, sensors, Jacobians and snapshots."""
    gen = torch.Generator().manual_seed(3)
    sim.apply_init_randomization(_plan(), strict=False)
    q0 = sim.get_default_qpos().clone() + 0.1 * torch.rand(sim.num_envs, sim.nq, generator=gen)
    sim.set_state(None, q0, torch.zeros(sim.num_envs, sim.nv))
    body = len(sim.body_names) - 1
    out = []
    for i in range(steps):
        u = torch.rand(sim.num_envs, sim.num_actuators, generator=gen) * 2 - 1
        if i % 4 == 1:
            sim.apply_body_force([body], torch.rand(sim.num_envs, 1, 3, generator=gen))
        if i == 6:
            snap = sim.get_physics_state(None)
        sim.step(u, 2)
        out += [sim.get_qpos(), sim.get_qvel(), sim.get_body_pos_w(), sim.get_body_lin_vel_w()]
        if sim.site_names:
            out.append(sim.get_site_pos_w())
    sim.set_physics_state(None, snap)
    sim.step(torch.zeros(sim.num_envs, sim.num_actuators), 3)
    out += [sim.get_qpos(), sim.get_qvel(), sim.get_env_body_mass(), sim.get_env_geom_friction()]
    if sim.capabilities.site_jacobians and sim.site_names:
        out += list(sim.get_site_jacobian_w(len(sim.site_names) - 1))
    return out


@pytest.mark.parametrize("shards", [1, 2, 3])
@pytest.mark.parametrize("engine", ["mujoco", "sapien"])
def test_env_i_is_bit_identical_to_the_unsharded_env_i(engine: str, shards: int) -> None:
    """Trajectories, frames, randomized fields and snapshots: equal bit for bit for any K."""
    with make_backend(engine, "arm7", N) as plain:
        want = _trace(plain)
    with make_backend(engine, "arm7", N, shards=shards, sharding=POOL) as sim:
        assert sim.name == engine and sim.num_envs == N
        got = _trace(sim)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        assert torch.equal(a, b), f"output {i} differs: max {float((a - b).abs().max())}"


def test_more_shards_than_envs_gives_one_env_per_shard(caplog: pytest.LogCaptureFixture) -> None:
    """Never more shards than envs; the backend says so (logger simbackend.sharding, the CLI's shard line)."""
    with caplog.at_level("INFO", logger="simbackend.sharding"):
        sim = make_backend("mujoco", "pendulum", 2, shards=5, sharding=POOL)
    with sim:
        assert sim.engine._starts.tolist() == [0, 1, 2]
        sim.step(torch.ones(2, 1))
        assert sim.get_time().tolist() == [sim.physics_dt] * 2
    said = [r.getMessage() for r in caplog.records if r.name == "simbackend.sharding"]
    assert said == ["mujoco: 2 envs on 2 shards (Ray actors), 1 env each; 5 shards asked for, capped at one per env"]


def test_ray_starts_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one ray.init call keeps Ray's start-up banner, dashboard and notices off the terminal (and the
    actors' output in Ray's log files), started here or joined; a Ray initialised already is left alone."""
    import logging

    import ray

    from simbackend.sharding import cluster

    calls: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    cluster.connect(None)
    cluster.connect("auto")
    for kwargs in calls:
        assert kwargs["configure_logging"] is True and kwargs["logging_level"] >= logging.ERROR, kwargs
        assert kwargs["log_to_driver"] is False, kwargs
    assert calls[0]["include_dashboard"] is False and "address" not in calls[0]
    assert calls[1]["address"] == "auto"
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    cluster.connect(None)
    assert len(calls) == 2


def test_getters_ride_on_the_step_answer() -> None:
    """A frame read every step is sent along with the step: no round trip of its own."""
    with make_backend("mujoco", "arm7", 4, shards=2, sharding=POOL) as sim:
        sim.get_body_pos_w()
        sim.step(torch.zeros(4, sim.num_actuators))
        calls = []
        engine = sim.engine
        real = engine._run

        def counting(method, args, **kw):
            calls.append(method)
            return real(method, args, **kw)

        engine._run = counting
        for _ in range(3):
            sim.step(torch.zeros(4, sim.num_actuators))
            sim.get_body_pos_w()
            sim.get_qpos()
        assert calls == ["call"] * 3


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"shards": 0}, InvalidArgumentError, "shards"),
        ({"shards": 1.5}, InvalidArgumentError, "shards"),
        ({"sharding": {"pool": True}}, InvalidArgumentError, "shards=K"),
        ({"shards": 2, "sharding": {"retries": 3}}, InvalidArgumentError, "sharding.retries: unknown option"),
        ({"shards": 2, "sharding": {"timeout": -1}}, InvalidArgumentError, "sharding.timeout"),
        ({"shards": 2, "sharding": {"address": 5}}, ArgumentTypeError, "sharding.address"),
        ({"shards": 2, "sharding": "auto"}, ArgumentTypeError, "sharding"),
    ],
)
def test_bad_sharding_options_are_refused_by_name(options, error, words) -> None:
    with pytest.raises(error, match=words):
        make_backend("mujoco", "pendulum", 2, **options)


# ----------------------------------------------------------------------
# faults
# ----------------------------------------------------------------------
def _kill(sim, shard: int) -> None:
    """Kill ``shard``'s actor and wait until Ray reports it dead (``ray.kill`` only asks; on a busy machine
    the actor can still answer a call long after a fixed sleep)."""
    import ray
    from ray.exceptions import RayActorError

    actor = sim.engine._actors[shard]
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=10)
        except RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
    raise AssertionError(f"shard {shard}'s actor still answers 120 s after ray.kill")


def test_a_killed_shard_raises_naming_it_and_the_backend_still_closes() -> None:
    sim = make_backend("mujoco", "arm7", 4, shards=2)
    sim.step(torch.zeros(4, sim.num_actuators))
    _kill(sim, 1)
    with pytest.raises(ShardFailedError, match=r"shard 1 \(envs 2\.\.3\) died") as info:
        sim.step(torch.zeros(4, sim.num_actuators))
    assert info.value.shard == 1 and info.value.env_ids == [2, 3]
    with pytest.raises(ShardFailedError, match=r"step: shard 1 \(envs 2\.\.3\) died.*can only be closed"):
        sim.step(torch.zeros(4, sim.num_actuators))
    t = time.monotonic()
    sim.close()
    assert time.monotonic() - t < 60  # not the 300 s sharding.timeout: a busy machine stretches the rest
    with pytest.raises(BackendClosedError):
        sim.get_qpos()


def test_after_a_lost_shard_every_public_method_raises_the_same_error() -> None:
    """Nothing answers from what the front end or the driver kept (time, controls, the last state a shard
    returned) once a shard is lost: every public method raises ShardFailedError naming it; properties
    describing the model still answer, and close() works."""
    sim = make_backend("mujoco", "arm7", 4, shards=2)
    sim.step(torch.zeros(4, sim.num_actuators))
    sim.get_qpos(), sim.get_body_pos_w()  # cached values must not be served afterwards
    _kill(sim, 1)
    with pytest.raises(ShardFailedError):
        sim.step(torch.zeros(4, sim.num_actuators))
    methods = [
        m
        for m in dir(sim)
        if not m.startswith("_")
        and m != "close"
        and callable(getattr(type(sim), m, None))
        and not isinstance(getattr(type(sim), m), property)
        and m not in ("parse_options", "resolve_device")
    ]
    assert {"get_qpos", "get_time", "get_ctrl", "get_base_pos", "get_physics_state", "get_env_body_mass"} <= set(
        methods
    )
    for m in methods:
        with pytest.raises(ShardFailedError, match=rf"^{m}: shard 1 \(envs 2\.\.3\) died") as info:
            getattr(sim, m)()
        assert info.value.shard == 1 and info.value.env_ids == [2, 3]
    assert sim.num_envs == 4 and sim.body_names  # the model's description still answers
    sim.close()
    with pytest.raises(BackendClosedError):
        sim.get_time()


@pytest.mark.parametrize("when", ["between steps", "during revert"])
def test_a_restarted_shard_continues_bit_identically(when: str) -> None:
    """With restart on, the engine's snapshot rows bring the shard back exactly: the run equals the
    unsharded one. Killed during the revert of diverged envs, the reverted envs get their pre-step state."""
    u = torch.linspace(-1, 1, 4 * 7).reshape(4, 7)
    with make_backend("mujoco", "arm7", 4) as plain:
        for _ in range(6):
            plain.step(u, 2)
        want = (plain.get_qpos(), plain.get_qvel())
    with make_backend("mujoco", "arm7", 4, shards=2, sharding={"restart": True}) as sim:
        for i in range(6):
            if i == 3 and when == "between steps":
                _kill(sim, 1)
                with pytest.warns(ShardRestartWarning, match=r"shard 1 \(envs 2\.\.3\) died.*lost: nothing"):
                    sim.step(u, 2)
            elif i == 3:
                engine = sim.engine
                real = engine._mutate

                def kill_before_revert(member, args, real=real, **kw):
                    if member == "revert":
                        _kill(sim, 1)
                    return real(member, args, **kw)

                engine._mutate = kill_before_revert
                before = (sim.get_qpos(), sim.get_qvel())
                with pytest.warns(ShardRestartWarning):
                    engine.step(u.double(), 2, None)
                    engine.revert(torch.tensor([False, False, True, True]))
                engine._mutate = real
                q, v = engine.read_state()
                assert torch.equal(q[2:].float(), before[0][2:]) and torch.equal(v[2:].float(), before[1][2:])
                engine.revert(torch.tensor([True, True, False, False]))
                sim.step(u, 2)
            else:
                sim.step(u, 2)
        assert torch.equal(sim.get_qpos(), want[0]) and torch.equal(sim.get_qvel(), want[1])


def test_a_shard_that_raises_reaches_the_caller_and_every_env_keeps_its_state() -> None:
    import ray

    with make_backend("mujoco", "arm7", 4, shards=2) as sim:
        sim.step(torch.ones(4, sim.num_actuators))
        before = (sim.get_qpos(), sim.get_qvel(), sim.get_time())
        ray.get(sim.engine._actors[1].close.remote())  # shard 1's engine is gone: its calls raise
        with pytest.raises(RuntimeError, match="hosts no engine") as info:
            sim.step(torch.zeros(4, sim.num_actuators))
        assert any("shard 1, envs 2..3" in n for n in getattr(info.value, "__notes__", []))
        assert torch.equal(sim.get_qpos(), before[0]) and torch.equal(sim.get_qvel(), before[1])
        assert torch.equal(sim.get_time(), before[2])


def test_a_hung_shard_times_out_instead_of_hanging() -> None:
    sim = make_backend("mujoco", "arm7", 2, shards=2, sharding={"timeout": 0.5})
    t = time.monotonic()
    with pytest.raises(ShardFailedError, match=r"did not answer within 0\.5 s \(sharding\.timeout\)"):
        sim.step(torch.zeros(2, sim.num_actuators), 400_000)
    assert time.monotonic() - t < 60  # the 0.5 s timeout, not the 300 s default (room for a busy machine)
    sim.close()


class _SignalOnCall:
    """An actor handle whose ``call.remote`` of ``member`` sends this process SIGINT (Ctrl-C), before or
    after submitting; everything else goes to the real handle."""

    def __init__(self, actor, member: str, after: bool) -> None:
        self._actor, self._member, self._after = actor, member, after
        self.call = self

    def remote(self, member, *args):
        if member == self._member and not self._after:
            os.kill(os.getpid(), signal.SIGINT)
        ref = self._actor.call.remote(member, *args)
        if member == self._member and self._after:
            os.kill(os.getpid(), signal.SIGINT)
        return ref

    def __getattr__(self, name):
        return getattr(self._actor, name)


#: when Ctrl-C comes: as the step reaches the first shard, after it reached the last one (the window where one
#: shard ran its step unseen), while the shards step, and a second one while the shards revert
MOMENTS = ["before dispatch", "after dispatch", "during", "while reverting"]


@pytest.mark.parametrize("shards", [2, 3])
@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_during_a_sharded_step_leaves_every_env_at_its_pre_call_state(moment: str, shards: int) -> None:
    """Whenever Ctrl-C comes, every env of every shard is back at its pre-call state, the whole snapshot row
    included (what the shards' engines hold, not only what the getters say), and the run goes on bit for bit
    as the unsharded one."""
    with (
        make_backend("mujoco", "quadruped", 4, shards=shards, sharding=POOL) as sim,
        make_backend("mujoco", "quadruped", 4) as plain,
    ):
        u = torch.linspace(-0.5, 0.5, 4 * sim.num_actuators).reshape(4, -1)
        sim.step(u, 3)
        plain.step(u, 3)
        before = (sim.get_qpos(), sim.get_qvel(), sim.get_time(), sim.get_ctrl())
        row = sim.get_physics_state(None)
        engine = sim.engine
        actors = list(engine._actors)
        last = len(actors) - 1
        timer = None
        if moment == "before dispatch":
            engine._actors[0] = _SignalOnCall(actors[0], "step", after=False)
        elif moment == "after dispatch":
            engine._actors[last] = _SignalOnCall(actors[last], "step", after=True)
        elif moment == "during":
            timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        else:  # a first Ctrl-C during the step, a second as the revert reaches the shards
            engine._actors = [_SignalOnCall(a, "revert", after=False) for a in actors]
            timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        # Python's own Ctrl-C handler, whatever this process inherited (a background job starts with SIGINT
        # ignored), in place before the timer can fire: on a busy machine 0.2 s can pass before the step starts
        handler = signal.signal(signal.SIGINT, signal.default_int_handler)
        if timer is not None:
            timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                sim.step(-u, 200_000)
        finally:
            engine._actors = actors
            if timer is not None:
                timer.cancel()
            signal.signal(signal.SIGINT, handler)
        after = (sim.get_qpos(), sim.get_qvel(), sim.get_time(), sim.get_ctrl())
        for a, b in zip(before, after, strict=True):
            assert torch.equal(a, b)
        assert torch.equal(sim.get_physics_state(None), row)  # asked of the shards' engines
        sim.step(u, 3)  # and the run goes on as the unsharded one
        plain.step(u, 3)
        assert torch.equal(sim.get_qpos(), plain.get_qpos())


def test_a_sigint_handler_of_the_program_keeps_its_meaning_in_a_sharded_step() -> None:
    """A program's own SIGINT handler that only notes the request (a training loop stopping at the end of its
    iteration) is called once, and the sharded step finishes as it would in one process."""
    calls = []
    with (
        make_backend("mujoco", "pendulum", 4, shards=2, sharding=POOL) as sim,
        make_backend("mujoco", "pendulum", 4) as plain,
    ):
        u = torch.full((4, 1), 0.2)
        handler = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
        try:
            timer.start()
            sim.step(u, 400_000)
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, handler)
        plain.step(u, 400_000)
        assert calls == [signal.SIGINT]
        assert torch.equal(sim.get_qpos(), plain.get_qpos()) and torch.equal(sim.get_time(), plain.get_time())


def test_sapien_beyond_its_per_process_cap() -> None:
    """CPU PhysX holds at most 1000 scenes per process; two shards of 600 hold 1200 envs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with make_backend("sapien", "pendulum", 1200, shards=2, sharding=POOL) as sim:
            sim.step(torch.ones(1200, 1), 2)
            q = sim.get_qpos()
    assert q.shape == (1200, 1) and bool(torch.isfinite(q).all()) and np.unique(q.numpy()).size == 1


def test_a_shard_that_raises_does_not_hide_what_the_others_wrote() -> None:
    """set_state over two shards, the second of which raises: the first shard's envs took the new state, and the
    getters say so (each shard's answer is kept as it arrives)."""
    import ray

    with make_backend("mujoco", "pendulum", 4, shards=2) as sim:
        ray.get(sim.engine._actors[1].close.remote())
        new = torch.full((4, 1), 0.5)
        with pytest.raises(RuntimeError, match="hosts no engine"):
            sim.set_state(None, new, torch.zeros(4, 1))
        got = [float(x) for x in ray.get(sim.engine._actors[0].call.remote("read_state", ()))[0][:, 0]]
        assert got == [0.5, 0.5]
        assert sim.get_qpos()[:2, 0].tolist() == got
