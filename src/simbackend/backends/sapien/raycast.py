"""Rays against the collision shapes of every env (the height scanner's engine part).

The rays are intersected in torch with the shapes PhysX holds (the plan's
primitives and PhysX's own cooked convex hulls), posed by the links' current
poses, for all envs and rays at once. PhysX's scene queries
(``PhysxCpuSystem.raycast``) are not used, because in SAPIEN 3.0.3 they
answer from a structure that only ``step`` brings up to date: after
construction or ``set_state`` they see links where the scene was built (non-root
links at the origin), so a scan read before the next step would describe
another instant than the getters; they also miss SAPIEN's cylinders (a custom
geometry), report a ray starting inside a shape as a hit at distance 0, and
cannot skip one body's shapes.

The rules are MuJoCo's ``mj_ray`` (the reference), with the contract's
choices on top: a ray reports the first point at distance ``t >= 0`` where it
crosses a shape's surface (so a ray starting inside a shape reports where it
leaves it); planes are one-sided (only a ray coming from the front and going
towards it hits) and unbounded, as in collision; the excluded body's shapes
are skipped exactly. Only shapes that collide exist in the plan (visual-only
geoms are never built).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simbackend.math import quat_apply, quat_apply_inverse, quat_mul

#: |component| below which a direction counts as parallel to an axis or face
_PARALLEL = 1e-12


class RayCaster:
    """The plan's collision shapes, prepared once; :meth:`cast` runs the queries.

    Args:
        plan: the build plan (shape kinds, sizes and poses in their owner's frame).
        engine: the PhysX engine; env 0's convex shapes give PhysX's cooked hulls.
    """

    def __init__(self, plan: Any, engine: Any):
        owners: list[tuple[int, list, list]] = [(0, list(plan.static_shapes), engine.static_shapes(0))]
        for a, art in enumerate(plan.articulations):
            for l, lk in enumerate(art.links):
                if lk.shapes:
                    owners.append((int(lk.body), list(lk.shapes), list(engine.comps[0][a][l].collision_shapes)))
        self.shapes: list[dict] = []
        info = plan.info
        for body, shapes, physx_shapes in owners:
            for k, s in enumerate(shapes):
                if not (info.geom_contype[s.geom] or info.geom_conaffinity[s.geom]):
                    continue  # built only for an explicit contact pair: not a collision geom for rays
                entry = {
                    "body": body,
                    "kind": s.kind,
                    "pose": np.asarray(s.pose, np.float64),
                    "size": np.asarray(s.size, np.float64),
                }
                if s.kind == "convex":
                    entry["faces"], entry["radius"] = _hull_planes(physx_shapes[k])
                elif s.kind == "mesh":  # a height field's surface: its triangles, as PhysX holds them
                    verts = np.asarray(s.vertices, np.float64)
                    entry["triangles"] = verts[np.asarray(s.triangles, np.int64)]  # (T, 3, 3)
                    entry["radius"] = float(np.linalg.norm(verts, axis=1).max()) * (1 + 1e-9)
                else:
                    entry["radius"] = _bounding_radius(s.kind, entry["size"])
                self.shapes.append(entry)
        #: bodies whose poses :meth:`cast` needs (the world, 0, excluded: its shapes never move)
        self.bodies = np.array(sorted({e["body"] for e in self.shapes if e["body"] > 0}), np.int64)
        self._column = {int(b): i for i, b in enumerate(self.bodies)}
        self._tensors: dict = {}

    def _shape_tensors(self, i: int, device: torch.device) -> dict:
        key = (i, str(device))
        if key not in self._tensors:
            e = self.shapes[i]
            self._tensors[key] = {
                k: torch.as_tensor(v, dtype=torch.float64, device=device)
                for k, v in e.items()
                if isinstance(v, np.ndarray)
            }
        return self._tensors[key]

    def cast(
        self,
        origins: torch.Tensor,
        directions: torch.Tensor,
        exclude_body: int,
        body_pos: torch.Tensor,
        body_quat: torch.Tensor,
    ) -> torch.Tensor:
        """``(N, R)`` distance to the first shape along each unit ray; -1 for a miss.

        Args:
            origins, directions: ``(N, R, 3)`` world rays.
            exclude_body: body whose shapes are skipped (-1: none).
            body_pos, body_quat: ``(N, len(bodies), 3/4)`` current poses of :attr:`bodies`.
        """
        dev = origins.device
        o = origins.to(torch.float64)
        v = directions.to(torch.float64)
        n, r = o.shape[:2]
        best = torch.full((n, r), torch.inf, dtype=torch.float64, device=dev)
        bp, bq = body_pos.to(dev, torch.float64), body_quat.to(dev, torch.float64)
        for i, e in enumerate(self.shapes):
            if e["body"] == exclude_body:
                continue
            t = self._shape_tensors(i, dev)
            sp, sq = t["pose"][:3], t["pose"][3:]
            if e["body"] == 0:
                wp, wq = sp.expand(n, 1, 3), sq.expand(n, 1, 4)
            else:
                c = self._column[e["body"]]
                p, q = bp[:, c : c + 1], bq[:, c : c + 1]  # (N, 1, 3/4)
                wp, wq = p + quat_apply(q, sp.expand(n, 1, 3)), quat_mul(q, sq.expand(n, 1, 4))
            lo = quat_apply_inverse(wq.expand(n, r, 4), o - wp)  # rays in the shape's frame
            lv = quat_apply_inverse(wq.expand(n, r, 4), v)
            lo, lv = lo.reshape(-1, 3), lv.reshape(-1, 3)
            dist = torch.full((n * r,), torch.inf, dtype=torch.float64, device=dev)
            rad = e["radius"] * (1 + 1e-9) + 1e-9
            if np.isfinite(rad):  # only rays whose line meets the bounding sphere ahead of the origin
                b = (lo * lv).sum(-1)
                disc = b * b - ((lo * lo).sum(-1) - rad * rad)
                near = (disc >= 0) & (-b + torch.sqrt(disc.clamp(min=0)) >= 0)
                idx = torch.nonzero(near).squeeze(-1)
                if idx.numel():
                    dist[idx] = _KIND[e["kind"]](lo[idx], lv[idx], t)
            else:
                dist = _KIND[e["kind"]](lo, lv, t)
            best = torch.minimum(best, dist.reshape(n, r))
        return torch.where(torch.isfinite(best), best, torch.full_like(best, -1.0))


def _hull_planes(shape: Any) -> tuple[np.ndarray, float]:
    """``(F, 4)`` outward unit normals and offsets (``n . x <= h`` inside) of a cooked PhysX hull,
    and the farthest vertex's distance from the shape's origin."""
    verts = np.asarray(shape.get_vertices(), np.float64) * np.asarray(shape.get_scale(), np.float64)
    tris = np.asarray(shape.get_triangles(), np.int64).reshape(-1, 3)
    a, b, c = verts[tris[:, 0]], verts[tris[:, 1]], verts[tris[:, 2]]
    nrm = np.cross(b - a, c - a)
    length = np.linalg.norm(nrm, axis=1)
    keep = length > 1e-12 * max(float(np.abs(verts).max()), 1e-12) ** 2
    nrm, a = nrm[keep] / length[keep, None], a[keep]
    h = (nrm * a).sum(1)
    centre = verts.mean(0)
    flip = nrm @ centre > h  # the centre lies inside: every normal points away from it
    nrm[flip], h[flip] = -nrm[flip], -h[flip]
    return np.concatenate([nrm, h[:, None]], axis=1), float(np.linalg.norm(verts, axis=1).max()) * (1 + 1e-9)


def _bounding_radius(kind: str, size: np.ndarray) -> float:
    """Radius of a sphere around a primitive's origin holding it (inf for planes)."""
    if kind == "plane":
        return float("inf")
    if kind == "sphere":
        return float(size[0])
    if kind == "box":
        return float(np.linalg.norm(size))
    if kind == "capsule":
        return float(size[0] + size[1])
    return float(np.hypot(size[0], size[1]))  # cylinder


# ----------------------------------------------------------------------
# one kind of shape in its own frame: (K, 3) origins and unit directions -> (K,) first t >= 0, inf for a miss
# ----------------------------------------------------------------------
def _first(*candidates: torch.Tensor) -> torch.Tensor:
    """The smallest candidate ``t >= 0`` (candidates are inf where invalid)."""
    out = candidates[0]
    for c in candidates[1:]:
        out = torch.minimum(out, c)
    return out


def _valid(t: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    return torch.where(ok & (t >= 0), t, torch.full_like(t, torch.inf))


def _quadratic(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Roots of ``a t^2 + 2 b t + c`` (``a > 0`` where ``ok``): (t_small, t_large, ok)."""
    disc = b * b - a * c
    ok = (disc >= 0) & (a > _PARALLEL)
    sq = torch.sqrt(disc.clamp(min=0))
    a_safe = torch.where(ok, a, torch.ones_like(a))
    return (-b - sq) / a_safe, (-b + sq) / a_safe, ok


def _plane(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    """Normal +x (PhysX's plane axis); one-sided and unbounded."""
    toward = v[:, 0] < -_PARALLEL
    return _valid(-o[:, 0] / torch.where(toward, v[:, 0], -torch.ones_like(v[:, 0])), toward)


def _sphere(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    r = t["size"][0]
    t1, t2, ok = _quadratic((v * v).sum(-1), (o * v).sum(-1), (o * o).sum(-1) - r * r)
    return _first(_valid(t1, ok), _valid(t2, ok))


def _slabs(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """First crossing of the convex set ``{x : den_k t <= num_k for all k}`` along ``t >= 0``."""
    par = den.abs() < _PARALLEL
    tk = num / torch.where(par, torch.ones_like(den), den)
    inf = torch.full_like(tk, torch.inf)
    enter = torch.where(~par & (den < 0), tk, -inf).amax(-1)
    leave = torch.where(~par & (den > 0), tk, inf).amin(-1)
    outside = (par & (num < 0)).any(-1)
    ok = ~outside & (enter <= leave) & (leave >= 0)
    return torch.where(ok, torch.where(enter >= 0, enter, leave), torch.full_like(enter, torch.inf))


def _box(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    h = t["size"]
    # |o + t v| <= h per axis: v t <= h - o and -v t <= h + o
    return _slabs(torch.cat([h - o, h + o], -1), torch.cat([v, -v], -1))


def _convex(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    faces = t["faces"]
    nrm, h = faces[:, :3], faces[:, 3]
    return _slabs(h - o @ nrm.T, v @ nrm.T)


def _side(o: torch.Tensor, v: torch.Tensor, r: torch.Tensor, half: torch.Tensor) -> torch.Tensor:
    """Crossings of the cylinder of radius ``r`` about x, within ``|x| <= half``."""
    t1, t2, ok = _quadratic(
        v[:, 1] ** 2 + v[:, 2] ** 2, o[:, 1] * v[:, 1] + o[:, 2] * v[:, 2], o[:, 1] ** 2 + o[:, 2] ** 2 - r * r
    )
    return _first(*(_valid(s, ok & ((o[:, 0] + s * v[:, 0]).abs() <= half)) for s in (t1, t2)))


def _capsule(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    r, half = t["size"][0], t["size"][1]
    hits = [_side(o, v, r, half)]
    for sign in (1.0, -1.0):
        c = o.clone()
        c[:, 0] -= sign * half
        t1, t2, ok = _quadratic((v * v).sum(-1), (c * v).sum(-1), (c * c).sum(-1) - r * r)
        for s in (t1, t2):  # on this cap: beyond the segment's end
            hits.append(_valid(s, ok & (sign * (o[:, 0] + s * v[:, 0]) >= half)))
    return _first(*hits)


def _cylinder(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    r, half = t["size"][0], t["size"][1]
    hits = [_side(o, v, r, half)]
    axial = v[:, 0].abs() > _PARALLEL
    vx = torch.where(axial, v[:, 0], torch.ones_like(v[:, 0]))
    for sign in (1.0, -1.0):
        s = (sign * half - o[:, 0]) / vx
        y, z = o[:, 1] + s * v[:, 1], o[:, 2] + s * v[:, 2]
        hits.append(_valid(s, axial & (y * y + z * z <= r * r)))
    return _first(*hits)


#: ray-triangle pairs handled at once by :func:`_mesh` (bounds its memory)
_MESH_CHUNK = 1 << 22


def _mesh(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    """Triangles, two-sided (Moller-Trumbore), in chunks of rays x triangles."""
    tri = t["triangles"]  # (T, 3, 3)
    a, e1, e2 = tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    out = torch.full((o.shape[0],), torch.inf, dtype=o.dtype, device=o.device)
    step = max(1, _MESH_CHUNK // max(1, tri.shape[0]))
    for i in range(0, o.shape[0], step):
        oo, vv = o[i : i + step, None], v[i : i + step, None]  # (K, 1, 3)
        p = torch.cross(vv.expand(-1, e2.shape[0], -1), e2.expand(oo.shape[0], -1, -1), dim=-1)
        det = (e1 * p).sum(-1)
        ok = det.abs() > _PARALLEL
        inv = 1.0 / torch.where(ok, det, torch.ones_like(det))
        s = oo - a
        u = (s * p).sum(-1) * inv
        q = torch.cross(s, e1.expand_as(s), dim=-1)
        w = (vv * q).sum(-1) * inv
        hit = (e2 * q).sum(-1) * inv
        ok &= (u >= 0) & (w >= 0) & (u + w <= 1)
        out[i : i + step] = _valid(hit, ok).amin(-1)
    return out


_KIND = {
    "plane": _plane,
    "sphere": _sphere,
    "box": _box,
    "convex": _convex,
    "capsule": _capsule,
    "cylinder": _cylinder,
    "mesh": _mesh,
}
