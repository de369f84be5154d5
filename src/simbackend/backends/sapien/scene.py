"""Turn a :class:`~.plan.Plan` into SAPIEN/PhysX objects in one scene.

PhysX defaults that MuJoCo does not have are set to neutral values here
(documented in the backend's module docstring): no link damping, no joint
friction coefficient, no sleeping, no velocity clamps, restitution 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import sapien
from sapien import physx

from .plan import Articulation, Link, Plan, Shape

#: PhysX clamps body and joint speeds by default (100 rad/s for links); MuJoCo has no such limit
NO_SPEED_LIMIT = 1e16


def pose(p: np.ndarray) -> sapien.Pose:
    return sapien.Pose(np.asarray(p[:3], np.float32), np.asarray(p[3:], np.float32))


class MaterialCache:
    """One PhysX material per sliding-friction value (static = dynamic, restitution 0), and the
    file of each height field's triangle mesh (:func:`shared_mesh_file`), shared by every scene."""

    def __init__(self) -> None:
        self._cache: dict[float, physx.PhysxMaterial] = {}
        self._mesh_files: dict[int, str | None] = {}

    def get(self, friction: float) -> physx.PhysxMaterial:
        mat = self._cache.get(friction)
        if mat is None:
            mat = self._cache[friction] = physx.PhysxMaterial(friction, friction, 0.0)
        return mat

    def mesh_file(self, s: Shape) -> str | None:
        """The file of triangle-mesh shape ``s`` (written on first use), or None where none can be written."""
        if s.geom not in self._mesh_files or not os.path.isfile(self._mesh_files[s.geom] or ""):
            self._mesh_files[s.geom] = shared_mesh_file(np.asarray(s.vertices), np.asarray(s.triangles))
        return self._mesh_files[s.geom]


def mesh_folder() -> Path:
    """Where the triangle-mesh files are kept: ``sapien-meshes`` beside the composed scenes'
    folder (``$SIMBACKEND_CACHE`` or ``~/.cache/simbackend``)."""
    from simbackend.models.scene import cache_folder

    return cache_folder().parent / "sapien-meshes"


def shared_mesh_file(vertices: np.ndarray, triangles: np.ndarray) -> str | None:
    """A binary glTF file of the mesh, named by its content, written once (None where it cannot be).

    SAPIEN cooks a triangle mesh given as arrays anew for every shape (a terrain of 30 tiles of
    12,800 triangles: about 0.17 s and 10 MiB per CPU scene, and again for every env a reset gives a
    new scene), but cooks one loaded from a file once per process and shares it (its ``MeshManager``,
    keyed by the file's path; kept until the process ends). SAPIEN's loader (assimp) keeps the
    triangles and their vertex order, numbering the vertices in order of first use; the file's name
    also says whether PhysX cooks GPU data, which a mesh cooked for CPU scenes lacks.
    """
    v = np.ascontiguousarray(vertices, np.float32)
    t = np.ascontiguousarray(triangles, np.uint32)
    digest = hashlib.sha256(v.tobytes() + b"|" + t.tobytes()).hexdigest()[:32]
    path = mesh_folder() / f"{digest}{'-gpu' if physx.is_gpu_enabled() else ''}.glb"
    if path.is_file():
        return str(path)
    vb, ib = v.tobytes(), t.tobytes()
    gltf = {
        "asset": {"version": "2.0"},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0}, "indices": 1, "mode": 4}]}],
        "buffers": [{"byteLength": len(vb) + len(ib)}],
        "bufferViews": [
            {"buffer": 0, "byteOffset": 0, "byteLength": len(vb), "target": 34962},
            {"buffer": 0, "byteOffset": len(vb), "byteLength": len(ib), "target": 34963},
        ],
        "accessors": [
            {
                "bufferView": 0,
                "componentType": 5126,  # float32
                "count": len(v),
                "type": "VEC3",
                "min": v.min(0).tolist(),
                "max": v.max(0).tolist(),
            },
            {"bufferView": 1, "componentType": 5125, "count": t.size, "type": "SCALAR"},  # uint32
        ],
    }
    head = json.dumps(gltf, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 4)
    body = vb + ib + b"\0" * (-(len(vb) + len(ib)) % 4)
    data = struct.pack("<III", 0x46546C67, 2, 28 + len(head) + len(body))  # "glTF", version 2, length
    data += struct.pack("<II", len(head), 0x4E4F534A) + head + struct.pack("<II", len(body), 0x004E4942) + body
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # whole or absent, for processes building the same mesh at once
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return None
    return str(path)


