"""Randomization plans without an engine, and the same plan on every registered backend.

The plan layer (dataclasses, JSON, validation), the counter-based draws
(statistics, independence from the batch) and the interval scheduler; then
cross-engine agreement: one plan and seed give the same values on mujoco and
sapien.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from simbackend.errors import ArgumentTypeError, InvalidArgumentError
from simbackend.host_reads import count_host_reads
from simbackend.randomization import (
    Distribution,
    IntervalScheduler,
    RandomizationPlan,
    Term,
    draw,
    uniforms,
    uniforms_torch,
)

D = Distribution


def _plan() -> RandomizationPlan:
    return RandomizationPlan(
        (
            Term("body_mass", D.uniform(0.8, 1.2), targets=("link.*",), scale_inertia=True),
            Term("geom_friction", D.log_uniform(0.5, 2.0), components=("sliding", "rolling"), shared=True),
            Term("gravity", D.gaussian(0.0, [0.1, 0.1, 0.3], low=-0.5, high=0.5), phase="reset"),
            Term(
                "body_force",
                D.fixed([1, 2, 3, 0, 0, 0]),
                phase="interval",
                targets=("base",),
                duration=0.5,
                interval_s=(1.0, 3.0),
                name="kick",
            ),
        ),
        seed=42,
    )


def test_plan_round_trips_through_json() -> None:
    plan = _plan()
    text = plan.to_json()
    again = RandomizationPlan.from_json(text)
    assert again == plan
    assert json.loads(text)["version"] == 1
    assert RandomizationPlan.from_dict(json.loads(text)).stream_key(2) == plan.stream_key(2)


def test_plan_files_load(tmp_path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(_plan().to_json(indent=2))
    assert RandomizationPlan.load(path) == _plan()
    with pytest.raises(InvalidArgumentError, match="no such file"):
        RandomizationPlan.load(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        RandomizationPlan.load(path)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: D.uniform(2.0, 1.0), "low > high"),
        (lambda: D.uniform([0, 1], [1, 0.5]), "low > high"),
        (lambda: D.log_uniform(0.0, 1.0), "must be > 0"),
        (lambda: D.gaussian(0.0, -1.0), "std"),
        (lambda: D.uniform(0.0, float("nan")), "finite"),
        (lambda: D.uniform([0, 0], [1, 1, 1]), "different lengths"),
        (lambda: Distribution("beta", low=(0.0,), high=(1.0,)), "distribution.kind"),
        (lambda: Term("body_mas", D.fixed(1.0)), "closest known names: 'body_mass'"),
        (lambda: Term("body_mass", D.fixed(1.0), phase="startup"), "phase"),
        (lambda: Term("body_inertia", D.fixed(1.0), operation="add"), "operation"),
        (lambda: Term("gravity", D.fixed(1.0), targets=("x",)), "takes no targets"),
        (lambda: Term("body_com", D.fixed([1.0, 2.0])), "1 or 3"),
        (lambda: Term("geom_friction", D.fixed(1.0), components=("spin",)), "components"),
        (lambda: Term("body_mass", D.fixed(1.0), duration=1.0), "duration"),
        (lambda: Term("body_force", D.fixed(1.0), duration=-1.0), "positive"),
        (lambda: Term("body_mass", D.fixed(1.0), interval_s=(1, 2)), "interval phase"),
        (lambda: Term("body_mass", D.fixed(1.0), phase="interval", interval_s=(2, 1)), "low <= high"),
        (lambda: Term("body_mass", D.fixed(1.0), scale_inertia=True, operation="add"), "scale_inertia"),
        (lambda: RandomizationPlan((Term("gravity", D.fixed(0.0), name="g"),) * 2), "duplicate"),
        (lambda: RandomizationPlan((), seed=-1), "seed"),
        (lambda: RandomizationPlan.from_dict({"terms": [{"kind": "gravity"}]}), "required"),
        (lambda: RandomizationPlan.from_dict({"terms": [], "colour": 1}), "unknown keys"),
        (lambda: RandomizationPlan.from_dict({"version": 2, "terms": []}), "version"),
    ],
)
def test_bad_plans_are_rejected_when_built(make, match) -> None:
    with pytest.raises((InvalidArgumentError, ArgumentTypeError), match=match):
        make()


def test_bad_types_are_type_errors() -> None:
    with pytest.raises(ArgumentTypeError):
        D.uniform("a", 1.0)
    with pytest.raises(ArgumentTypeError):
        Term("body_mass", {"kind": "fixed", "value": 1.0})
    with pytest.raises(ArgumentTypeError):
        RandomizationPlan(("not a term",))


def test_uniforms_depend_only_on_their_keys() -> None:
    ids = np.arange(64)
    counts = np.zeros(64, np.int64)
    a = uniforms(7, 123, ids, counts, 5)
    b = uniforms(7, 123, np.array([3, 40]), np.array([0, 0]), 5)
    np.testing.assert_array_equal(a[[3, 40]], b)
    assert not np.array_equal(uniforms(7, 123, ids, counts + 1, 5), a)  # the next draw differs
    assert not np.array_equal(uniforms(8, 123, ids, counts, 5), a)  # another seed
    assert not np.array_equal(uniforms(7, 124, ids, counts, 5), a)  # another term
    assert ((a > 0) & (a < 1)).all()


def test_uniforms_are_uniform_and_uncorrelated() -> None:
    u = uniforms(1, 99, np.arange(20000), np.zeros(20000, np.int64), 4)
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    hist = np.histogram(u[:, 0], bins=20, range=(0, 1))[0]
    assert hist.min() > 850 and hist.max() < 1150
    corr = np.corrcoef(u.T)
    assert np.abs(corr - np.eye(4)).max() < 0.03
    # neighbouring envs and neighbouring draw counts are unrelated too
    nxt = uniforms(1, 99, np.arange(20000), np.ones(20000, np.int64), 1)[:, 0]
    assert abs(np.corrcoef(u[:, 0], nxt)[0, 1]) < 0.03
    assert abs(np.corrcoef(u[:-1, 0], u[1:, 0])[0, 1]) < 0.03


_EDGE_WORDS = (0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1)


def test_uniforms_torch_has_the_bits_of_uniforms() -> None:
    """The torch draw is the numpy draw bit for bit: seeds and keys on both sides of 2**63 (the sign bit of
    int64, where an arithmetic shift or a wrongly signed constant would show), ids and counts up to 2**40."""
    rng = np.random.default_rng(0)
    words = list(_EDGE_WORDS) + [int(w) for w in rng.integers(0, 2**64, 24, dtype=np.uint64)]
    checked = 0
    for i, seed in enumerate(words):
        for key in (words[(i * 7 + 3) % len(words)], words[(i * 5 + 1) % len(words)], 0, 2**64 - 1):
            n = int(rng.integers(0, 40))
            ids = rng.integers(0, 2**40 + 1, n, dtype=np.int64)
            counts = rng.integers(0, 2**40 + 1, n, dtype=np.int64)
            if n >= 2:  # the extremes
                ids[:2], counts[:2] = (0, 2**40), (2**40, 0)
            size = checked % 8
            want = torch.from_numpy(uniforms(seed, key, ids, counts, size))
            got = uniforms_torch(seed, key, torch.from_numpy(ids), torch.from_numpy(counts), size)
            assert got.dtype == torch.float64 and got.shape == (n, size)
            assert torch.equal(got, want), (seed, key, size)
            checked += 1
    # other integer dtypes, counts on another tensor than the ids' own
    ids32 = torch.arange(0, 3000, 7, dtype=torch.int32)
    counts = torch.arange(ids32.numel(), dtype=torch.int64) * 3
    want = torch.from_numpy(uniforms(11, 2**63 + 5, ids32.numpy(), counts.numpy(), 3))
    assert torch.equal(uniforms_torch(11, 2**63 + 5, ids32, counts, 3), want)
    assert checked == len(words) * 4


def test_uniforms_torch_values_are_exact_float64() -> None:
    """Each value is (m + 0.5) / 2**53 for an integer m < 2**53 (the top 53 bits): exact in float64, inside (0, 1)."""
    u = uniforms_torch(2**64 - 1, 2**63, torch.arange(5000), torch.full((5000,), 2**40), 6)
    m = u * 2.0**53 - 0.5
    assert u.dtype == torch.float64
    assert torch.equal(m, m.round()) and bool(((m >= 0) & (m < 2.0**53)).all())
    assert bool(((u > 0) & (u < 1)).all())


def test_uniforms_torch_makes_no_host_read() -> None:
    """The torch draw runs as device ops alone: no scalar read (``aten._local_scalar_dense``), no
    nonzero, no copy, under a dispatch mode that sees every aten op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    ids, counts = torch.arange(0, 64, 3), torch.arange(22) * 2**35
    with count_host_reads() as reads, Ops() as ops:
        u = uniforms_torch(2**63 + 17, 2**64 - 2, ids, counts, 4)
    assert u.shape == (22, 4)
    assert "aten.mul" in ops.names and "aten.bitwise_xor" in ops.names  # the mode saw the draw's ops
    assert "aten._local_scalar_dense" not in ops.names, ops.names
    assert reads.total == 0, reads.summary()


