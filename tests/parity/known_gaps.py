"""Where each engine measurably differs from MuJoCo, and why (docs/parity.md lists them with their measured size).

``KNOWN_GAPS[engine]`` maps ``(model, tier, quantity)`` (model: a built-in name or
``"gymnasium/<file stem>"``; quantity: a row of :mod:`simbackend.parity`) to
``(bound, reason)``. The row fails the suite's tolerance for a real, understood
engine difference; the parity test asserts its error stays below ``bound``
(the measured error plus a small margin), so a regression is still caught, and
that it still fails (an entry that starts passing must be removed).

``LOAD_REJECTIONS[engine]`` maps a model the backend refuses to build to a text its
error message must contain: the element it cannot represent.

``KNOWN_ROWS[engine]`` maps ``(model, tier, quantity)`` to the elements of the rows the
parity report passes as ``KNOWN``: differences the engine itself declares
(``capabilities.known_differences``) and that hold within the declared values. A
report's KNOWN rows must be exactly these, each naming exactly these elements, so a
new declaration (or one that stops applying) is noticed here.

Measured with ``simbackend parity --sim sapien`` (CPU PhysX, seed 0) and
``simbackend parity --sim mjwarp`` (warp's CPU device, seed 0).
"""

from __future__ import annotations

#: none: the near-massless bodies of gymnasium's pusher were listed here; the sapien backend now declares
#: them (``capabilities.known_differences``) and parity reports their rows KNOWN (``KNOWN_ROWS``)
_SAPIEN_GAPS: dict[tuple[str, str, str], tuple[float, str]] = {}

_MJWARP_GAPS: dict[tuple[str, str, str], tuple[float, str]] = {}

KNOWN_GAPS: dict[str, dict[tuple[str, str, str], tuple[float, str]]] = {
    "sapien": _SAPIEN_GAPS,
    "mjwarp": _MJWARP_GAPS,
}

#: gymnasium's humanoids ask for MuJoCo's PGS solver, which MuJoCo Warp does not have: refused at load,
#: naming the option (``mjwarp={'solver': 'newton'}`` builds them; tests/test_mjwarp_backend.py)
_MJWARP_PGS = "option solver mjSOL_PGS"

#: PhysX links need a positive mass and inertia: the sapien backend gives bodies below 1e-6 kg (pusher's
#: 'object' 1.3e-8 kg in v4, 'goal' 4.0e-10 kg) 1e-6 kg, and principal inertias below 1e-9 kg m^2 that value
_PUSHER_V4 = ("object", "goal")
KNOWN_ROWS: dict[str, dict[tuple[str, str, str], tuple[str, ...]]] = {
    "sapien": {
        ("gymnasium/pusher", "model", "body_mass"): _PUSHER_V4,
        ("gymnasium/pusher", "model", "body_inertia"): _PUSHER_V4,
        ("gymnasium/pusher_v5", "model", "body_mass"): ("goal",),
        ("gymnasium/pusher_v5", "model", "body_inertia"): ("goal",),
    },
    "mjwarp": {},
}

LOAD_REJECTIONS: dict[str, dict[str, str]] = {
    "sapien": {},
    "mjwarp": {"gymnasium/humanoid": _MJWARP_PGS, "gymnasium/humanoidstandup": _MJWARP_PGS},
}
