"""An engine-neutral, named state: what moves between engines and into users' own tools.

:class:`NamedState` holds, for ``n`` envs, every body's pose and velocities
by name, every joint's position and velocity by name, every actuator's
control by name, the time and the per-env model parameters (domain
randomization). It is batched: each quantity is one tensor with the envs on
the first axis (``(n, ...)``), with :meth:`NamedState.env` for a per-env
nested view. Any backend exports one (``SimBackend.get_named_state``) and
any backend built from the same model imports one
(``SimBackend.set_named_state``), matching by names, not by ids.

Conventions are the contract's: world frame, quaternions wxyz, body linear
velocity of the body frame's origin, joint coordinates in MuJoCo's layout per
joint (a free joint's position is ``pos(3) + quat(4)``, its velocity
``linear world(3) + angular body-local(3)``; a ball joint ``quat(4)`` /
``angular local(3)``; hinge and slide one value each).

Where it differs from MetaSim's per-env dictionaries (one of the reference
designs): quantities are batched tensors, not a list of per-env dicts; every
body of the model is listed (not only "objects" and "robots"); velocities are
those of the body frame origin (the contract's), and the per-env model
parameters travel with the state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from simbackend.errors import ArgumentTypeError, InputShapeError, InvalidArgumentError

#: the body quantities of a named state: name -> width
BODY_FIELDS = {"pos": 3, "quat": 4, "lin_vel": 3, "ang_vel": 3}


def _tensor(x: Any, argument: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (np.ndarray, list, tuple)):
        a = np.asarray(x)
        if a.dtype == object or a.dtype.kind not in "biuf":
            raise ArgumentTypeError(f"{argument}: expected numbers, got dtype {a.dtype}")
        return torch.as_tensor(a)
    raise ArgumentTypeError(f"{argument}: expected a tensor, an array or a list, got {type(x).__name__}")


@dataclass(frozen=True, eq=False)
class NamedState:
    """The state of ``n`` envs by name (see the module docstring).

    Attributes:
        time: ``(n,)`` float64 simulated time, s.
        body_names: every body but the world, in model order.
        body_pos, body_quat, body_lin_vel, body_ang_vel: ``(n, B, 3/4/3/3)``
            float32, world frame (pose of the body frame; linear velocity of its
            origin; angular velocity).
        joint_pos: joint name -> ``(n, k)`` float32 position columns (k: 7 free,
            4 ball, 1 hinge/slide).
        joint_vel: joint name -> ``(n, k)`` float32 velocity columns (6, 3, 1).
        actuator_ctrl: actuator name -> ``(n,)`` float32 control last applied
            (clamped to its range).
        params: per-env model field -> ``(n, ...)`` float64 values
            (``body_mass``, ``geom_friction``, ...: the fields of
            :data:`simbackend.randomization.FIELDS`); may be empty.
        fingerprint: the fingerprint of the model it was exported from
            (informative: import matches names).
    """

    time: torch.Tensor
    body_names: tuple[str, ...]
    body_pos: torch.Tensor
    body_quat: torch.Tensor
    body_lin_vel: torch.Tensor
    body_ang_vel: torch.Tensor
    joint_pos: Mapping[str, torch.Tensor]
    joint_vel: Mapping[str, torch.Tensor]
    actuator_ctrl: Mapping[str, torch.Tensor]
    params: Mapping[str, torch.Tensor] = field(default_factory=dict)
    fingerprint: str = ""

    def __post_init__(self) -> None:
        n = self.num_envs
        if tuple(self.time.shape) != (n,):
            raise InputShapeError("time", (n,), tuple(self.time.shape))
        nb = len(self.body_names)
        for name, width in BODY_FIELDS.items():
            t = getattr(self, f"body_{name}")
            if tuple(t.shape) != (n, nb, width):
                raise InputShapeError(f"body_{name}", (n, nb, width), tuple(t.shape))
        if set(self.joint_pos) != set(self.joint_vel):
            raise InvalidArgumentError("joint_pos and joint_vel must name the same joints")
        for table, argument in (
            (self.joint_pos, "joint_pos"),
            (self.joint_vel, "joint_vel"),
            (self.actuator_ctrl, "actuator_ctrl"),
            (self.params, "params"),
        ):
            for key, t in table.items():
                if not isinstance(t, torch.Tensor):
                    raise ArgumentTypeError(
                        f"{argument}[{key!r}]: expected a tensor, got {type(t).__name__}"
                        " (NamedState.from_dict reads arrays and lists)"
                    )
                if t.ndim < 1 or t.shape[0] != n:
                    raise InputShapeError(f"{argument}[{key!r}]", f"({n}, ...)", tuple(t.shape))

    @property
    def num_envs(self) -> int:
        """``n``, the envs this state holds."""
        return int(self.time.shape[0])

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(self.joint_pos)

    @property
    def actuator_names(self) -> tuple[str, ...]:
        return tuple(self.actuator_ctrl)

    def env(self, i: int) -> dict:
        """Env row ``i`` as nested plain dicts of tensors: ``{"time", "bodies": {name: {"pos",
        "quat", "lin_vel", "ang_vel"}}, "joints": {name: {"pos", "vel"}}, "actuators": {name:
        ctrl}, "params": {field: values}}``."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -self.num_envs <= i < self.num_envs:
            raise InvalidArgumentError(f"i: expected a row in [0, {self.num_envs}), got {i!r}")
        return {
            "time": self.time[i],
            "bodies": {
                b: {k: getattr(self, f"body_{k}")[i, j] for k in BODY_FIELDS} for j, b in enumerate(self.body_names)
            },
            "joints": {j: {"pos": self.joint_pos[j][i], "vel": self.joint_vel[j][i]} for j in self.joint_pos},
            "actuators": {a: t[i] for a, t in self.actuator_ctrl.items()},
            "params": {k: t[i] for k, t in self.params.items()},
        }

    def _mapped(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> NamedState:
        """The same state with ``fn`` applied to every tensor."""
        return NamedState(
            time=fn(self.time),
            body_names=self.body_names,
            body_pos=fn(self.body_pos),
            body_quat=fn(self.body_quat),
            body_lin_vel=fn(self.body_lin_vel),
            body_ang_vel=fn(self.body_ang_vel),
            joint_pos={k: fn(v) for k, v in self.joint_pos.items()},
            joint_vel={k: fn(v) for k, v in self.joint_vel.items()},
            actuator_ctrl={k: fn(v) for k, v in self.actuator_ctrl.items()},
            params={k: fn(v) for k, v in self.params.items()},
            fingerprint=self.fingerprint,
        )

    def rows(self, index: Any) -> NamedState:
        """The state of some rows (``index``: ids, a slice or a bool mask over the ``n`` rows)."""

        def pick(t: torch.Tensor) -> torch.Tensor:
            return t[index] if not isinstance(index, (list, np.ndarray)) else t[torch.as_tensor(index)]

        return self._mapped(pick)

    def to(self, device: Any) -> NamedState:
        """The same state with every tensor on ``device``."""

        def mv(t: torch.Tensor) -> torch.Tensor:
            return t.to(device)

        return self._mapped(mv)

    def to_dict(self) -> dict:
        """Plain data (numpy arrays, tuples of names): for ``np.savez``, pickles or your own format."""

        def np_(t: torch.Tensor) -> np.ndarray:
            return t.detach().cpu().numpy()

        return {
            "format": "simbackend-named-state",
            "version": 1,
            "fingerprint": self.fingerprint,
            "time": np_(self.time),
            "body_names": list(self.body_names),
            **{f"body_{k}": np_(getattr(self, f"body_{k}")) for k in BODY_FIELDS},
            "joint_pos": {k: np_(v) for k, v in self.joint_pos.items()},
            "joint_vel": {k: np_(v) for k, v in self.joint_vel.items()},
            "actuator_ctrl": {k: np_(v) for k, v in self.actuator_ctrl.items()},
            "params": {k: np_(v) for k, v in self.params.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NamedState:
        """The inverse of :meth:`to_dict` (arrays or lists)."""
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"state: expected a mapping, got {type(d).__name__}")
        if d.get("format") != "simbackend-named-state" or d.get("version") != 1:
            raise InvalidArgumentError(
                f"state: not a version-1 simbackend named state (format {d.get('format')!r},"
                f" version {d.get('version')!r})"
            )
        missing = [
            k
            for k in (
                "time",
                "body_names",
                "joint_pos",
                "joint_vel",
                "actuator_ctrl",
                *(f"body_{k}" for k in BODY_FIELDS),
            )
            if k not in d
        ]
        if missing:
            raise InvalidArgumentError(f"state: missing keys {missing}")

        def table(key: str, dtype: torch.dtype) -> dict:
            value = d.get(key, {})
            if not isinstance(value, Mapping):
                raise ArgumentTypeError(f"state[{key!r}]: expected a mapping of name -> values")
            return {str(k): _tensor(v, f"{key}[{k!r}]").to(dtype) for k, v in value.items()}

        return cls(
            time=_tensor(d["time"], "time").to(torch.float64),
            body_names=tuple(str(b) for b in d["body_names"]),
            **{f"body_{k}": _tensor(d[f"body_{k}"], f"body_{k}").to(torch.float32) for k in BODY_FIELDS},
            joint_pos=table("joint_pos", torch.float32),
            joint_vel=table("joint_vel", torch.float32),
            actuator_ctrl=table("actuator_ctrl", torch.float32),
            params=table("params", torch.float64),
            fingerprint=str(d.get("fingerprint", "")),
        )
