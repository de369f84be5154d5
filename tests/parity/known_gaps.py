"""Where the SAPIEN backend measurably differs from MuJoCo, and why (docs/parity.md lists them with their measured size).

``KNOWN_GAPS`` maps ``(model, tier, quantity)`` (model: a built-in name or
``"gymnasium/<file stem>"``; quantity: a row of :mod:`simbackend.parity`) to
``(bound, reason)``. The row fails the suite's tolerance for a real, understood
engine difference; the parity test asserts its error stays below ``bound``
(the measured error plus a small margin), so a regression is still caught, and
that it still fails (an entry that starts passing must be removed).

``LOAD_REJECTIONS`` maps a model the backend refuses to build to a text its
error message must contain: the element it cannot represent.

Measured with ``simbackend parity --sim sapien`` (CPU PhysX, seed 0).
"""

from __future__ import annotations

#: PhysX links need positive mass and inertia: plan.MIN_MASS / MIN_INERTIA of the sapien backend
_MIN_MASS_REASON = (
    "PhysX links need a positive mass and inertia: the sapien backend raises the near-massless"
    " 'goal' marker body (MuJoCo 4.0e-10 kg, 6.4e-13 kg m^2) to 1e-6 kg and 1e-9 kg m^2;"
    " the error is relative to a 1 g / 1e-6 kg m^2 floor"
)

KNOWN_GAPS: dict[tuple[str, str, str], tuple[float, str]] = {
    ("gymnasium/pusher", "model", "body_mass"): (1.1e-3, _MIN_MASS_REASON),
    ("gymnasium/pusher", "model", "body_inertia"): (1.1e-3, _MIN_MASS_REASON),
    ("gymnasium/pusher_v5", "model", "body_mass"): (1.1e-3, _MIN_MASS_REASON),
    ("gymnasium/pusher_v5", "model", "body_inertia"): (1.1e-3, _MIN_MASS_REASON),
}

LOAD_REJECTIONS: dict[str, str] = {}