def test_distributions_draw_their_laws() -> None:
    u = uniforms(3, 5, np.arange(40000), np.zeros(40000, np.int64), 1)[:, :, None]
    g = draw(D.gaussian(1.0, 0.5), u)
    assert abs(g.mean() - 1.0) < 0.01 and abs(g.std() - 0.5) < 0.01
    t = draw(D.gaussian(0.0, 1.0, low=-0.5, high=1.0), u)
    assert t.min() >= -0.5 and t.max() <= 1.0 and t.min() < -0.49 and t.max() > 0.99
    lu = draw(D.log_uniform(0.1, 10.0), u)
    assert lu.min() >= 0.1 and lu.max() <= 10.0 and abs(np.log(lu).mean()) < 0.03
    un = draw(D.uniform([0, 10], [1, 20]), np.broadcast_to(u, (40000, 1, 2)))
    assert un[..., 1].min() >= 10 and un[..., 0].max() <= 1
    np.testing.assert_array_equal(draw(D.fixed([1, 2]), np.zeros((2, 1, 2))), [[[1, 2]], [[1, 2]]])


def test_scheduler_fires_each_env_on_its_own_interval() -> None:
    plan = RandomizationPlan(
        (Term("joint_default_pos", D.uniform(-0.1, 0.1), phase="interval", interval_s=(0.1, 0.3), name="offsets"),),
        seed=3,
    )

    class Recorder:
        num_envs = 8

        def __init__(self) -> None:
            self.calls = []

        def apply_interval_randomization(self, plan, env_ids, terms):
            self.calls.append((terms, np.asarray(env_ids).copy()))

    sim = Recorder()
    sched = IntervalScheduler(plan, 8)
    first = sched.due_in("offsets")
    assert ((first >= 0.1) & (first <= 0.3)).all() and len(set(first.tolist())) == 8
    fired_at = {}
    for k in range(100):
        for _name, ids in sched.advance(sim, 0.01).items():
            for i in ids:
                fired_at.setdefault(int(i), []).append(k)
    for i in range(8):
        gaps = np.diff([-1] + fired_at[i]) * 0.01
        assert ((gaps >= 0.1 - 1e-9) & (gaps <= 0.31)).all(), (i, gaps)
    # the schedule of env 3 does not depend on the batch size
    other = IntervalScheduler(plan, 64)
    assert other.due_in()[3] == first[3]
    with pytest.raises(InvalidArgumentError, match="interval_s"):
        IntervalScheduler(RandomizationPlan((Term("gravity", D.fixed(0.0), phase="interval"),)), 2)


