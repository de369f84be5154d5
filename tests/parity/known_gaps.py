"""Where each engine measurably differs from MuJoCo, and why (docs/parity.md lists them with their measured size).

``KNOWN_GAPS[engine]`` maps ``(model, tier, quantity)`` (model: a built-in name or
``"gymnasium/<file stem>"``; quantity: a row of :mod:`simbackend.parity`) to
``(bound, reason)``. The row fails the suite's tolerance for a real, understood
engine difference; the parity test asserts its error stays below ``bound``
(the measured error plus a small margin), so a regression is still caught, and
that it still fails (an entry that starts passing must be removed).

``LOAD_REJECTIONS[engine]`` maps a model the backend refuses to build to a text its
error message must contain: the element it cannot represent.

Measured with ``simbackend parity --sim sapien`` (CPU PhysX, seed 0) and
``simbackend parity --sim mjwarp`` (warp's CPU device, seed 0).
"""

from __future__ import annotations

#: PhysX links need positive mass and inertia: plan.MIN_MASS / MIN_INERTIA of the sapien backend
_MIN_MASS_REASON = (
    "PhysX links need a positive mass and inertia: the sapien backend raises the near-massless"
    " 'goal' marker body (MuJoCo 4.0e-10 kg, 6.4e-13 kg m^2) to 1e-6 kg and 1e-9 kg m^2;"
    " the error is relative to a 1 g / 1e-6 kg m^2 floor"
)

_SAPIEN_GAPS: dict[tuple[str, str, str], tuple[float, str]] = {
    ("gymnasium/pusher", "model", "body_mass"): (1.1e-3, _MIN_MASS_REASON),
    ("gymnasium/pusher", "model", "body_inertia"): (1.1e-3, _MIN_MASS_REASON),
    ("gymnasium/pusher_v5", "model", "body_mass"): (1.1e-3, _MIN_MASS_REASON),
    ("gymnasium/pusher_v5", "model", "body_inertia"): (1.1e-3, _MIN_MASS_REASON),
}

_MJWARP_GAPS: dict[tuple[str, str, str], tuple[float, str]] = {}

KNOWN_GAPS: dict[str, dict[tuple[str, str, str], tuple[float, str]]] = {
    "sapien": _SAPIEN_GAPS,
    "mjwarp": _MJWARP_GAPS,
}

#: gymnasium's humanoids ask for MuJoCo's PGS solver, which MuJoCo Warp does not have: refused at load,
#: naming the option (``mjwarp={'solver': 'newton'}`` builds them; tests/test_mjwarp_backend.py)
_MJWARP_PGS = "option solver mjSOL_PGS"

LOAD_REJECTIONS: dict[str, dict[str, str]] = {
    "sapien": {},
    "mjwarp": {"gymnasium/humanoid": _MJWARP_PGS, "gymnasium/humanoidstandup": _MJWARP_PGS},
}
