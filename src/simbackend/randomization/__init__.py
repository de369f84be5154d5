"""Domain randomization through the contract: engine-neutral plans, reproducible draws.

* :mod:`.plan`: :class:`RandomizationPlan`, :class:`Term`, :class:`Distribution`
  (dataclasses, JSON round trip) and the term kinds (:data:`TERM_KINDS`).
* :mod:`.sampling`: the counter-based draws (values depend on seed, term,
  env id and draw count only); :func:`uniforms_torch` draws the same bits
  on a tensor's device.
* :mod:`.apply`: how a backend applies a plan (part of ``SimBackend``) and
  the per-env model fields backends implement (:data:`FIELDS`); :func:`resolve_targets`: the
  elements a term's ``targets`` and ``bodies`` name on a model.
* :mod:`.schedule`: :class:`IntervalScheduler` for the interval phase.

Phases: ``init`` (``apply_init_randomization``), ``reset``
(``set_state(..., randomization=plan)``), ``interval``
(``apply_interval_randomization``).
"""

from .apply import CORE_TERMS, FIELDS, collision_geoms, core_dr_support, element_names, resolve_targets
from .plan import (
    COMPLIANCE_COMPONENTS,
    COMPONENTS,
    FEET,
    FRICTION_COMPONENTS,
    IMPEDANCE_COMPONENTS,
    OPERATIONS,
    PHASES,
    TERM_KINDS,
    Distribution,
    RandomizationPlan,
    Term,
    TermKind,
)
from .sampling import draw, uniforms, uniforms_torch
from .schedule import IntervalScheduler

__all__ = [
    "CORE_TERMS",
    "COMPLIANCE_COMPONENTS",
    "COMPONENTS",
    "FEET",
    "FIELDS",
    "FRICTION_COMPONENTS",
    "IMPEDANCE_COMPONENTS",
    "OPERATIONS",
    "PHASES",
    "TERM_KINDS",
    "Distribution",
    "IntervalScheduler",
    "RandomizationPlan",
    "Term",
    "TermKind",
    "collision_geoms",
    "core_dr_support",
    "draw",
    "element_names",
    "resolve_targets",
    "uniforms",
    "uniforms_torch",
]
