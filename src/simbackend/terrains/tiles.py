"""The sub-terrains: one function per terrain type, heights of one tile at one difficulty.

Each type has parameters with a ``(easy, hard)`` pair: at difficulty ``d`` in
``[0, 1]`` a parameter is ``easy + d * (hard - easy)`` (a pair of equal values
is a constant). :data:`TERRAIN_TYPES` holds the defaults; a terrain config's
``params`` replaces any of them. The types are those of legged_gym and Isaac
Lab's height-field terrains, defined here from what the robot at the tile's
centre faces:

* ``flat``: level ground.
* ``rough``: uniform noise of total amplitude ``amplitude`` on every sample,
  in steps of ``step``.
* ``slope_up`` / ``slope_down``: a pyramid of slope ``slope`` (rise over run)
  around a flat ``platform`` (its width): ``up`` has the platform at the
  bottom (the robot climbs out), ``down`` at the top.
* ``stairs_up`` / ``stairs_down``: the same pyramids in steps of
  ``step_height`` every ``step_width``.
* ``obstacles``: ``count`` rectangles ``size`` wide at random places, each
  ``height`` up or down (or half of it), the central ``platform`` kept clear.
* ``stepping_stones``: square stones ``stone_size`` wide, ``gap`` apart, over
  pits ``depth`` deep, around a ``platform``.

Each type has a *form* (:data:`FORMS`), the shape of its surface and so how
it is built (:mod:`.pieces`):

* ``cells``: flat-faced types (flat, stairs, obstacles, stepping stones).
  The surface is level on every cell of the ``resolution`` grid, at the
  height the type's definition gives the cell's centre, with vertical risers
  on the cells' edges. Built of boxes.
* ``pyramid``: the slopes, the exact planes of their definition. Built of
  convex prisms.
* ``samples``: rough ground, its noise drawn on every sample point of the
  grid, each cell split into two triangles. Built as a height field.

Every tile's rim is at height 0, for every type: rough ground's noise stops one
sample short of it, and a flat-faced tile's outermost cells are at 0. Two
neighbouring tiles therefore have one height on the seam they share (and the
border's, 0, on the grid's edge): no step, and no doubt about which tile a
ray or a contact exactly on the seam finds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["FORMS", "TERRAIN_TYPES", "height_bound", "noise_steps", "tile_heights", "tile_surface", "param_values"]

#: ``{type: {param: (easy, hard)}}``: each type's parameters at difficulty 0 and 1 (metres, or rise/run)
TERRAIN_TYPES: dict[str, dict[str, tuple[float, float]]] = {
    "flat": {},
    "rough": {"amplitude": (0.02, 0.10), "step": (0.005, 0.005)},
    "slope_up": {"slope": (0.0, 0.4), "platform": (1.0, 1.0)},
    "slope_down": {"slope": (0.0, 0.4), "platform": (1.0, 1.0)},
    "stairs_up": {"step_height": (0.05, 0.20), "step_width": (0.30, 0.30), "platform": (1.0, 1.0)},
    "stairs_down": {"step_height": (0.05, 0.20), "step_width": (0.30, 0.30), "platform": (1.0, 1.0)},
    "obstacles": {"height": (0.05, 0.20), "size": (0.4, 1.0), "count": (20.0, 20.0), "platform": (2.0, 2.0)},
    "stepping_stones": {"stone_size": (0.8, 0.4), "gap": (0.1, 0.3), "depth": (0.5, 0.5), "platform": (1.2, 1.2)},
}
#: ``{type: form}``: how each type's surface is shaped and built (the module docstring)
FORMS: dict[str, str] = {
    "flat": "cells",
    "rough": "samples",
    "slope_up": "pyramid",
    "slope_down": "pyramid",
    "stairs_up": "cells",
    "stairs_down": "cells",
    "obstacles": "cells",
    "stepping_stones": "cells",
}
#: parameters that must be > 0 (the others >= 0)
POSITIVE = ("step", "step_width", "size", "stone_size", "count", "platform")


def param_values(kind: str, difficulty: float, params: dict[str, tuple[float, float]] | None = None) -> dict:
    """``{param: value}`` of ``kind`` at ``difficulty``: the defaults with ``params`` replacing any pair."""
    pairs = {**TERRAIN_TYPES[kind], **(params or {})}
    return {k: lo + difficulty * (hi - lo) for k, (lo, hi) in pairs.items()}


def noise_steps(amplitude: float, step: float) -> float:
    """How many ``step`` s rough ground's noise spans (its levels less one): ``floor(amplitude / step)``."""
    return float(np.floor(amplitude / step + 1e-9))


