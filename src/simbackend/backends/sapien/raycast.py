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

A height field's surface is PhysX's triangle mesh of it; a ray is tested only
against the triangles of the grid cells its path crosses, and the world's height
fields of one grid size (a terrain's tiles) are cast against together, each ray
against the tiles whose box in the world it meets (picked once per env where an
env's rays are parallel, as a height scanner's are): the distances are those of
testing every triangle, bit for bit (256 envs x 187 rays over 30 tiles of 12,800
triangles: 0.04 s on one thread, against 156 s for every triangle). Static
shapes are culled by their box in the world, moving ones by their bounding
sphere.
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
                    entry["radius"] = float(np.linalg.norm(verts, axis=1).max()) * (1 + 1e-9)
                    if s.grid is not None:  # only the cells a ray crosses are tested (:func:`_hfield`)
                        entry["kind"] = "hfield"
                        entry["grid"] = verts.reshape(*s.grid, 3)
                    else:
                        entry["triangles"] = verts[np.asarray(s.triangles, np.int64)]  # (T, 3, 3)
                else:
                    entry["radius"] = _bounding_radius(s.kind, entry["size"])
                self.shapes.append(entry)
        for e in self.shapes:
            if e["body"] == 0 and np.isfinite(e["radius"]):
                e["aabb"] = _world_box(e)
        #: bodies whose poses :meth:`cast` needs (the world, 0, excluded: its shapes never move)
        self.bodies = np.array(sorted({e["body"] for e in self.shapes if e["body"] > 0}), np.int64)
        self._column = {int(b): i for i, b in enumerate(self.bodies)}
        self._tensors: dict = {}
        #: the world's height fields, by grid size: each group is cast against at once (a terrain's tiles)
        groups: dict[tuple, list[int]] = {}
        for i, e in enumerate(self.shapes):
            if e["kind"] == "hfield" and e["body"] == 0:
                groups.setdefault(e["grid"].shape, []).append(i)
        self._groups = list(groups.values())
        self._grouped = {i for members in self._groups for i in members}

    def _group_tensors(self, k: int, device: torch.device) -> dict:
        key = ("group", k, str(device))
        if key not in self._tensors:
            members = [self.shapes[i] for i in self._groups[k]]
            as_t = lambda a: torch.as_tensor(np.stack(a), dtype=torch.float64, device=device)  # noqa: E731
            self._tensors[key] = {
                "frame": grid_frame(as_t([e["grid"] for e in members])),
                "pose": as_t([e["pose"] for e in members]),
                "aabb": as_t([e["aabb"] for e in members]),
            }
        return self._tensors[key]

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
        bundle = _bundle(o, v)
        for k in range(len(self._groups) if exclude_body != 0 else 0):
            self._cast_group(k, o, v, bundle, best)
        for i, e in enumerate(self.shapes):
            if e["body"] == exclude_body or i in self._grouped:
                continue
            t = self._shape_tensors(i, dev)
            sp, sq = t["pose"][:3], t["pose"][3:]
            if e["body"] == 0:
                wp, wq = sp.expand(n, 1, 3), sq.expand(n, 1, 4)
            else:
                c = self._column[e["body"]]
                p, q = bp[:, c : c + 1], bq[:, c : c + 1]  # (N, 1, 3/4)
                wp, wq = p + quat_apply(q, sp.expand(n, 1, 3)), quat_mul(q, sq.expand(n, 1, 4))
            if not np.isfinite(e["radius"]):  # a plane: every ray
                lo = quat_apply_inverse(wq.expand(n, r, 4), o - wp).reshape(-1, 3)  # rays in the shape's frame
                lv = quat_apply_inverse(wq.expand(n, r, 4), v).reshape(-1, 3)
                best = torch.minimum(best, _KIND[e["kind"]](lo, lv, t).reshape(n, r))
                continue
            if e["body"] == 0:  # only rays that meet its box in the world
                box = t["aabb"][None]
                ray, _ = _near(o, v, bundle, lambda oi, vi, env, grow, box=box: _boxes_met(oi, vi, box, grow))
            else:  # only rays that meet its bounding sphere
                rad = torch.full((1,), e["radius"] * (1 + 1e-9) + 1e-9, dtype=torch.float64, device=dev)

                def met(
                    oi: torch.Tensor, vi: torch.Tensor, env: torch.Tensor, grow: torch.Tensor, wp=wp, rad=rad
                ) -> torch.Tensor:
                    return _spheres_met(oi, vi, wp[env], rad + grow[:, None])

                ray, _ = _near(o, v, bundle, met)
            if ray.numel():  # those rays alone, in the shape's frame
                q = wq[ray // r, 0]
                lo = quat_apply_inverse(q, o.reshape(-1, 3)[ray] - wp[ray // r, 0])
                lv = quat_apply_inverse(q, v.reshape(-1, 3)[ray])
                best.view(-1).scatter_reduce_(0, ray, _KIND[e["kind"]](lo, lv, t), "amin")
        return torch.where(torch.isfinite(best), best, torch.full_like(best, -1.0))

    def _cast_group(self, k: int, o: torch.Tensor, v: torch.Tensor, bundle: tuple | None, best: torch.Tensor) -> None:
        """Lower ``best`` ``(N, R)`` to the distance along world rays ``o, v`` ``(N, R, 3)`` to static
        height field group ``k``'s surfaces where nearer, each ray against the fields whose box in the
        world it meets (:func:`_near`)."""
        t = self._group_tensors(k, o.device)
        centre, quat, box = t["pose"][:, :3], t["pose"][:, 3:], t["aabb"]
        ray, s = _near(o, v, bundle, lambda oi, vi, env, grow: _boxes_met(oi, vi, box, grow))
        flat_o, flat_v, flat_best = o.reshape(-1, 3), v.reshape(-1, 3), best.view(-1)
        for i in range(0, ray.shape[0], _PAIR_CHUNK):
            ri, si = ray[i : i + _PAIR_CHUNK], s[i : i + _PAIR_CHUNK]
            q = quat[si]
            lo = quat_apply_inverse(q, flat_o[ri] - centre[si])  # in the field's frame
            dist = _hfields(lo, quat_apply_inverse(q, flat_v[ri]), t["frame"], si)
            flat_best.scatter_reduce_(0, ri, dist, "amin")


def _bundle(o: torch.Tensor, v: torch.Tensor) -> tuple | None:
    """Where each env's rays are parallel (a height scanner's): ``(N, 3)`` their origins' mean and
    direction, and ``(N,)`` how far from the mean the origins lie (a bit more); else None."""
    if o.shape[1] < 2 or not bool((v == v[:, :1]).all()):
        return None
    mean = o.mean(1)
    off = o - mean[:, None]
    return mean, v[:, 0], torch.sqrt(_dot(off, off)).amax(1) * (1 + 1e-9) + 1e-9


def _near(o: torch.Tensor, v: torch.Tensor, bundle: tuple | None, met: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ray, shape)`` pairs, rays flat over ``(N, R)``, whose half-line may meet the shape, by
    ``met(origins (K, 3), directions (K, 3), env (K,), grow (K,)) -> (K, S)``: whether each half-line
    meets each shape's bound grown by ``grow``. For parallel rays (:func:`_bundle`) one test per env:
    its rays' origins lie within ``rho`` of their mean, so a ray meets a bound only where the mean's
    half-line meets it grown by ``rho``."""
    n, r = o.shape[:2]
    if bundle is not None:
        mean, v0, rho = bundle
        env, s = torch.nonzero(met(mean, v0, torch.arange(n, device=o.device), rho), as_tuple=True)
        return (env[:, None] * r + torch.arange(r, device=o.device)).reshape(-1), s.repeat_interleave(r)
    of, vf = o.reshape(-1, 3), v.reshape(-1, 3)
    rays, shapes = [], []
    for i in range(0, n * r, _PAIR_CHUNK):
        idx = torch.arange(i, min(i + _PAIR_CHUNK, n * r), device=o.device)
        ri, si = torch.nonzero(met(of[idx], vf[idx], idx // r, torch.zeros_like(idx, dtype=o.dtype)), as_tuple=True)
        rays.append(ri + i)
        shapes.append(si)
    return torch.cat(rays), torch.cat(shapes)


def _spheres_met(o: torch.Tensor, v: torch.Tensor, centre: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """``(K, S)``: whether half-line ``o + t v`` (``t >= 0``; ``(K, 3)``) meets sphere ``(centre, radius)``
    (``(K, S, 3)``, ``(K, S)``): its origin is inside, or it heads towards the centre and its line
    comes within ``radius``."""
    rel = o[:, None] - centre
    b = _dot(rel, v[:, None])
    c = _dot(rel, rel) - radius * radius
    return (c <= 0) | ((b <= 0) & (b * b >= c))


def _boxes_met(o: torch.Tensor, v: torch.Tensor, box: torch.Tensor, grow: torch.Tensor) -> torch.Tensor:
    """``(K, S)``: whether half-line ``o + t v`` (``t >= 0``; ``(K, 3)``) meets axis-aligned box
    ``box`` (``(S, 2, 3)``: low and high corners, each grown by ``grow`` ``(K,)``)."""
    g = grow[:, None, None]
    lo, hi = box[None, :, 0] - g, box[None, :, 1] + g  # (K, S, 3)
    o, v = o[:, None], v[:, None]
    par = v.abs() < _PARALLEL
    inv = 1.0 / torch.where(par, torch.ones_like(v), v)
    ta, tb = (lo - o) * inv, (hi - o) * inv
    inf = torch.full_like(ta, torch.inf)
    t0 = torch.where(par, -inf, torch.minimum(ta, tb)).amax(-1)
    t1 = torch.where(par, inf, torch.maximum(ta, tb)).amin(-1)
    return (t0 <= t1) & (t1 >= 0) & ~(par & ((o < lo) | (o > hi))).any(-1)


def _world_box(e: dict) -> np.ndarray:
    """``(2, 3)`` low and high corners of an axis-aligned box holding static shape ``e`` in the
    world, widened by more than rounding."""
    pose = e["pose"]
    if e["kind"] in ("hfield", "mesh", "box"):
        if e["kind"] == "box":
            h = e["size"]
            pts = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * h
        else:
            pts = e["grid"].reshape(-1, 3) if e["kind"] == "hfield" else e["triangles"].reshape(-1, 3)
        world = quat_apply(np.broadcast_to(pose[3:], (len(pts), 4)), pts) + pose[:3]
        lo, hi = world.min(0), world.max(0)
    else:
        lo, hi = pose[:3] - e["radius"], pose[:3] + e["radius"]
    pad = 1e-9 * (1.0 + np.abs(np.concatenate([lo, hi])).max())
    return np.stack([lo - pad, hi + pad])


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
#: ray-cell pairs handled at once by :func:`_hfields`
_CELL_CHUNK = 1 << 18
#: ray-field pairs :meth:`RayCaster._cast_group` tests (bounding spheres, then cells) at once
_PAIR_CHUNK = 1 << 20


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Dot product over the last axis, summed in one fixed order (the same bits for any layout)."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def _triangle(o: torch.Tensor, v: torch.Tensor, a: torch.Tensor, e1: torch.Tensor, e2: torch.Tensor) -> torch.Tensor:
    """Rays ``o + t v`` against triangles ``(a, a + e1, a + e2)``, two-sided (Moller-Trumbore), all
    broadcast together: ``t >= 0`` of the hit, inf for a miss."""
    vb, e2b = torch.broadcast_tensors(v, e2)
    p = torch.cross(vb, e2b, dim=-1)
    det = _dot(e1, p)
    ok = det.abs() > _PARALLEL
    inv = 1.0 / torch.where(ok, det, torch.ones_like(det))
    s = o - a
    u = _dot(s, p) * inv
    sb, e1b = torch.broadcast_tensors(s, e1)
    q = torch.cross(sb, e1b, dim=-1)
    w = _dot(v, q) * inv
    hit = _dot(e2, q) * inv
    return _valid(hit, ok & (u >= 0) & (w >= 0) & (u + w <= 1))


def _mesh(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    """Triangles, two-sided, every ray against every triangle, in chunks of rays x triangles."""
    tri = t["triangles"]  # (T, 3, 3)
    a, e1, e2 = tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    out = torch.full((o.shape[0],), torch.inf, dtype=o.dtype, device=o.device)
    step = max(1, _MESH_CHUNK // max(1, tri.shape[0]))
    for i in range(0, o.shape[0], step):
        out[i : i + step] = _triangle(o[i : i + step, None], v[i : i + step, None], a, e1, e2).amin(-1)
    return out


#: cells (of their size) by which :func:`_hfield` widens each ray's path: a triangle that rounding
#: lets a ray hit just outside its cell is still tested
_CELL_PAD = 1e-6


def _spans(lo: torch.Tensor, hi: torch.Tensor, last: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer cells ``floor(lo - pad) .. floor(hi + pad)`` clamped to ``0 .. last``: (first, count)."""
    first = torch.floor(lo - _CELL_PAD).clamp(0, last).long()
    end = torch.floor(hi + _CELL_PAD).clamp(0, last).long()
    return first, end - first + 1


def _expand(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For items with ``counts`` children each: every child's item and its rank among its siblings."""
    item = torch.repeat_interleave(torch.arange(counts.shape[0], device=counts.device), counts)
    start = torch.cumsum(counts, 0) - counts
    return item, torch.arange(item.shape[0], device=counts.device) - start[item]


def grid_frame(grid: torch.Tensor) -> dict:
    """What :func:`_hfields` reads of height-field grids ``(S, nrow, ncol, 3)`` (vertices, row-major):
    the grids, their first vertex's x and y, cell sizes and bounding boxes (widened by the pad)."""
    nrow, ncol = grid.shape[1], grid.shape[2]
    x0, y0 = grid[:, 0, 0, 0], grid[:, 0, 0, 1]
    dx, dy = (grid[:, 0, -1, 0] - x0) / (ncol - 1), (grid[:, -1, 0, 1] - y0) / (nrow - 1)
    z = grid[..., 2].reshape(grid.shape[0], -1)
    pad = (_CELL_PAD * torch.maximum(dx, dy))[:, None]
    return {
        "grid": grid,
        "start": torch.stack([x0, y0], -1),
        "cell": torch.stack([dx, dy], -1),
        "lo": torch.stack([x0, y0, z.amin(-1)], -1) - pad,
        "hi": torch.stack([grid[:, 0, -1, 0], grid[:, -1, 0, 1], z.amax(-1)], -1) + pad,
    }


def _hfield(o: torch.Tensor, v: torch.Tensor, t: dict) -> torch.Tensor:
    """One height field (``t["grid"]``: ``(nrow, ncol, 3)`` vertices): :func:`_hfields`."""
    if "frame" not in t:
        t["frame"] = grid_frame(t["grid"][None])
    return _hfields(o, v, t["frame"], torch.zeros(o.shape[0], dtype=torch.long, device=o.device))


def _hfields(o: torch.Tensor, v: torch.Tensor, f: dict, which: torch.Tensor) -> torch.Tensor:
    """Rays against height fields, ray ``k`` against field ``which[k]`` of ``f`` (:func:`grid_frame`)
    in its frame: the triangles of :func:`.plan.hfield_mesh` (cell ``(r, c)`` split along its
    ``(r, c)``-``(r+1, c+1)`` diagonal), two-sided, with the same tests as :func:`_mesh`, but only
    for the cells each ray's path over the grid crosses (widened by :data:`_CELL_PAD`) within the
    grid's bounding box: the same distances, bit for bit.

    The path is cut column by column: in each grid column the ray's segment spans a range of rows,
    so a vertical ray tests one cell (two near a cell's edge) and a slanted one about
    ``|d col| + |d row| + 1``.
    """
    g = f["grid"]
    nrow, ncol = g.shape[1], g.shape[2]
    out = torch.full((o.shape[0],), torch.inf, dtype=o.dtype, device=o.device)
    lo, hi = f["lo"][which], f["hi"][which]
    # the part [t0, t1] (t >= 0) of each ray within the bounding box
    par = v.abs() < _PARALLEL
    inv = 1.0 / torch.where(par, torch.ones_like(v), v)
    ta, tb = (lo - o) * inv, (hi - o) * inv
    inf = torch.full_like(ta, torch.inf)
    t0 = torch.where(par, -inf, torch.minimum(ta, tb)).amax(-1).clamp(min=0)
    t1 = torch.where(par, inf, torch.maximum(ta, tb)).amin(-1)
    ok = (t0 <= t1) & ~(par & ((o < lo) | (o > hi))).any(-1)
    rays = torch.nonzero(ok).squeeze(-1)
    if not rays.numel():
        return out
    o, v, t0, t1, fixed, which = o[rays], v[rays], t0[rays], t1[rays], par[rays, 0], which[rays]
    x0, y0 = f["start"][which].unbind(-1)
    dx, dy = f["cell"][which].unbind(-1)
    # the grid columns each ray's segment spans (in cells: X = (x - x0) / dx)
    xa, xb = (o[:, 0] + t0 * v[:, 0] - x0) / dx, (o[:, 0] + t1 * v[:, 0] - x0) / dx
    c_first, c_count = _spans(torch.minimum(xa, xb), torch.maximum(xa, xb), ncol - 2)
    k, rank = _expand(c_count)  # one item per (ray, column)
    col = c_first[k] + rank
    # the segment's part within each column (widened by the pad): the rows it spans
    vx = torch.where(fixed[k], torch.ones_like(t0[k]), v[k, 0])
    left = x0[k] + (col.to(o.dtype) - _CELL_PAD) * dx[k]
    right = x0[k] + (col.to(o.dtype) + (1 + _CELL_PAD)) * dx[k]
    ca, cb = (left - o[k, 0]) / vx, (right - o[k, 0]) / vx
    sa = torch.where(fixed[k], t0[k], torch.maximum(torch.minimum(ca, cb), t0[k]))
    sb = torch.where(fixed[k], t1[k], torch.minimum(torch.maximum(ca, cb), t1[k]))
    ya, yb = (o[k, 1] + sa * v[k, 1] - y0[k]) / dy[k], (o[k, 1] + sb * v[k, 1] - y0[k]) / dy[k]
    r_first, r_count = _spans(torch.minimum(ya, yb), torch.maximum(ya, yb), nrow - 2)
    r_count = torch.where(sa <= sb, r_count, torch.zeros_like(r_count))  # only the pad's sliver: none
    j, rank = _expand(r_count)  # one item per (ray, cell)
    ray, row, col = k[j], r_first[j] + rank, col[j]
    best = torch.full((rays.shape[0],), torch.inf, dtype=o.dtype, device=o.device)
    for i in range(0, ray.shape[0], _CELL_CHUNK):
        ri, r, c = ray[i : i + _CELL_CHUNK], row[i : i + _CELL_CHUNK], col[i : i + _CELL_CHUNK]
        s = which[ri]
        a, b, d, e = g[s, r, c], g[s, r, c + 1], g[s, r + 1, c + 1], g[s, r + 1, c]  # corners, counter-clockwise
        oi, vi = o[ri], v[ri]
        hit = torch.minimum(_triangle(oi, vi, a, b - a, d - a), _triangle(oi, vi, a, d - a, e - a))
        best.scatter_reduce_(0, ri, hit, "amin")
    out[rays] = best
    return out


_KIND = {
    "plane": _plane,
    "sphere": _sphere,
    "box": _box,
    "convex": _convex,
    "capsule": _capsule,
    "cylinder": _cylinder,
    "mesh": _mesh,
    "hfield": _hfield,
}
