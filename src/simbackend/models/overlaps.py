"""Where a robot's collision geometry overlaps itself at a pose: what its scene file collides, read with MuJoCo.

A URDF link's collision mesh is collided as its convex hull (MuJoCo, and the
engines that build from the same compiled model), and a chassis mesh's hull
often swallows the hips and upper legs. Two findings at one pose (the default
state), both over the robot's bodies only (``base_body`` and its descendants):

* **self-contacts**: contacts MuJoCo finds between two of the robot's bodies
  (every filter of the scene applied: contype/conaffinity, parent and child,
  ``<exclude>``), with their penetration;
* **swallowed origins**: a body whose collision geom (a mesh: its convex hull)
  contains another body's origin, where the two bodies may collide (the same
  filters): the other body's joint sits inside it, so any motion of that joint
  pushes against it.

Engine-neutral callers (the ``robots`` command, the settle check) get plain
names and numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from simbackend.models.mujoco_extra import import_mujoco

__all__ = ["SelfOverlaps", "contact_pairs", "self_overlaps"]

#: radius (m) of the probe sphere put at each body's origin: an origin deeper than this inside a geom counts
PROBE = 1e-4


@dataclass(frozen=True)
class SelfOverlaps:
    """What :func:`self_overlaps` found.

    Attributes:
        contacts: ``((body_a, body_b, penetration m), ...)``, one per pair of the robot's bodies in contact
            (the deepest contact of the pair), deepest first.
        swallowed: ``((body, geom, other_body), ...)``: ``geom`` of ``body`` (a mesh: its convex hull)
            contains ``other_body``'s origin, and the two bodies may collide.
    """

    contacts: tuple[tuple[str, str, float], ...]
    swallowed: tuple[tuple[str, str, str], ...]


def self_overlaps(path: str, qpos: Any, base_body: str) -> SelfOverlaps:
    """The robot's overlaps with itself in scene file ``path`` at state ``qpos`` ``(nq,)``, the robot being
    ``base_body`` and its descendants."""
    mujoco = import_mujoco()
    spec = mujoco.MjSpec.from_file(str(path))
    plain = spec.compile()
    base = mujoco.mj_name2id(plain, mujoco.mjtObj.mjOBJ_BODY, base_body)
    parent = np.asarray(plain.body_parentid)
    robot = [b for b in range(plain.nbody) if _descends(b, base, parent)]
    names = [mujoco.mj_id2name(plain, mujoco.mjtObj.mjOBJ_BODY, b) for b in range(plain.nbody)]
    for b in robot:  # a probe sphere at each body's origin, colliding with nothing
        spec.body(names[b]).add_geom(
            name=f"__origin_probe_{b}",
            type=mujoco.mjtGeom.mjGEOM_SPHERE,
            size=[PROBE, 0.0, 0.0],
            contype=0,
            conaffinity=0,
            mass=0.0,
        )
    m = spec.compile()
    d = mujoco.MjData(m)
    d.qpos[:] = np.asarray(qpos, np.float64)
    mujoco.mj_forward(m, d)
    inside = set(robot)
    deepest: dict[tuple[int, int], float] = {}
    for c in d.contact[: d.ncon]:
        b1, b2 = int(m.geom_bodyid[c.geom1]), int(m.geom_bodyid[c.geom2])
        if b1 in inside and b2 in inside:
            key = (min(b1, b2), max(b1, b2))
            deepest[key] = max(deepest.get(key, 0.0), -float(c.dist))
    contacts = tuple((names[a], names[b], depth) for (a, b), depth in sorted(deepest.items(), key=lambda kv: -kv[1]))
    probe = {int(m.geom_bodyid[g]): g for g in range(m.ngeom) if (m.geom(g).name or "").startswith("__origin_probe_")}
    probes = set(probe.values())
    geoms = {
        b: [
            g
            for g in range(m.ngeom)
            if m.geom_bodyid[g] == b and g not in probes and (m.geom_contype[g] or m.geom_conaffinity[g])
        ]
        for b in robot
    }
    swallowed = []
    fromto = np.zeros(6)
    for a in robot:
        for b in robot:
            if a == b or not _may_collide(mujoco, m, a, b, geoms):
                continue
            for g in geoms[a]:
                if mujoco.mj_geomDistance(m, d, g, probe[b], 1.0, fromto) < 0:
                    gname = m.geom(g).name or f"geom {g}"
                    swallowed.append((names[a], gname, names[b]))
                    break
    return SelfOverlaps(contacts, tuple(swallowed))


def _descends(b: int, base: int, parent: np.ndarray) -> bool:
    while b > 0:
        if b == base:
            return True
        b = int(parent[b])
    return False


def _may_collide(mujoco: Any, m: Any, a: int, b: int, geoms: dict[int, list[int]]) -> bool:
    """Whether MuJoCo's filters let bodies ``a`` and ``b`` collide: not welded together, not parent and child
    (through welds, unless the parent filter is off), not an ``<exclude>`` pair, and a geom of each whose
    contype/conaffinity bits meet."""
    weld = m.body_weldid
    wa, wb = int(weld[a]), int(weld[b])
    if wa == wb:
        return False
    filterparent = not (m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_FILTERPARENT))
    pa, pb = int(weld[m.body_parentid[wa]]), int(weld[m.body_parentid[wb]])
    if filterparent and wa and wb and (wa == pb or wb == pa):
        return False
    signature = (min(a, b) << 16) + max(a, b)
    if any(int(s) == signature for s in m.exclude_signature[: m.nexclude]):
        return False
    return any(
        (m.geom_contype[ga] & m.geom_conaffinity[gb]) or (m.geom_contype[gb] & m.geom_conaffinity[ga])
        for ga in geoms[a]
        for gb in geoms[b]
    )


def contact_pairs(contacts: tuple[tuple[str, str, float], ...]) -> str:
    """:attr:`SelfOverlaps.contacts` as text: ``chassis - FL_upper_leg 6.0 cm deep, ...``."""
    return ", ".join(f"{a} - {b} {depth * 100:.1f} cm deep" for a, b, depth in contacts)
