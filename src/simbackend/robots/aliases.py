"""A plan's ``bodies`` entry ``"feet"``: a robot description's feet on its compiled model.

A geom term's ``bodies`` (:class:`~simbackend.randomization.Term`) names bodies whose collision geoms it
acts on; where a robot description is known (``calibrate``/``excite --robot``, the velocity task), the
entry :data:`~simbackend.randomization.FEET` stands for the description's ``feet``, so one plan serves
any robot. The expansion names what the description names: its foot bodies stay ``bodies``, the geoms
it names (Go1's foot spheres) go to ``targets``.
"""

from __future__ import annotations

from typing import Any

from simbackend.errors import InvalidArgumentError
from simbackend.randomization import FEET, RandomizationPlan, Term

__all__ = ["expand_aliases", "expand_plan"]


def _feet_split(desc: Any, info: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The description's feet as (geom names, body names) of the model: an entry that is a body name is a
    body (its collision geoms), else a geom (itself), as :func:`simbackend.robots.resolve` reads them."""
    bodies, geoms = [], []
    for name in desc.feet:
        if name in info.body_names:
            bodies.append(name)
        elif name in info.geom_names:
            geoms.append(name)
        else:
            raise InvalidArgumentError(f"robot.feet: the model has no body or geom {name!r}")
    return tuple(geoms), tuple(bodies)


def expand_aliases(term: Term, desc: Any, info: Any, where: str = "term") -> Term:
    """``term`` with the ``bodies`` entry ``"feet"`` replaced by ``desc``'s feet on the model ``info``: their
    bodies stay in ``bodies``, the geoms the description names go to ``targets``. A model with a body
    named ``feet`` makes the entry ambiguous: refused naming it."""
    if not term.bodies or FEET not in term.bodies:
        return term
    if FEET in info.body_names:
        raise InvalidArgumentError(
            f"{where}: bodies entry {FEET!r} is ambiguous: the model has a body named {FEET!r} and the robot"
            f" {desc.name!r} has feet; name the bodies instead"
        )
    geoms, bodies = _feet_split(desc, info)
    rest = tuple(b for b in term.bodies if b != FEET)
    new_bodies = tuple(dict.fromkeys(rest + bodies)) or None
    new_targets = tuple(dict.fromkeys((term.targets or ()) + geoms)) or None
    return Term(
        term.kind,
        term.distribution,
        phase=term.phase,
        targets=new_targets,
        operation=term.operation,
        shared=term.shared,
        scale_inertia=term.scale_inertia,
        components=term.components,
        duration=term.duration,
        interval_s=term.interval_s,
        name=term.name,
        bodies=new_bodies,
    )


def expand_plan(plan: RandomizationPlan, desc: Any, info: Any) -> RandomizationPlan:
    """``plan`` with every term's ``feet`` alias expanded (:func:`expand_aliases`)."""
    terms = tuple(
        expand_aliases(t, desc, info, f"plan term {plan.term_name(i)!r} ({t.kind})") for i, t in enumerate(plan.terms)
    )
    return RandomizationPlan(terms, plan.seed)
