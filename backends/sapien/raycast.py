"""Rays against every CPU scene's collision shapes (the height scanner's engine part).

PhysX's ``raycast`` returns the closest hit of one ray in one scene, with no
filter. A ray that hits the excluded body (the scanner's own body) goes on
from where it leaves that body's bounding sphere (its shapes' extent around
the link origin): PhysX reports a ray starting inside a shape as a hit at
distance 0, so stepping just past the entry point is not enough. Another
shape inside that sphere is passed over too (the README says so). Each env's
scene has its origin at the world origin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: casts per ray at most
MAX_PASSES = 4
#: how far past the excluded body's bounding sphere the next cast starts, m
_NUDGE = 1e-5


def _shape_radius(s: Any) -> float:
    """Bounding radius of one plan shape around its owner's origin (0 for planes, which never belong to links)."""
    centre = float(np.linalg.norm(np.asarray(s.pose[:3], np.float64)))
    size = np.asarray(s.size, np.float64)
    if s.kind == "box":
        r = float(np.linalg.norm(size))
    elif s.kind == "sphere":
        r = float(size[0])
    elif s.kind in ("capsule", "cylinder"):
        r = float(size[0] + size[1]) if s.kind == "capsule" else float(np.hypot(size[0], size[1]))
    elif s.kind == "convex":
        r = float(np.linalg.norm(np.asarray(s.vertices, np.float64), axis=1).max())
    else:
        r = 0.0
    return centre + r


def ray_cast(engine: Any, plan: Any, origins: np.ndarray, directions: np.ndarray, exclude_body: int,
             max_distance: float = 1e4) -> np.ndarray:
    """``(N, R)`` distances to the first hit per ray and env (-1 for a miss)."""
    excluded, radius, link = set(), 0.0, None
    if exclude_body > 0:
        a, l = plan.body_link[exclude_body]
        if a >= 0:
            link = (int(a), int(l))
            excluded = {id(engine.comps[n][a][l]) for n in range(engine.num_envs)}
            radius = max((_shape_radius(s) for s in plan.articulations[a].links[l].shapes), default=0.0)
    o = np.asarray(origins, np.float64)
    d = np.asarray(directions, np.float64)
    out = np.full(o.shape[:2], -1.0)
    for n, system in enumerate(engine.systems):
        centre = None if link is None else np.asarray(engine.comps[n][link[0]][link[1]].entity_pose.p, np.float64)
        for r in range(o.shape[1]):
            start, travelled = o[n, r].copy(), 0.0
            for _ in range(MAX_PASSES):
                hit = system.raycast(start.astype(np.float32), d[n, r].astype(np.float32),
                                     float(max_distance - travelled))
                if hit is None:
                    break
                if id(hit.component) not in excluded:
                    out[n, r] = travelled + float(hit.distance)
                    break
                # leave the excluded body's bounding sphere: the far root of |start + t d - centre| = radius
                rel = start - centre
                b = float(rel @ d[n, r])
                t = -b + np.sqrt(max(b * b - (float(rel @ rel) - radius * radius), 0.0)) + _NUDGE
                step = max(t, float(hit.distance) + _NUDGE)
                start = start + d[n, r] * step
                travelled += step
    return out
