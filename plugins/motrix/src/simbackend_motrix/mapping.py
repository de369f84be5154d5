"""Motrix's compiled model mapped onto the contract's :class:`~simbackend.model_info.ModelInfo`.

MuJoCo compiles the model and :func:`simbackend.models.export_mjcf` writes
the same model as one MJCF file, with every element named as ``ModelInfo``
names it; Motrix's own MJCF compiler loads that file. Everything is then
matched **by name**, and each match is checked:

* bodies -> Motrix links (the world body has no link; Motrix's "bodies" are
  kinematic trees, not MuJoCo's bodies);
* free joints -> Motrix floating bases (a floating base is not a Motrix
  joint), hinge/slide/ball joints -> Motrix joints, with their position and
  velocity widths;
* actuators -> Motrix actuators with the same joint target;
* sites -> Motrix sites.

The state is one permutation away: ``qpos = dof_pos[:, qpos_src]`` and
``qvel = dof_vel[:, qvel_src]``. Motrix stores quaternions **xyzw**, so the
permutation also turns each free/ball quaternion into wxyz; its floating-base
velocities are already MuJoCo's (linear in the world frame, angular in the
body frame), checked at load time on a rotated state.

Anything that cannot be matched is rejected at load time, naming the element.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simbackend.errors import ModelLoadError
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_HINGE, JOINT_SLIDE, ModelInfo

#: wxyz columns of a quaternion read from Motrix's xyzw columns
WXYZ_FROM_XYZW = np.array([3, 0, 1, 2])


class Mapping:
    """Index tables between Motrix's arrays and the contract's (see the module docstring).

    Attributes:
        body_link: ``(nbody,)`` Motrix link index of each body, -1 for the world body.
        qpos_src: ``(nq,)`` column of Motrix's ``dof_pos`` for each qpos column.
        qvel_src: ``(nv,)`` column of Motrix's ``dof_vel`` for each qvel column.
        qvel_of_dof: ``(num_dof_vel,)`` qvel column of each Motrix ``dof_vel`` column.
        actuator_src: ``(nu,)`` Motrix actuator index of each actuator.
        site_index: ``(nsite,)`` Motrix site index of each site.
        joint_index: ``(njnt,)`` Motrix joint index (-1 for free joints).
        free_base: ``{joint id: Motrix floating base index}``.
    """

    def __init__(self, info: ModelInfo, mm: Any, label: str):
        self.info, self.label = info, label
        self.body_link = np.full(info.nbody, -1, np.int64)
        for b in range(1, info.nbody):
            self.body_link[b] = self._index(mm.get_link_index(info.body_names[b]), "body", info.body_names[b])
        self._joints(info, mm)
        self._actuators(info, mm)
        self.site_index = np.array(
            [self._index(mm.get_site_index(n), "site", n) for n in info.site_names], dtype=np.int64
        )
        if mm.num_dof_pos != info.nq or mm.num_dof_vel != info.nv:
            raise ModelLoadError(
                f"{label}: Motrix holds {mm.num_dof_pos} positions and {mm.num_dof_vel} velocities"
                f" where the compiled model has nq={info.nq}, nv={info.nv}"
            )
        self.qvel_of_dof = np.empty(info.nv, np.int64)
        self.qvel_of_dof[self.qvel_src] = np.arange(info.nv)

    def _index(self, found: Any, kind: str, name: str) -> int:
        if found is None:
            raise ModelLoadError(
                f"{self.label}: {kind} {name!r} is not in the model Motrix compiled"
                " (Motrix's MJCF compiler dropped or renamed it)"
            )
        return int(found)

    def _joints(self, info: ModelInfo, mm: Any) -> None:
        self.qpos_src = np.full(info.nq, -1, np.int64)
        self.qvel_src = np.full(info.nv, -1, np.int64)
        self.joint_index = np.full(len(info.joint_names), -1, np.int64)
        self.free_base: dict[int, int] = {}
        bases = {fb.name: fb for fb in mm.floating_bases}
        base_link = {}
        for body in mm.bodies:  # Motrix's kinematic trees: which link each floating base moves
            if body.floatingbase is not None:
                base_link[body.floatingbase.index] = body.base_link.index
        for j, name in enumerate(info.joint_names):
            t = int(info.joint_type[j])
            qa, va = int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
            body = int(info.joint_body[j])
            if t == JOINT_FREE:
                fb = bases.get(name)
                if fb is None or base_link.get(fb.index) != self.body_link[body]:
                    raise ModelLoadError(
                        f"{self.label}: free joint {name!r} is not a Motrix floating base of body"
                        f" {info.body_names[body]!r}"
                    )
                self.free_base[j] = fb.index
                p, v = list(fb.dof_pos_indices), list(fb.dof_vel_indices)
                self.qpos_src[qa : qa + 7] = [p[0], p[1], p[2]] + [p[3 + k] for k in WXYZ_FROM_XYZW]
                self.qvel_src[va : va + 6] = v
                continue
            k = mm.get_joint_index(name)
            if k is None:
                raise ModelLoadError(f"{self.label}: joint {name!r} is not in the model Motrix compiled")
            jt = mm.joints[int(k)]
            self.joint_index[j] = int(k)
            npos, nvel = (4, 3) if t == JOINT_BALL else (1, 1)
            if t not in (JOINT_BALL, JOINT_HINGE, JOINT_SLIDE) or jt.num_dof_pos != npos or jt.num_dof_vel != nvel:
                raise ModelLoadError(
                    f"{self.label}: joint {name!r} has {jt.num_dof_pos} positions and"
                    f" {jt.num_dof_vel} velocities in Motrix, {npos} and {nvel} in MuJoCo"
                )
            p0, v0 = int(jt.dof_pos_index), int(jt.dof_vel_index)
            if t == JOINT_BALL:
                self.qpos_src[qa : qa + 4] = p0 + WXYZ_FROM_XYZW
            else:
                self.qpos_src[qa] = p0
            self.qvel_src[va : va + nvel] = np.arange(v0, v0 + nvel)
        if (np.sort(self.qpos_src) != np.arange(info.nq)).any() or (np.sort(self.qvel_src) != np.arange(info.nv)).any():
            raise ModelLoadError(
                f"{self.label}: Motrix's positions and velocities do not map one to one onto"
                " the compiled model's qpos and qvel"
            )

    def _actuators(self, info: ModelInfo, mm: Any) -> None:
        self.actuator_src = np.zeros(info.nu, np.int64)
        for a, name in enumerate(info.actuator_names):
            k = mm.get_actuator_index(name)
            if k is None:
                raise ModelLoadError(f"{self.label}: actuator {name!r} is not in the model Motrix compiled")
            act = mm.actuators[int(k)]
            j = int(info.actuator_joint[a])
            if j < 0:
                raise ModelLoadError(
                    f"{self.label}: actuator {name!r} drives no joint; the Motrix backend maps joint transmissions only"
                )
            if act.target_name != info.joint_names[j]:
                raise ModelLoadError(
                    f"{self.label}: actuator {name!r} drives {act.target_name!r} in Motrix,"
                    f" {info.joint_names[j]!r} in MuJoCo"
                )
            self.actuator_src[a] = int(k)
