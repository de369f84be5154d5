"""Names to ids, and joints to their columns: the tables every backend shares through ``ModelInfo``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simbackend.errors import ArgumentTypeError, IndexRangeError, UnknownNameError
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_TYPE_NAMES, ModelInfo

Names = str | Sequence[str]

#: the kinds of named elements, and the ModelInfo field listing each kind's names in id order
KINDS = {
    "body": "body_names",
    "joint": "joint_names",
    "site": "site_names",
    "actuator": "actuator_names",
    "sensor": "sensor_names",
    "geom": "geom_names",
    "keyframe": "keyframe_names",
}


class NameTable:
    """Name -> id for every kind of element, and the qpos/qvel/dof columns of joints."""

    def __init__(self, info: ModelInfo):
        self.info = info
        self.ids = {kind: {n: i for i, n in enumerate(getattr(info, attr))} for kind, attr in KINDS.items()}
        self.dof_column = {int(j): c for c, j in enumerate(info.dof_joints)}

    def resolve(self, kind: str, name: Any) -> int:
        """The id of one ``kind`` element named ``name``; unknown names list the closest known ones."""
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{kind} name must be a string, got {type(name).__name__}")
        table = self.ids[kind]
        if name not in table:
            raise UnknownNameError(kind, name, table)
        return table[name]

    def resolve_many(self, kind: str, names: Any) -> np.ndarray:
        """``(n,)`` int64 ids of ``names`` (a name or a sequence of names), in the order named."""
        if isinstance(names, str):
            names = [names]
        elif names is None or not isinstance(names, (list, tuple)) and not hasattr(names, "__iter__"):
            raise ArgumentTypeError(f"{kind} names: expected a name or a sequence of names, got {type(names).__name__}")
        return np.array([self.resolve(kind, n) for n in names], dtype=np.int64)

    def dof_columns(self, names: Names) -> np.ndarray:
        """Columns of ``get_dof_pos``/``get_dof_vel`` of hinge/slide joints ``names``."""
        cols = []
        for j in self.resolve_many("joint", names):
            if int(j) not in self.dof_column:
                kind = JOINT_TYPE_NAMES[int(self.info.joint_type[j])]
                raise IndexRangeError(
                    f"joint {self.info.joint_names[j]!r} is a {kind} joint; only hinge and slide joints"
                    " have dof columns (get_joint_qpos_indices/get_joint_qvel_indices cover every joint)"
                )
            cols.append(self.dof_column[int(j)])
        return np.array(cols, dtype=np.int64)

    def joint_columns(self, names: Names, velocity: bool) -> np.ndarray:
        """qpos (or, with ``velocity``, qvel) columns of joints ``names``, any type, in the order named."""
        return np.concatenate(
            [joint_columns(self.info, int(j), velocity) for j in self.resolve_many("joint", names)]
            + [np.zeros(0, np.int64)]
        )


def joint_columns(info: ModelInfo, joint: int, velocity: bool) -> np.ndarray:
    """qpos (or qvel) columns of joint id ``joint``: free 7 (6), ball 4 (3), hinge and slide 1."""
    t = int(info.joint_type[joint])
    if velocity:
        width, start = (6 if t == JOINT_FREE else 3 if t == JOINT_BALL else 1), int(info.joint_dofadr[joint])
    else:
        width, start = (7 if t == JOINT_FREE else 4 if t == JOINT_BALL else 1), int(info.joint_qposadr[joint])
    return np.arange(start, start + width, dtype=np.int64)
