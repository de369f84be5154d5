"""The ``geom_compliance`` and ``geom_impedance`` terms outside the engines' physics: the plan's
components, the composition from the model's value, the direct-form and range refusals, snapshots, and the
refusal by name where an engine does not declare them (the physical clauses are the conformance suite's,
contract_tests/test_compliance.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import InvalidArgumentError, UnsupportedFeatureError, ValueRangeError
from simbackend.randomization import Distribution as D
from simbackend.randomization import RandomizationPlan, Term

XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" solref="0.03 0.8" solimp="0.8 0.9 0.002 0.4 3"/>
    <geom name="stiff" type="box" pos="3 0 0.1" size="0.1 0.1 0.1" solref="-20000 -50"/>
    <body name="ball" pos="0 0 0.2">
      <freejoint/>
      <geom name="ball_geom" type="sphere" size="0.1" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "compliance.xml"
    path.write_text(XML)
    return path


def test_components_round_trip_and_width() -> None:
    t = Term("geom_compliance", D.uniform([0.01, 0.5], [0.04, 1.0]), components=("timeconst", "dampratio"))
    assert t.width == 2 and t.component_columns == (0, 1)
    assert Term.from_dict(t.to_dict()) == t
    plan = RandomizationPlan((t, Term("geom_compliance", D.fixed(0.7), components=("dampratio",))))
    assert RandomizationPlan.from_json(plan.to_json()) == plan
    assert Term("geom_compliance", D.fixed(0.02)).width == 1  # timeconst by default
    with pytest.raises(InvalidArgumentError, match=r"\['timeconst', 'dampratio'\]"):
        Term("geom_compliance", D.fixed(1.0), components=("sliding",))
    with pytest.raises(InvalidArgumentError, match="geom_friction, geom_compliance, geom_impedance only"):
        Term("body_mass", D.fixed(1.0), components=("timeconst",))


def test_each_component_composes_from_the_model_value(model: Path) -> None:
    sim = make_backend("mujoco", model, 2)
    floor = sim.info.geom_names.index("floor")
    np.testing.assert_allclose(sim.info.geom_compliance[floor], (0.03, 0.8))
    plan = RandomizationPlan(
        (
            Term("geom_compliance", D.fixed(2.0), targets=("floor",), components=("dampratio",), operation="scale"),
            Term("geom_compliance", D.fixed(0.01), targets=("floor",), operation="add"),
        )
    )
    for _ in range(2):  # resampling starts from the model's value: never compounds
        sim.apply_init_randomization(plan)
        np.testing.assert_allclose(sim.get_env_geom_compliance()[:, floor].numpy(), [[0.04, 1.6]] * 2)
    # the engine's own per-env solref holds it (the solver reads it when it builds the contact)
    np.testing.assert_allclose(sim._engine.batch.expanded("geom_solref")[:, floor], [[0.04, 1.6]] * 2)


def test_direct_form_geom_is_refused_by_name_and_left_out_of_all_geoms(model: Path) -> None:
    sim = make_backend("mujoco", model, 2)
    with pytest.raises(InvalidArgumentError, match=r"\['stiff'\] cannot take it .*direct form"):
        sim.apply_init_randomization(RandomizationPlan((Term("geom_compliance", D.fixed(0.02), targets=("stiff",)),)))
    sim.apply_init_randomization(RandomizationPlan((Term("geom_compliance", D.fixed(0.05), operation="set"),)))  # all
    held = sim.get_env_geom_compliance().numpy()
    stiff = sim.info.geom_names.index("stiff")
    np.testing.assert_array_equal(held[:, stiff], [[-20000.0, -50.0]] * 2)
    assert (np.delete(held, stiff, axis=1)[..., 0] == 0.05).all()


@pytest.mark.parametrize("kind", ["geom_compliance", "geom_impedance"])
def test_engine_without_the_term_refuses_it_by_name(model: Path, kind: str) -> None:
    sim = make_backend("motrix", model, 1) if _has("motrix") else pytest.skip("motrix plugin absent")
    assert kind not in sim.get_dr_capabilities()
    plan = RandomizationPlan((Term(kind, D.fixed(0.02), targets=("floor",), operation="set", name="soft_floor"),))
    with pytest.raises(UnsupportedFeatureError, match=f"'{kind}'.*'soft_floor'"):
        sim.apply_init_randomization(plan)
    sim.apply_init_randomization(plan, strict=False)  # dropped, as any undeclared term
    with pytest.raises(UnsupportedFeatureError, match=f"'motrix'.*'{kind}'"):  # not the model's unused values
        getattr(sim, f"get_env_{kind}")()


def test_impedance_components_and_the_model_value(model: Path) -> None:
    t = Term("geom_impedance", D.uniform([0.5, 0.8, 0.001], [0.7, 0.95, 0.01]), components=("dmin", "dmax", "width"))
    assert t.width == 3 and t.component_columns == (0, 1, 2)
    assert Term.from_dict(t.to_dict()) == t
    assert Term("geom_impedance", D.fixed(0.9)).component_columns == (0,)  # dmin by default
    with pytest.raises(InvalidArgumentError, match=r"\['dmin', 'dmax', 'width'\]"):
        Term("geom_impedance", D.fixed(1.0), components=("midpoint",))
    sim = make_backend("mujoco", model, 2)
    floor = sim.info.geom_names.index("floor")
    np.testing.assert_allclose(sim.info.geom_impedance[floor], (0.8, 0.9, 0.002))  # solimp's first 3
    plan = RandomizationPlan(
        (
            Term("geom_impedance", D.fixed(0.5), targets=("floor",)),  # scale dmin
            Term("geom_impedance", D.fixed(0.05), targets=("floor",), components=("dmax",), operation="add"),
            Term("geom_impedance", D.fixed(0.01), targets=("floor",), components=("width",), operation="set"),
        )
    )
    for _ in range(2):  # resampling starts from the model's value: never compounds
        sim.apply_init_randomization(plan)
        np.testing.assert_allclose(sim.get_env_geom_impedance()[:, floor].numpy(), [[0.4, 0.95, 0.01]] * 2)
    # the engine's per-env solimp holds it; midpoint and power stay the model's
    np.testing.assert_allclose(sim._engine.batch.expanded("geom_solimp")[:, floor], [[0.4, 0.95, 0.01, 0.4, 3.0]] * 2)


def test_impedance_rules_are_checked_before_any_write(model: Path) -> None:
    sim = make_backend("mujoco", model, 2)
    before = sim.get_env_geom_impedance().clone()

    def plan(*terms: Term) -> RandomizationPlan:
        return RandomizationPlan(terms)

    dmax = Term("geom_impedance", D.fixed(0.7), targets=("floor",), components=("dmax",), operation="set", name="dm")
    with pytest.raises(
        ValueRangeError,
        match=r"^plan term 'dm' \(geom_impedance\): contact impedance of geom 'floor':"
        r" values that break dmin <= dmax in env ids \[0, 1\]",
    ):
        sim.apply_init_randomization(plan(dmax))
    for value, rule in ((0.00005, "0.0001 <= dmin, dmax <= 0.9999"), (0.0, "0.0001 <= dmin"), (-0.1, "0.0001 <= dmin")):
        with pytest.raises(ValueRangeError, match=rf"geom_impedance.*geom 'floor'.*{rule}"):
            sim.apply_init_randomization(plan(Term("geom_impedance", D.fixed(value), operation="set")))
    high = Term("geom_impedance", D.fixed(1.0), targets=("floor",), components=("dmax",), operation="set")
    with pytest.raises(
        ValueRangeError, match=r"contact impedance of geom 'floor'.*dmax <= 0\.9999 \(MuJoCo would clamp"
    ):
        sim.apply_init_randomization(plan(high))
    width = Term("geom_impedance", D.fixed(-0.001), targets=("stiff",), components=("width",), operation="set")
    with pytest.raises(ValueRangeError, match="geom 'stiff'.*width >= 0"):
        sim.apply_init_randomization(plan(width))
    with pytest.raises(ValueRangeError, match="width >= 0"):  # a reset refuses the same, state included
        qpos = sim.get_qpos()[:1]
        sim.set_state([1], qpos, sim.get_qvel()[:1], randomization=plan(replace(width, phase="reset")))
    assert torch.equal(sim.get_env_geom_impedance(), before)
    # dmin <= dmax is checked once every term is composed: dmin above the model's dmax, then dmax above it
    up = plan(
        Term("geom_impedance", D.fixed(0.95), targets=("floor",), operation="set"),
        Term("geom_impedance", D.fixed(0.99), targets=("floor",), components=("dmax",), operation="set"),
    )
    sim.apply_init_randomization(up)
    floor = sim.info.geom_names.index("floor")
    np.testing.assert_allclose(sim.get_env_geom_impedance()[:, floor].numpy(), [[0.95, 0.99, 0.002]] * 2)


def test_impedance_in_fingerprint_and_snapshots(model: Path, tmp_path: Path) -> None:
    sim = make_backend("mujoco", model, 2)
    other = tmp_path / "other.xml"
    other.write_text(XML.replace("0.8 0.9 0.002 0.4 3", "0.8 0.9 0.003 0.4 3"))
    assert make_backend("mujoco", other, 1).info.fingerprint != sim.info.fingerprint  # width is a model value
    plan = RandomizationPlan((Term("geom_impedance", D.uniform(0.3, 0.7), operation="set"),), seed=3)
    sim.apply_init_randomization(plan)
    held = sim.get_env_geom_impedance().clone()
    snap = sim.get_physics_state()
    named = sim.get_named_state()
    sim.apply_init_randomization(RandomizationPlan((Term("geom_impedance", D.fixed(0.6), operation="set"),)))
    assert not torch.equal(sim.get_env_geom_impedance(), held)
    sim.set_physics_state([0, 1], snap)
    assert torch.equal(sim.get_env_geom_impedance(), held)
    sim.apply_init_randomization(RandomizationPlan((Term("geom_impedance", D.fixed(0.6), operation="set"),)))
    sim.set_named_state([0, 1], named)
    assert torch.equal(sim.get_env_geom_impedance(), held)


def _has(name: str) -> bool:
    from simbackend.registry import available_backends

    return name in available_backends()
