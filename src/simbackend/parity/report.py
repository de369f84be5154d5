"""The parity report: one row per measured quantity, the report of a run, JSON and text."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from simbackend.capabilities import KnownDifference
from simbackend.errors import SimBackendError, UnknownNameError


class MissingRowError(UnknownNameError, KeyError):
    """A tier or a quantity a parity report does not hold: an :class:`~simbackend.errors.UnknownNameError`
    (so a ``SimBackendError``) that is also the ``KeyError`` a lookup raised before."""

    def __init__(self, message: str, kind: str, name: str):
        SimBackendError.__init__(self, message)
        self.kind, self.name = kind, name


# ----------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------
@dataclass(frozen=True)
class ParityRow:
    """One measured quantity.

    Attributes:
        tier: one of ``"load"`` or :data:`TIERS`.
        quantity: what was compared, e.g. ``"body_pos"`` or ``"dof_pos[elbow]"``.
        max_error: the largest error seen (units of the quantity; relative for
            relative tolerances; a count for names and sizes), ``inf`` where
            the two could not be compared, ``None`` where nothing was measured;
            the elements excused as known differences are left out (``known_error``).
        tolerance: the bound ``max_error`` must not exceed.
        passed: whether it held (a skipped row counts as passed, and so does a known difference).
        first_step: for rollouts, the first substep (1-based: after that many
            substeps) where the error exceeded the tolerance; ``None`` otherwise.
        detail: where the worst error is, both values, or why it failed or was skipped.
        skipped: the tier does not apply to this model (``detail`` says why).
        delegated: the row's result depends on forces the backend under test took from MuJoCo
            (a rollout tier on a model with delegated elements, :attr:`ParityReport.delegated`).
        known: the text of the known difference(s) (``capabilities.known_differences`` of the
            backend under test) that excused some elements of this row: they differ from the
            reference beyond ``tolerance`` but hold the value the backend declares, within it;
            ``""`` where nothing was excused.
        known_error: the largest error of the excused elements against the reference
            (``None`` where nothing was excused).
    """

    tier: str
    quantity: str
    max_error: float | None
    tolerance: float | None
    passed: bool
    first_step: int | None = None
    detail: str = ""
    skipped: bool = False
    delegated: bool = False
    known: str = ""
    known_error: float | None = None

    @property
    def status(self) -> str:
        """``"pass"``, ``"FAIL"``, ``"skip"`` or ``"KNOWN"`` (passed, with elements excused as known differences)."""
        if self.skipped:
            return "skip"
        if not self.passed:
            return "FAIL"
        return "KNOWN" if self.known else "pass"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; non-finite errors become the strings ``"inf"``/``"nan"``."""
        d = asdict(self)
        d["max_error"] = _json_float(self.max_error)
        d["tolerance"] = _json_float(self.tolerance)
        d["known_error"] = _json_float(self.known_error)
        d["status"] = self.status
        return d