def height_bound(kind: str, p: dict, size: float) -> float:
    """The largest ``|height|`` (m) a ``size`` m tile of ``kind`` with parameter values ``p`` reaches (from
    each type's definition; ``inf`` where it overflows), found without drawing the tile."""
    run = size / 2 - min(p.get("platform", 0.0), size) / 2  # rim to platform, for the pyramids
    with np.errstate(over="ignore"):
        if kind == "rough":
            return noise_steps(p["amplitude"], p["step"]) * p["step"] / 2
        if kind in ("slope_up", "slope_down"):
            return p["slope"] * run
        if kind in ("stairs_up", "stairs_down"):
            return p["step_height"] * float(np.floor(run / p["step_width"] + 1e-9))
        if kind == "obstacles":
            return p["height"]
        if kind == "stepping_stones":
            return p["depth"]
    return 0.0


def _axes(size: float, resolution: float, cells: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` from the tile's centre (rows are y, columns x): the ``(n+1, n+1)`` sample points, or with
    ``cells`` the ``(n, n)`` cells' centres."""
    n = int(round(size / resolution))
    s = np.linspace(-size / 2, size / 2, n + 1)
    if cells:
        s = (s[:-1] + s[1:]) / 2
    y, x = np.meshgrid(s, s, indexing="ij")
    return x, y


def _chebyshev(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.maximum(np.abs(x), np.abs(y))


def _flat(x: np.ndarray, y: np.ndarray, size: float, p: dict, rng: np.random.Generator) -> np.ndarray:
    return np.zeros_like(x)


def _rough(x: np.ndarray, y: np.ndarray, size: float, p: dict, rng: np.random.Generator) -> np.ndarray:
    step = p["step"]
    # whole steps centred on 0, none beyond amplitude / 2 (the amplitude need not be a whole number of steps);
    # a level drawn by its index (what ``rng.choice`` of the k + 1 levels draws), the levels never listed
    k = int(noise_steps(p["amplitude"], step))
    return (rng.integers(0, k + 1, size=x.shape, dtype=np.int64) - k / 2) * step


def _pyramid_depth(x: np.ndarray, y: np.ndarray, size: float, platform: float) -> np.ndarray:
    """Run (m) from the rim toward the centre, held at the platform's edge."""
    return size / 2 - np.maximum(_chebyshev(x, y), min(platform, size) / 2)


def _slope(sign: float) -> Callable:
    def heights(x: np.ndarray, y: np.ndarray, size: float, p: dict, rng: np.random.Generator) -> np.ndarray:
        return sign * p["slope"] * _pyramid_depth(x, y, size, p["platform"])

    return heights


def _stairs(sign: float) -> Callable:
    def heights(x: np.ndarray, y: np.ndarray, size: float, p: dict, rng: np.random.Generator) -> np.ndarray:
        steps = np.floor(_pyramid_depth(x, y, size, p["platform"]) / p["step_width"] + 1e-9)
        return sign * p["step_height"] * steps

    return heights


def _obstacles(x: np.ndarray, y: np.ndarray, size: float, p: dict, rng: np.random.Generator) -> np.ndarray:
    h = np.zeros_like(x)
    choices = np.array([-1.0, -0.5, 0.5, 1.0]) * p["height"]
    xs, ys = x[0], y[:, 0]  # the sample axes (columns along x, rows along y)
    for _ in range(int(round(p["count"]))):
        w, d = rng.uniform(0.5 * p["size"], p["size"], 2)
        cx, cy = rng.uniform(-size / 2, size / 2, 2)
        # the points (cell centres) within the rectangle: a block of whole rows and columns (|s - c| is
        # monotonic on either side of c), written as one slice instead of a mask over the whole tile
        cols, rows = np.flatnonzero(np.abs(xs - cx) <= w / 2), np.flatnonzero(np.abs(ys - cy) <= d / 2)
        value = rng.choice(choices)
        if cols.size and rows.size:
            h[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1] = value
    h[_chebyshev(x, y) <= p["platform"] / 2] = 0.0
    return h


def _stones(x: np.ndarray, y: np.ndarray, size: float, p: dict, rng: np.random.Generator) -> np.ndarray:
    pitch = p["stone_size"] + p["gap"]
    # a lattice of stones centred on the tile, shifted by a random offset so that tiles differ
    ox, oy = rng.uniform(0, pitch, 2)
    u = np.mod(x + ox, pitch)
    v = np.mod(y + oy, pitch)
    stone = (u <= p["stone_size"]) & (v <= p["stone_size"])
    h = np.where(stone, 0.0, -p["depth"])
    h[_chebyshev(x, y) <= p["platform"] / 2] = 0.0
    return h


_MAKERS: dict[str, Callable] = {
    "flat": _flat,
    "rough": _rough,
    "slope_up": _slope(-1.0),
    "slope_down": _slope(1.0),
    "stairs_up": _stairs(-1.0),
    "stairs_down": _stairs(1.0),
    "obstacles": _obstacles,
    "stepping_stones": _stones,
}
assert set(_MAKERS) == set(TERRAIN_TYPES)


def tile_surface(
    kind: str, difficulty: float, size: float, resolution: float, rng: np.random.Generator, params: dict | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(samples, cells)`` of a ``size`` m tile of ``kind`` at ``difficulty``, ``resolution`` apart, rows along
    y and columns along x (a MuJoCo height field's order), from the tile's centre.

    ``cells`` (``(n, n)``, flat-faced types only, else ``None``) is each cell's height: the type's
    definition at the cell's centre. ``samples`` (``(n+1, n+1)``) is the surface's height at each sample
    point: a ``samples`` type's drawn heights, a pyramid's planes there, and for a flat-faced type the
    highest cell touching the point (the top of a riser)."""
    p = param_values(kind, difficulty, params)
    if FORMS[kind] != "cells":
        x, y = _axes(size, resolution)
        h = np.asarray(_MAKERS[kind](x, y, size, p, rng), dtype=np.float64)
        # the rim at 0 (rough ground's noise stops one sample short of it): neighbouring tiles share their
        # seam's height, so the surface has one height there whichever tile a ray or a contact finds
        h[[0, -1], :] = 0.0
        h[:, [0, -1]] = 0.0
        return h, None
    x, y = _axes(size, resolution, cells=True)
    c = np.asarray(_MAKERS[kind](x, y, size, p, rng), dtype=np.float64)
    c[[0, -1], :] = 0.0  # the outermost cells at 0: the tile meets its neighbours and the border level
    c[:, [0, -1]] = 0.0
    padded = np.pad(c, 1, constant_values=-np.inf)
    h = np.maximum.reduce([padded[:-1, :-1], padded[:-1, 1:], padded[1:, :-1], padded[1:, 1:]])
    return h, c


def tile_heights(
    kind: str, difficulty: float, size: float, resolution: float, rng: np.random.Generator, params: dict | None = None
) -> np.ndarray:
    """``(n+1, n+1)`` heights (m) of the surface of a ``size`` m tile of ``kind`` at ``difficulty`` at its
    sample points, ``resolution`` apart (:func:`tile_surface`'s ``samples``)."""
    return tile_surface(kind, difficulty, size, resolution, rng, params)[0]
