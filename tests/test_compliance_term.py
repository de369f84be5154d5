"""The ``geom_compliance`` term outside the engines' physics: the plan's components, the composition from
the model's value, the direct-form refusal, and the refusal by name where an engine does not declare it
(the physical clauses are the conformance suite's, contract_tests/test_compliance.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simbackend import make_backend
from simbackend.errors import InvalidArgumentError, UnsupportedFeatureError
from simbackend.randomization import Distribution as D
from simbackend.randomization import RandomizationPlan, Term

XML = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" solref="0.03 0.8"/>
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
    with pytest.raises(InvalidArgumentError, match="geom_friction and geom_compliance only"):
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


def test_engine_without_the_term_refuses_it_by_name(model: Path) -> None:
    sim = make_backend("motrix", model, 1) if _has("motrix") else pytest.skip("motrix plugin absent")
    assert "geom_compliance" not in sim.get_dr_capabilities()
    plan = RandomizationPlan((Term("geom_compliance", D.fixed(0.02), targets=("floor",), name="soft_floor"),))
    with pytest.raises(UnsupportedFeatureError, match="'geom_compliance'.*'soft_floor'"):
        sim.apply_init_randomization(plan)
    sim.apply_init_randomization(plan, strict=False)  # dropped, as any undeclared term
    np.testing.assert_array_equal(sim.get_env_geom_compliance()[0].numpy(), sim.info.geom_compliance.astype(np.float32))


def _has(name: str) -> bool:
    from simbackend.registry import available_backends

    return name in available_backends()