@dataclass
class ParityReport:
    """All rows of one parity run of backend ``sim`` against ``reference`` on ``model``.

    ``delegated`` lists the model elements whose physics the backend under test
    takes from MuJoCo (its ``capabilities.delegated``); the rows of the tiers that
    step the physics are then marked (:attr:`ParityRow.delegated`).
    ``known_differences`` are the values the backend under test declares it cannot
    hold as compiled (its ``capabilities.known_differences``); the model tier's rows
    that they excuse have status ``KNOWN`` (:attr:`ParityRow.known`).
    """

    sim: str
    reference: str
    model: str
    tiers: tuple[str, ...]
    num_envs: int
    seed: int
    rows: list[ParityRow] = field(default_factory=list)
    delegated: tuple[str, ...] = ()
    known_differences: tuple[KnownDifference, ...] = ()

    @property
    def passed(self) -> bool:
        """Whether every row passed (skipped rows and known differences count as passed)."""
        return all(r.passed for r in self.rows)

    @property
    def known_rows(self) -> list[ParityRow]:
        """The rows that passed with elements excused as known differences (status ``KNOWN``)."""
        return [r for r in self.rows if r.status == "KNOWN"]

    @property
    def failures(self) -> list[ParityRow]:
        """The failed rows, in report order."""
        return [r for r in self.rows if not r.passed]

    def tier_rows(self, tier: str) -> list[ParityRow]:
        return [r for r in self.rows if r.tier == tier]

    def tier_passed(self, tier: str) -> bool:
        """Whether every row of ``tier`` passed; :class:`MissingRowError` (a ``KeyError``) if the tier has no rows."""
        rows = self.tier_rows(tier)
        if not rows:
            ran = sorted({r.tier for r in self.rows})
            raise MissingRowError(f"tier {tier!r} did not run; ran: {ran}", "tier", tier)
        return all(r.passed for r in rows)

    def row(self, tier: str, quantity: str) -> ParityRow:
        """The row of ``quantity`` in ``tier``; :class:`MissingRowError` (a ``KeyError``) naming the tier's rows."""
        for r in self.rows:
            if r.tier == tier and r.quantity == quantity:
                return r
        raise MissingRowError(
            f"no row {quantity!r} in tier {tier!r}; it has: {[r.quantity for r in self.tier_rows(tier)]}",
            "quantity",
            quantity,
        )

    def first_failure(self, tier: str | None = None) -> ParityRow | None:
        """The failed row (of ``tier``, or of any tier) that failed earliest.

        Rows with a ``first_step`` are ordered by it (ties in report order) and
        come before failed rows without one; ``None`` if nothing failed.
        """
        failed = [r for r in self.failures if tier is None or r.tier == tier]
        if not failed:
            return None
        stepped = [r for r in failed if r.first_step is not None]
        if stepped:
            return min(stepped, key=lambda r: r.first_step)
        return failed[0]

    def delegation_note(self) -> str:
        """One line on the rows that depend on MuJoCo-computed forces, or ``""``."""
        marked = sum(r.delegated for r in self.rows)
        if not self.delegated or not marked:
            return ""
        shown = "; ".join(self.delegated[:3]) + ("; ..." if len(self.delegated) > 3 else "")
        return (
            f"{marked} row(s) marked delegated depend on forces {self.sim} took from MuJoCo for"
            f" {len(self.delegated)} element(s) ({shown}): there they partly compare MuJoCo with itself"
        )

    def known_note(self) -> str:
        """One line on the rows passed as known differences (and what the backend declares), or ``""``."""
        rows = self.known_rows
        if not rows:
            return ""
        shown = ", ".join(f"{r.tier}/{r.quantity}" for r in rows)
        texts = "; ".join(dict.fromkeys(r.known for r in rows))
        return f"{len(rows)} row(s) KNOWN ({shown}): differences {self.sim} declares, within its values: {texts}"

    def summary(self) -> str:
        """One line per failed row (or ``"all passed"``), for logs and assertion messages."""
        note = self.delegation_note()
        known = self.known_note()
        if self.passed:
            return f"{self.sim} vs {self.reference} on {self.model}: all {len(self.rows)} rows passed" + "".join(
                f"\n  {x}" for x in (known, note) if x
            )
        lines = [f"{self.sim} vs {self.reference} on {self.model}: {len(self.failures)} failed rows"]
        for r in self.failures:
            step = f" first at step {r.first_step}" if r.first_step is not None else ""
            lines.append(
                f"  {r.tier}/{r.quantity}: max error {_fmt(r.max_error)} > {_fmt(r.tolerance)}{step}; {r.detail}"
            )
        lines += [f"  {x}" for x in (known, note) if x]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the run and its rows."""
        return {
            "sim": self.sim,
            "reference": self.reference,
            "model": self.model,
            "tiers": list(self.tiers),
            "num_envs": self.num_envs,
            "seed": self.seed,
            "passed": self.passed,
            "delegated": list(self.delegated),
            "known_differences": [d.to_dict() for d in self.known_differences],
            "rows": [r.to_dict() for r in self.rows],
        }


def _json_float(x: float | None) -> Any:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else str(x)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"