def _collision_shape(s: Shape, materials: MaterialCache) -> physx.PhysxCollisionShape:
    mat = materials.get(s.friction)
    if s.kind == "plane":
        shape = physx.PhysxCollisionShapePlane(mat)
    elif s.kind == "box":
        shape = physx.PhysxCollisionShapeBox(np.asarray(s.size, np.float32), mat)
    elif s.kind == "sphere":
        shape = physx.PhysxCollisionShapeSphere(float(s.size[0]), mat)
    elif s.kind == "capsule":
        shape = physx.PhysxCollisionShapeCapsule(float(s.size[0]), float(s.size[1]), mat)
    elif s.kind == "cylinder":
        shape = physx.PhysxCollisionShapeCylinder(float(s.size[0]), float(s.size[1]), mat)
    elif s.kind == "mesh":  # a height field's surface, on the static actor: cooked once, shared by every scene
        path = materials.mesh_file(s)
        if path is not None:
            shape = physx.PhysxCollisionShapeTriangleMesh(path, np.ones(3, np.float32), mat)
        else:  # no writable cache folder: cooked for this shape alone
            shape = physx.PhysxCollisionShapeTriangleMesh(
                np.asarray(s.vertices, np.float32), np.asarray(s.triangles, np.uint32), np.ones(3, np.float32), mat
            )
    else:  # convex hull of compiled vertices
        shape = physx.PhysxCollisionShapeConvexMesh(np.asarray(s.vertices, np.float32), np.ones(3, np.float32), mat)
    shape.local_pose = pose(s.pose)
    shape.set_collision_groups(list(s.groups))
    return shape


def _link(lk: Link, parent: physx.PhysxArticulationLinkComponent | None, materials: MaterialCache):
    c = physx.PhysxArticulationLinkComponent(parent)
    for s in lk.shapes:
        c.attach(_collision_shape(s, materials))
    c.mass = lk.mass
    c.cmass_local_pose = pose(lk.com)
    c.inertia = np.asarray(lk.inertia, np.float32)
    c.linear_damping = 0.0
    c.angular_damping = 0.0
    c.max_linear_velocity = NO_SPEED_LIMIT
    c.max_angular_velocity = NO_SPEED_LIMIT
    c.disable_gravity = False
    c.name = lk.name
    j = c.joint
    j.name = lk.name
    j.type = lk.jtype
    if parent is not None:
        j.pose_in_parent = pose(lk.pose_in_parent)
        j.pose_in_child = pose(lk.pose_in_child)
    if lk.jtype in ("revolute", "revolute_unwrapped", "prismatic"):
        j.limit = np.asarray(lk.limit, np.float32).reshape(1, 2)
        j.friction = 0.0
        j.armature = np.array([lk.armature], np.float32)
        j.max_velocity = NO_SPEED_LIMIT
        j.set_drive_properties(0.0, 0.0, float(np.finfo(np.float32).max), "force")
    return c


def build_articulation(art: Articulation, scene: sapien.Scene, materials: MaterialCache, place: bool = True):
    """Build one articulation; return it and its link components in plan order (PhysX renumbers links)."""
    comps: list[physx.PhysxArticulationLinkComponent] = []
    entities = []
    for lk in art.links:
        c = _link(lk, comps[lk.parent] if lk.parent >= 0 else None, materials)
        e = sapien.Entity()
        e.name = lk.name
        e.add_component(c)
        comps.append(c)
        entities.append(e)
    entities[0].pose = pose(art.root_pose)
    for e in entities:
        scene.add_entity(e)
    a = comps[0].articulation
    a.name = art.name
    if place:  # CPU: entity poses of non-root links are not propagated on their own; place every link now
        a.set_root_pose(pose(art.root_pose))
        if a.dof:
            a.set_qpos(np.zeros(a.dof, np.float32))
    a.set_sleep_threshold(0.0)
    return a, comps


def build_scene(
    plan: Plan, scene: sapien.Scene, materials: MaterialCache, solver_iterations: tuple[int, int], place: bool = True
):
    """Add the plan's articulations and static shapes to ``scene``; return (articulations, link components).

    ``place``: set every link's pose from the zero configuration now (CPU); the GPU
    path instead writes the initial state through its buffers after ``gpu_init``.
    """
    arts, links = [], []
    for art in plan.articulations:
        a, comps = build_articulation(art, scene, materials, place)
        a.set_solver_position_iterations(solver_iterations[0])
        a.set_solver_velocity_iterations(solver_iterations[1])
        arts.append(a)
        links.append(comps)
    if plan.static_shapes:
        st = physx.PhysxRigidStaticComponent()
        for s in plan.static_shapes:
            st.attach(_collision_shape(s, materials))
        e = sapien.Entity()
        e.name = "world"
        e.add_component(st)
        scene.add_entity(e)
    return arts, links
