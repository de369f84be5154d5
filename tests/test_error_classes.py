"""The library's user-facing paths raise the project's errors (simbackend.errors, docs/conventions.md), each
also the built-in class a caller may already catch."""

from __future__ import annotations

import numpy as np
import pytest

from simbackend import checks, errors
from simbackend.models import analytic
from simbackend.parity.report import ParityReport, ParityRow


def test_a_choice_of_the_wrong_type_is_a_scalar_type_error() -> None:
    with pytest.raises(errors.ScalarTypeError, match=r"^solver: expected one of \['pgs', 'tgs'\], got int 3$"):
        checks.choice(3, "solver", ("pgs", "tgs"))


@pytest.mark.parametrize(
    ("call", "error", "builtin"),
    [
        (lambda: analytic.arm7_body_pose(np.zeros(6), 1), errors.InputShapeError, ValueError),
        (lambda: analytic.arm7_body_pose(np.zeros(7), 9), errors.IndexRangeError, ValueError),
        (lambda: analytic.quadruped_foot_pos(np.zeros(18), "FL"), errors.InputShapeError, ValueError),
    ],
)
def test_the_analytic_models_raise_contract_errors(call, error: type, builtin: type) -> None:
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, builtin) and "\n" not in str(info.value)


def test_a_parity_report_lookup_is_an_unknown_name_and_still_a_key_error() -> None:
    report = ParityReport("mujoco", "mujoco", "pendulum", ("model",), 1, 0, [ParityRow("model", "nq", 0.0, 0.0, True)])
    for lookup in (lambda: report.tier_passed("servo"), lambda: report.row("model", "nv")):
        with pytest.raises(errors.UnknownNameError) as info:
            lookup()
        assert isinstance(info.value, KeyError) and isinstance(info.value, errors.SimBackendError)
        assert not str(info.value).startswith(("'", '"'))  # one plain line, not KeyError's quoted repr
