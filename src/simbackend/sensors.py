"""Sensors computed from the state, with MuJoCo's meaning, for engines that have no MuJoCo sensors.

A backend whose engine does not evaluate MuJoCo's sensors serves the
frame-based types (``framepos``, ``framequat``, ``framelinvel``,
``frameangvel``, ``gyro``, ``velocimeter``) and the joint types
(``jointpos``, ``jointvel``) from the contract's own getters: the pose and
velocity of the frame a sensor reads (a body's frame, its inertial frame, a
site or a geom, placed on its body as the compiled model places it), relative
to the sensor's reference frame when it has one. :class:`FrameSensors` holds
where each sensor reads; :meth:`simbackend.engine.Engine.sensor` uses it by
default, so a new engine gets the sensors once its frame kinematics are right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from simbackend.errors import UnsupportedFeatureError
from simbackend.math import cross, quat_apply, quat_apply_inverse, quat_conj, quat_mul
from simbackend.model_info import ModelInfo
from simbackend.models import UNREADABLE, sensor_frames

if TYPE_CHECKING:  # pragma: no cover
    from simbackend.engine import Engine


class FrameSensors:
    """Readings of the core sensor types from an engine's frame kinematics (see the module docstring)."""

    def __init__(self, info: ModelInfo):
        if info.compiled is None:
            self.frames: dict[int, tuple] = {}
        else:
            self.frames = sensor_frames(info.compiled)

    def read(self, engine: Engine, sensor_id: int) -> torch.Tensor:
        """``(N, dim)`` float64 reading of sensor ``sensor_id`` (a core type), on the engine's device."""
        info = engine.info
        stype = info.sensor_type[sensor_id]
        ob, ol, rb, rl, cutoff, objid = self.frames[sensor_id]
        if stype in ("jointpos", "jointvel"):
            q = engine.read_state()[0 if stype == "jointpos" else 1]
            adr = int((info.joint_qposadr if stype == "jointpos" else info.joint_dofadr)[objid])
            val = torch.as_tensor(q[:, adr : adr + 1], device=engine.device).to(torch.float64)
        else:
            if ob == UNREADABLE or rb == UNREADABLE:
                raise UnsupportedFeatureError(
                    engine.name,
                    "sensor object type",
                    f"sensor {info.sensor_names[sensor_id]!r} reads an object other than a body, site or geom",
                )
            p, q, v, w = _frame_state(engine, ob, ol)
            if stype == "gyro":
                val = quat_apply_inverse(q, w)
            elif stype == "velocimeter":
                val = quat_apply_inverse(q, v)
            elif rb < 0:
                val = {"framepos": p, "framequat": q, "framelinvel": v, "frameangvel": w}[stype]
            else:
                rp, rq, rv, rw = _frame_state(engine, rb, rl)
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
        return val


def _frame_state(engine: Engine, body: int, local: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(pos, quat, velocity of the frame's point, angular velocity) ``(N, ·)``, float64, of a frame
    fixed on ``body`` at ``local`` (pos + wxyz in the body frame), world coordinates."""
    ids = np.array([body], dtype=np.int64)
    dt, dev = torch.float64, engine.device
    pose, vel = engine.body_pose(ids), engine.body_velocity(ids)
    bp, bq = (torch.as_tensor(a, device=dev)[:, 0].to(dt) for a in pose)
    v0, w = (torch.as_tensor(a, device=dev)[:, 0].to(dt) for a in vel)
    loc = torch.as_tensor(local, dtype=dt, device=bp.device)
    offset = quat_apply(bq, loc[:3].expand_as(bp))
    pos = bp + offset
    quat = quat_mul(bq, loc[3:].expand_as(bq))
    return pos, quat, v0 + cross(w, offset), w
