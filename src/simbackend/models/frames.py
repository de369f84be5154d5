"""Where each sensor of a compiled model reads: the bodies and local frames of its object and reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from simbackend.models.mujoco_extra import import_mujoco

#: body id :func:`sensor_frames` gives an object a frame sensor cannot read (a camera, say)
UNREADABLE = -2


def sensor_frames(m: Any) -> dict[int, tuple]:
    """Where each sensor of compiled model ``m`` reads: sensor id ->
    ``(obj body, obj local pose (7,), ref body or -1, ref local pose (7,), cutoff, objid)``.

    Local poses are pos + wxyz in the body frame; body :data:`UNREADABLE`
    marks an object type read from no body (cameras and others).
    """
    mujoco = import_mujoco()

    obj = mujoco.mjtObj

    def frame(objtype: int, objid: int) -> tuple[int, np.ndarray]:
        if objtype == int(obj.mjOBJ_XBODY):
            return objid, np.array([0, 0, 0, 1.0, 0, 0, 0])
        if objtype == int(obj.mjOBJ_BODY):
            return objid, np.concatenate([m.body_ipos[objid], m.body_iquat[objid]])
        if objtype == int(obj.mjOBJ_SITE):
            return int(m.site_bodyid[objid]), np.concatenate([m.site_pos[objid], m.site_quat[objid]])
        if objtype == int(obj.mjOBJ_GEOM):
            return int(m.geom_bodyid[objid]), np.concatenate([m.geom_pos[objid], m.geom_quat[objid]])
        return UNREADABLE, np.zeros(7)

    out = {}
    for s in range(m.nsensor):
        ob, ol = frame(int(m.sensor_objtype[s]), int(m.sensor_objid[s]))
        rb, rl = (-1, np.zeros(7)) if m.sensor_refid[s] < 0 else frame(int(m.sensor_reftype[s]), int(m.sensor_refid[s]))
        out[s] = (ob, ol, rb, rl, float(m.sensor_cutoff[s]), int(m.sensor_objid[s]))
    return out
