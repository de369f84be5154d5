"""Sensors computed from the state, with MuJoCo's meaning, for engines that have no MuJoCo sensors.

A backend whose engine does not evaluate MuJoCo's sensors serves the
frame-based types (``framepos``, ``framequat``, ``framelinvel``,
``frameangvel``, ``gyro``, ``velocimeter``) and the joint types
(``jointpos``, ``jointvel``) from the contract's own getters: the pose and
velocity of the frame a sensor reads (a body's frame, its inertial frame, a
site or a geom, placed on its body as the compiled model places it), relative
to the sensor's reference frame when it has one. :class:`FrameSensors` holds
where each sensor reads; :meth:`SimBackend._sensor_data` uses it by default,
so a new backend gets the sensors once its body hooks are right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from simbackend.errors import UnsupportedFeatureError
from simbackend.math import cross, quat_apply, quat_apply_inverse, quat_conj, quat_mul

if TYPE_CHECKING:  # pragma: no cover
    from simbackend.contract import SimBackend

from simbackend.models import UNREADABLE, sensor_frames


class FrameSensors:
    """Readings of the core sensor types from a backend's body hooks (see the module docstring)."""

    def __init__(self, backend: "SimBackend"):
        info = backend.info
        if info.compiled is None:
            self.frames: dict[int, tuple] = {}
        else:
            self.frames = sensor_frames(info.compiled)

    def read(self, backend: "SimBackend", sensor_id: int) -> torch.Tensor:
        """``(N, dim)`` reading of sensor ``sensor_id`` (a core type), float32 on the backend's device."""
        info = backend.info
        stype = info.sensor_type[sensor_id]
        ob, ol, rb, rl, cutoff, objid = self.frames[sensor_id]
        if stype in ("jointpos", "jointvel"):
            q = backend.get_qpos() if stype == "jointpos" else backend.get_qvel()
            adr = int((info.joint_qposadr if stype == "jointpos" else info.joint_dofadr)[objid])
            val = q[:, adr:adr + 1]
        else:
            if ob == UNREADABLE or rb == UNREADABLE:
                raise UnsupportedFeatureError(backend.name, "sensor object type",
                                              f"sensor {info.sensor_names[sensor_id]!r} reads an object other than"
                                              " a body, site or geom")
            p, q, v, w = _frame_state(backend, ob, ol)
            if stype == "gyro":
                val = quat_apply_inverse(q, w)
            elif stype == "velocimeter":
                val = quat_apply_inverse(q, v)
            elif rb < 0:
                val = {"framepos": p, "framequat": q, "framelinvel": v, "frameangvel": w}[stype]
            else:
                rp, rq, rv, rw = _frame_state(backend, rb, rl)
                if stype == "framepos":
                    val = quat_apply_inverse(rq, p - rp)
                elif stype == "framequat":
                    val = quat_mul(quat_conj(rq), q)
                elif stype == "framelinvel":
                    val = quat_apply_inverse(rq, v - rv - cross(rw, p - rp))
                else:
                    val = quat_apply_inverse(rq, w - rw)
        if cutoff > 0 and stype != "framequat":
            val = val.clamp(-cutoff, cutoff)
        return backend._out(val)


def _frame_state(backend: "SimBackend", body: int, local: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(pos, quat, velocity of the frame's point, angular velocity) ``(N, ·)``, float64, of a frame
    fixed on ``body`` at ``local`` (pos + wxyz in the body frame), world coordinates."""
    ids = np.array([body], dtype=np.int64)
    dt = torch.float64
    bp = backend._body_pos_w(ids)[:, 0].to(dt)
    bq = backend._body_quat_w(ids)[:, 0].to(dt)
    v0 = backend._body_lin_vel_w(ids)[:, 0].to(dt)
    w = backend._body_ang_vel_w(ids)[:, 0].to(dt)
    loc = torch.as_tensor(local, dtype=dt, device=bp.device)
    offset = quat_apply(bq, loc[:3].expand_as(bp))
    pos = bp + offset
    quat = quat_mul(bq, loc[3:].expand_as(bq))
    return pos, quat, v0 + cross(w, offset), w