def test_same_plan_same_values_on_every_backend() -> None:
    """Cross-engine agreement: one plan and seed give every backend the same per-env values."""
    from simbackend.registry import available_backends, make_backend

    plan = RandomizationPlan(
        (
            Term("body_mass", D.uniform(0.5, 1.5), scale_inertia=True),
            Term("actuator_kp", D.log_uniform(0.5, 2.0)),
            Term("actuator_kv", D.gaussian(1.0, 0.1, low=0.8, high=1.2)),
            Term("joint_default_pos", D.uniform(-0.05, 0.05)),
            Term("gravity", D.uniform(-0.5, 0.5), operation="add"),
        ),
        seed=2026,
    )
    got = {}
    for name in available_backends():
        with make_backend(name, "arm7", 6) as sim:
            sim.apply_init_randomization(plan, strict=False)
            gains = sim.get_env_actuator_gains()
            got[name] = {
                "mass": sim.get_env_body_mass(),
                "inertia": sim.get_env_body_inertia(),
                "kp": gains.kp,
                "kv": gains.kv,
                "default": sim.get_env_default_qpos(),
                "gravity": sim.get_env_gravity(),
            }
    assert {"mujoco", "sapien"} <= set(got)
    ref = got["mujoco"]
    for name, values in got.items():
        for k, v in values.items():
            # float32 engines store the same draws rounded to float32
            torch.testing.assert_close(v, ref[k], rtol=2e-7, atol=0, msg=f"{name} {k}")
    assert not torch.equal(ref["mass"][0], ref["mass"][1])
