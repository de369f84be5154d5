"""The solids a tile is built of: boxes for the flat-faced tiles, convex prisms for the slopes.

Every piece is a solid from below the tile's lowest point up to the surface,
and the tile's surface is the top of their union: each piece's top is at or
below the surface everywhere over its footprint, and at it somewhere. Every
footprint stays within the tile's square, so no piece reaches under a
neighbouring tile.

* :func:`cell_boxes`: a flat-faced tile's cells (each level, a riser on the
  cells' edges) as boxes. Cells of one height are merged into rectangles,
  each grown over the cells of that height *or higher* (a box may run on
  under higher ground, where it is hidden), so a tile of stairs is one box a
  step (down) or four (up), a tile of stones one box for the pits and one a
  stone.
* :func:`pyramid_prisms`: a slope's planes. A pyramid (``slope_down``) is one
  convex solid, a frustum. An inverted pyramid (``slope_up``: its surface is
  the highest of four planes) is the union of four wedges, each a convex
  prism under one face's plane across the tile (hidden under the others
  where they are higher), beside the platform's box.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TooManyPieces", "cell_boxes", "pyramid_prisms"]


class TooManyPieces(ValueError):
    """A tile would be built of more boxes than the caller allows (``count`` is a lower bound)."""

    def __init__(self, count: int, limit: int):
        super().__init__(f"{count} boxes or more, more than {limit}")
        self.count, self.limit = count, limit


def cell_boxes(
    cells: np.ndarray, resolution: float, size: float, bottom: float, limit: int | None = None
) -> np.ndarray:
    """``(k, 6)`` boxes ``(x_min, x_max, y_min, y_max, z_min, z_max)`` (m, from the tile's centre) whose union
    is the solid under ``cells`` (``(n, n)`` heights, rows along y, columns along x) down to ``bottom``.

    Greedy, by height from the highest: from each cell of that height not yet covered, a rectangle is grown
    along x then along y over the cells at or above that height, and covers the cells of that height within
    it. Few boxes matter more than small ones: MuJoCo poses every geom of the model at every step, and
    cutting the default terrain's boxes at 1 m blocks (5,199 geoms instead of 1,158) made Go1's step 2.5
    times as costly.

    Raises:
        TooManyPieces: more than ``limit`` boxes, found before they are all made: a tile of that many
            runs of equal cells (every box starts one) is refused before the greedy pass.
    """
    runs = int((cells[:, 1:] != cells[:, :-1]).sum()) + cells.shape[0]
    if limit is not None and runs > 10 * limit:
        raise TooManyPieces(runs // 10, limit)
    boxes = np.array(_cover(cells, limit), np.float64).reshape(-1, 5)
    xy = boxes[:, :4] * resolution - size / 2
    return np.column_stack([xy, np.full(len(boxes), bottom), boxes[:, 4]])


def _cover(cells: np.ndarray, limit: int | None = None) -> list[tuple[int, int, int, int, float]]:
    """``(c0, c1, r0, r1, height)`` rectangles (cell indices, ends excluded) covering ``cells`` (see
    :func:`cell_boxes`); :class:`TooManyPieces` past ``limit``."""
    rows, cols = cells.shape
    out: list[tuple[int, int, int, int, float]] = []
    for level in np.unique(cells)[::-1]:
        allowed = cells >= level
        need = cells == level
        for r in np.flatnonzero(need.any(axis=1)):
            row = need[r]  # a view: cleared as boxes cover it
            while row.any():
                c = int(np.argmax(row))
                c0, c1 = c, c
                while c0 > 0 and allowed[r, c0 - 1]:
                    c0 -= 1
                while c1 < cols - 1 and allowed[r, c1 + 1]:
                    c1 += 1
                r0, r1 = int(r), int(r)
                while r0 > 0 and allowed[r0 - 1, c0 : c1 + 1].all():
                    r0 -= 1
                while r1 < rows - 1 and allowed[r1 + 1, c0 : c1 + 1].all():
                    r1 += 1
                need[r0 : r1 + 1, c0 : c1 + 1] = False
                out.append((c0, c1 + 1, r0, r1 + 1, float(level)))
                if limit is not None and len(out) > limit:
                    raise TooManyPieces(len(out), limit)
    return out


def pyramid_prisms(slope: float, platform: float, size: float, bottom: float) -> tuple[list[np.ndarray], np.ndarray]:
    """``(prisms, boxes)`` under a slope tile's surface ``slope * (size/2 - max(|x|, |y|, platform/2))``
    (``slope`` signed: > 0 a pyramid, < 0 an inverted one), down to ``bottom``: each prism its ``(8, 3)``
    vertices (m, from the tile's centre), the boxes as :func:`cell_boxes` gives them. A level tile (slope
    0) is one box."""
    half = size / 2
    p = min(platform, size) / 2
    top = slope * (half - p)  # the platform's height
    if top == 0.0:
        return [], np.array([[-half, half, -half, half, bottom, 0.0]])
    if slope > 0:  # a frustum: the tile's square at the rim (height 0) and below, the platform's on top
        corners = ((-1, -1), (1, -1), (1, 1), (-1, 1))
        verts = [(sx * half, sy * half, z) for z in (bottom, 0.0) for sx, sy in corners]
        verts += [(sx * p, sy * p, top) for sx, sy in corners]
        return [np.array(verts)], np.zeros((0, 6))
    prisms = []
    for axis, sign in ((0, 1.0), (0, -1.0), (1, 1.0), (1, -1.0)):
        # the face rising toward the rim at (axis, sign), from the platform's edge (t = p, at the platform's
        # height) to the rim (t = half, at 0), across the whole tile (where another face is higher, this
        # one is hidden under it)
        verts = []
        for t, z in ((p, top), (half, 0.0)):
            for across in (-half, half):
                for zz in (bottom, z):
                    xy = [0.0, 0.0]
                    xy[axis], xy[1 - axis] = sign * t, across
                    verts.append((xy[0], xy[1], zz))
        prisms.append(np.array(verts))
    return prisms, np.array([[-p, p, -p, p, bottom, top]])
