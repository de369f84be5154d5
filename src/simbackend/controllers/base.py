"""The controller base class, the combination of controllers, and shared model lookups.

A controller turns a policy action ``(N, action_dim)`` into commands for the
actuators it owns (``actuator_ids``, ctrl columns), batched over the envs in
torch on the backend's device. It talks only to the
:class:`~simbackend.contract.SimBackend` contract.

Lifecycle: ``reset(env_ids)`` re-anchors targets at the current state (call it
after ``set_state`` starts new episodes), ``set_action(action)`` stores new
targets once per policy step, ``compute()`` gives the commands for the owned
columns (every physics substep for a ``physics_rate`` controller, which
:meth:`Controller.attach` arranges through ``set_pre_step_control``), and
``apply(action, nsteps)`` does it all and steps the backend.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.contract import SimBackend
from simbackend.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    NonFiniteError,
    UnknownNameError,
)
from simbackend.masked import rows_kept
from simbackend.model_info import JOINT_HINGE, JOINT_SLIDE, JOINT_TYPE_NAMES

__all__ = ["CombinedController", "Controller"]


# ----------------------------------------------------------------------
# model lookups shared by the controllers (host side, at construction)
# ----------------------------------------------------------------------
def check_backend(backend: Any) -> SimBackend:
    """``backend`` if it is a :class:`~simbackend.contract.SimBackend`, else ``ArgumentTypeError``."""
    if not isinstance(backend, SimBackend):
        raise ArgumentTypeError(f"backend: expected a SimBackend, got {type(backend).__name__}")
    return backend


def resolve_names(backend: SimBackend, kind: str, names: Sequence[str], argument: str) -> np.ndarray:
    """Ids of ``names`` through ``get_<kind>_ids``; an unknown name raises the backend's
    ``UnknownNameError`` (with the closest names) prefixed with ``argument``."""
    getter = getattr(backend, f"get_{kind}_ids")
    try:
        return getter(list(names)).cpu().numpy().astype(np.int64)
    except UnknownNameError as e:
        e.args = (f"{argument}: {e.args[0]}",)
        raise


def resolve_dof_joints(backend: SimBackend, names: Sequence[str], argument: str) -> np.ndarray:
    """Joint ids of ``names``, each a hinge or slide joint (one scalar coordinate)."""
    ids = resolve_names(backend, "joint", names, argument)
    info = backend.info
    for name, j in zip(names, ids):
        t = int(info.joint_type[j])
        if t not in (JOINT_HINGE, JOINT_SLIDE):
            raise InvalidArgumentError(
                f"{argument}: joint {name!r} is a {JOINT_TYPE_NAMES[t]} joint;"
                " joint controllers take hinge and slide joints"
            )
    return ids


def _describe_actuators(info: Any, acts: Sequence[int] | np.ndarray) -> str:
    if not len(acts):
        return "it has no actuator"
    return "it has " + ", ".join(f"{info.actuator_kind[a]} {info.actuator_names[a]!r}" for a in acts)


def joint_actuators(
    backend: SimBackend, joint_ids: np.ndarray, names: Sequence[str], kind: str, argument: str, hint: str
) -> np.ndarray:
    """``(k,)`` the one actuator of kind ``kind`` driving each joint (a joint transmission)."""
    info = backend.info
    out = []
    for name, j in zip(names, joint_ids):
        acts = np.flatnonzero(np.asarray(info.actuator_joint) == j)
        mine = [int(a) for a in acts if info.actuator_kind[a] == kind]
        if len(mine) != 1:
            problem = (
                f"has no {kind} actuator ({_describe_actuators(info, acts)}){hint}"
                if not mine
                else f"has {len(mine)} {kind} actuators "
                f"({', '.join(repr(info.actuator_names[a]) for a in mine)}); it must have exactly one"
            )
            raise InvalidArgumentError(f"{argument}: joint {name!r} {problem}")
        out.append(mine[0])
    return np.asarray(out, dtype=np.int64)


def bound_array(values: Any, n: int, device: torch.device) -> torch.Tensor:
    """A config bound (a number or a sequence) as an ``(n,)`` float32 tensor."""
    if isinstance(values, (int, float)):
        values = [float(values)] * n
    return torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=torch.float32, device=device)


def sorted_range(r: np.ndarray, gear: np.ndarray) -> np.ndarray:
    """``(k, 2)`` ctrl ranges ``r`` divided by ``gear``, ordered low-high (a negative gear swaps them)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a, b = r[:, 0] / gear, r[:, 1] / gear
    return np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)


# ----------------------------------------------------------------------
# the base class
# ----------------------------------------------------------------------
class Controller(abc.ABC):
    """Turns actions ``(N, action_dim)`` into commands ``(N, k)`` for ``k`` actuator columns.

    Attributes:
        backend: the :class:`~simbackend.contract.SimBackend` it drives.
        config: the config it was built from (``None`` for a combination).
        actuator_ids: ``(k,)`` int64 ctrl columns this controller writes, in the
            order of :meth:`compute`'s columns.
        actuator_columns: the same columns as a host ``(k,)`` int64 numpy array.
        action_dim: size of one env's action.
        action_low, action_high: ``(action_dim,)`` float32 bounds of the action
            in the controller's units (rad, m, ...); actions are clipped to them.
        physics_rate: ``compute`` must run every physics substep (a PD law on
            motors); :meth:`attach` (and :meth:`apply`) arrange it.
        normalize_action: ``set_action`` takes actions in ``[-1, 1]`` and maps
            them linearly onto ``[action_low, action_high]`` (clipped first).

    The targets of every env exist from construction on, anchored at the state
    the backend held then (as if :meth:`reset` had been called).

    A new controller subclasses this with a ``config_type`` (its frozen config
    dataclass) and implements :meth:`compute`, :meth:`reanchor` and
    :meth:`store_targets` (and :meth:`physics_parts` when only some of its columns
    run at the physics rate); :func:`~simbackend.controllers.register_controller`
    (or the entry-point group ``simbackend.controllers``) lets
    :func:`~simbackend.controllers.make_controller` build it from its config.
    """

    #: the config dataclass this controller is built from (``make_controller`` looks it up)
    config_type: ClassVar[type | None] = None

    backend: SimBackend
    config: Any
    actuator_ids: torch.Tensor
    action_dim: int
    action_low: torch.Tensor
    action_high: torch.Tensor
    physics_rate: bool
    normalize_action: bool

    def __init__(
        self,
        backend: SimBackend,
        config: Any,
        actuator_ids: np.ndarray,
        action_low: Any,
        action_high: Any,
        *,
        physics_rate: bool,
        normalize_action: bool,
    ):
        self.backend = backend
        self.config = config
        dev = backend.device
        self.actuator_columns = np.asarray(actuator_ids, dtype=np.int64)
        self.actuator_ids = torch.as_tensor(self.actuator_columns, dtype=torch.int64, device=dev)
        self.action_low = torch.as_tensor(action_low, dtype=torch.float32, device=dev).reshape(-1)
        self.action_high = torch.as_tensor(action_high, dtype=torch.float32, device=dev).reshape(-1)
        self.action_dim = int(self.action_low.numel())
        self.physics_rate = bool(physics_rate)
        self.normalize_action = bool(normalize_action)
        self._span = self.action_high - self.action_low
        self._allow_unowned = False
        self._default_ctrl: torch.Tensor | None = None
        self._hook: Callable[..., torch.Tensor] | None = None

    # ------------------------------------------------------------------
    # public
    # ------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        """N, the backend's number of envs."""
        return self.backend.num_envs

    @property
    def policy_action_low(self) -> torch.Tensor:
        """``(action_dim,)`` lower bound of what :meth:`set_action` takes: -1 when
        ``normalize_action``, else :attr:`action_low`."""
        return -torch.ones_like(self.action_low) if self.normalize_action else self.action_low.clone()

    @property
    def policy_action_high(self) -> torch.Tensor:
        """``(action_dim,)`` upper bound of what :meth:`set_action` takes: 1 or :attr:`action_high`."""
        return torch.ones_like(self.action_high) if self.normalize_action else self.action_high.clone()

    def reset(self, env_ids: Any = None) -> None:
        """Re-anchor the targets of envs ``env_ids`` at their current state.

        Joint targets become the current joint positions, an end-effector target
        the current site pose, so that afterwards a zero delta action asks for
        the current state. Other envs keep their targets.

        Args:
            env_ids: ``None`` (all envs), ``(n,)`` distinct env ids, or an ``(N,)``
                boolean mask.
        """
        if (
            isinstance(env_ids, torch.Tensor)
            and env_ids.dtype == torch.bool
            and tuple(env_ids.shape) == (self.num_envs,)
            and bool(getattr(self.backend, "deferred_checks", False))
        ):  # a device mask: every env re-anchored, kept where the mask is set (no host read)
            self.reanchor_masked(env_ids.to(self.backend.device))
            return
        ids = self._env_rows(env_ids)
        if ids.numel():
            self.reanchor(ids)

    def reanchor_masked(self, mask: torch.Tensor) -> None:
        """:meth:`reanchor` of the envs ``mask`` (``(N,)`` bool on the device) selects, reading nothing
        back: every row is re-anchored and the others get their targets back."""
        with rows_kept(self, mask):
            self.reanchor(torch.arange(self.num_envs, device=mask.device))

    def set_action(self, action: Any) -> None:
        """Store the targets that ``action`` asks for.

        Args:
            action: ``(N, action_dim)`` reals. With ``normalize_action`` they are
                clipped to ``[-1, 1]`` and mapped linearly onto
                ``[action_low, action_high]``; otherwise clipped to those bounds.

        Raises:
            InputShapeError, InputDTypeError: a wrong shape or dtype.
            NonFiniteError: NaN or inf (on a CPU backend; on a GPU backend, to
                avoid a host synchronisation, they reach the ctrl and the
                backend's deferred check reports them at its next call).
            Nothing is changed when it raises.
        """
        self.store_action(self._check_action(action))

    @abc.abstractmethod
    def compute(self) -> torch.Tensor:
        """``(N, k)`` float32 commands (ctrl values) for :attr:`actuator_ids`, from the stored
        targets and, for a ``physics_rate`` controller, the current state."""

    def ctrl(self) -> torch.Tensor:
        """``(N, nu)`` float32 full control: the owned columns from :meth:`compute`.

        Columns no controller owns hold the combination's ``default_ctrl`` (zeros by
        default) where unowned columns are allowed (:class:`CombinedController`
        with ``allow_unowned=True``); otherwise a controller that does not own every
        actuator raises ``InvalidArgumentError`` here: combine it with controllers
        for the other actuators.
        """
        self._check_owns_all()
        if self._default_ctrl is not None:
            out = self._default_ctrl.clone()
        else:
            out = torch.zeros(
                (self.num_envs, self.backend.num_actuators), dtype=torch.float32, device=self.backend.device
            )
        out[:, self.actuator_ids] = self.compute()
        return out

    def attach(self) -> None:
        """Install the physics-rate part: if :attr:`physics_rate`, set a pre-step control
        function on the backend that recomputes this controller's physics-rate columns
        before every substep (the other columns keep the ctrl given to ``step``).
        A controller without a physics-rate part installs nothing. The backend holds one
        pre-step function: attaching replaces any other."""
        if not self.physics_rate:
            return
        parts = self.physics_parts()

        def pre_step(backend: SimBackend, ctrl: torch.Tensor) -> torch.Tensor:
            for cols, compute in parts:
                ctrl[:, cols] = compute()
            return ctrl

        self.backend.set_pre_step_control(pre_step)
        self._hook = pre_step

    def detach(self) -> None:
        """Remove the pre-step function :meth:`attach` installed (nothing if it did not)."""
        if self._hook is not None:
            self._hook = None
            if not self.backend.closed:
                self.backend.set_pre_step_control(None)

    @property
    def attached(self) -> bool:
        """Whether this controller's pre-step function is installed (by :meth:`attach`)."""
        return self._hook is not None

    def apply(self, action: Any, nsteps: int = 1) -> dict:
        """``set_action(action)``, then ``backend.step(self.ctrl(), nsteps)``.

        Attaches first if the controller has a physics-rate part, so that part is
        recomputed every substep. Returns the ``info`` dict of ``step``.

        Args:
            action: ``(N, action_dim)``, as :meth:`set_action`.
            nsteps: substeps, >= 1.
        """
        nsteps = V.positive_int(nsteps, "nsteps")
        self._check_owns_all()
        action = self._check_action(action)
        self.store_action(action)
        if self.physics_rate and self._hook is None:
            self.attach()
        return self.backend.step(self.ctrl(), nsteps)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(action_dim={self.action_dim}, actuators="
            f"{[self.backend.actuator_names[i] for i in self.actuator_columns]})"
        )

    # ------------------------------------------------------------------
    # what a subclass implements (called by the public methods above)
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def reanchor(self, ids: torch.Tensor) -> None:
        """Re-anchor the targets of rows ``ids`` (``(n,)`` int64 on the device, n >= 1) at the
        current state; :meth:`reset` calls it after checking ``env_ids``."""

    @abc.abstractmethod
    def store_targets(self, action: torch.Tensor) -> None:
        """Store targets from a validated ``(N, action_dim)`` float32 action in the controller's
        units, already within ``[action_low, action_high]``."""

    def physics_parts(self) -> list[tuple[torch.Tensor, Callable[[], torch.Tensor]]]:
        """``[(columns (k,) int64, compute)]``: the columns :meth:`attach` recomputes before every
        substep and the function returning their ``(N, k)`` values; by default all columns with
        :meth:`compute` when :attr:`physics_rate`, none otherwise."""
        return [(self.actuator_ids, self.compute)] if self.physics_rate else []

    def store_action(self, action: torch.Tensor) -> None:
        """Scale (``normalize_action``) or clip a validated ``(N, action_dim)`` action onto
        ``[action_low, action_high]`` and :meth:`store_targets` it; :meth:`set_action` after its checks."""
        if self.normalize_action:
            action = self.action_low + (action.clamp(-1.0, 1.0) + 1.0) * 0.5 * self._span
        else:
            action = torch.maximum(torch.minimum(action, self.action_high), self.action_low)
        self.store_targets(action)

    def _check_action(self, action: Any) -> torch.Tensor:
        dev = self.backend.device
        a = V.real_tensor(action, "action", (self.num_envs, self.action_dim), device=dev, dtype=torch.float32)
        # a GPU (or deferred-checks) backend: a NaN action becomes NaN ctrl, reported at the next call
        if dev.type == "cpu" and a.numel() and not getattr(self.backend, "deferred_checks", False):
            bad = V.nonfinite_rows(a)
            if bool(bad.any()):
                raise NonFiniteError("action", torch.nonzero(bad).flatten().tolist())
        return a

    def _env_rows(self, env_ids: Any) -> torch.Tensor:
        ids = V.env_ids(env_ids, self.num_envs)
        return torch.as_tensor(ids, dtype=torch.int64, device=self.backend.device)

    def _unowned(self) -> np.ndarray:
        return np.setdiff1d(np.arange(self.backend.num_actuators), self.actuator_columns)

    def _check_owns_all(self) -> None:
        if self._allow_unowned:
            return
        free = self._unowned()
        if free.size:
            names = [self.backend.actuator_names[i] for i in free]
            raise InvalidArgumentError(
                f"ctrl: {type(self).__name__} does not drive actuators {names}; combine it with controllers"
                " for them in a CombinedController (allow_unowned=True to hold them at default_ctrl)"
            )

    def _joint_state(self, qpos_cols: torch.Tensor) -> torch.Tensor:
        return self.backend.get_qpos()[:, qpos_cols]


# ----------------------------------------------------------------------
# combination
# ----------------------------------------------------------------------
class CombinedController(Controller):
    """Controllers side by side: the action is their actions concatenated in mapping order.

    Args:
        backend: the backend every controller was built on.
        controllers: ``{name: controller}``, at least one. No two may own the same
            actuator, and every actuator must be owned by one of them unless
            ``allow_unowned``.
        allow_unowned: allow actuators no controller owns; :meth:`ctrl` gives them
            ``default_ctrl``.
        default_ctrl: ``(N, nu)`` (or ``(nu,)``, for every env) ctrl of the unowned
            columns; ``None`` for zeros.

    Attributes:
        controllers: the mapping (a dict in the given order).
        action_slices: ``{name: slice}`` each controller's columns of the action.
        actuator_ids: ``(k,)`` the children's columns concatenated, in the order of
            :meth:`compute`'s columns.
        physics_rate: true if any child is; :meth:`attach` then recomputes the
            physics-rate children's columns every substep.
        normalize_action: the children's (all children with actions must agree).
    """

    def __init__(
        self,
        backend: SimBackend,
        controllers: Mapping[str, Controller],
        *,
        allow_unowned: bool = False,
        default_ctrl: Any = None,
    ):
        backend = check_backend(backend)
        if not isinstance(controllers, Mapping):
            raise ArgumentTypeError(
                f"controllers: expected a mapping of names to controllers, got {type(controllers).__name__}"
            )
        if not controllers:
            raise InvalidArgumentError("controllers: expected at least one controller, got none")
        for name, c in controllers.items():
            if not isinstance(name, str):
                raise ArgumentTypeError(f"controllers: names must be strings, got {type(name).__name__}")
            if not isinstance(c, Controller):
                raise ArgumentTypeError(
                    f"controllers[{name!r}]: expected a Controller, got {type(c).__name__}"
                    " (make_controller builds one from a config)"
                )
            if c.backend is not backend:
                raise InvalidArgumentError(f"controllers[{name!r}]: built on another backend")
        if not isinstance(allow_unowned, bool):
            raise ArgumentTypeError(f"allow_unowned: expected True or False, got {type(allow_unowned).__name__}")
        info = backend.info
        owner: dict[int, str] = {}
        for name, c in controllers.items():
            for a in c.actuator_columns:
                if int(a) in owner:
                    raise InvalidArgumentError(
                        f"controllers: actuator {info.actuator_names[a]!r} is driven by both"
                        f" {owner[int(a)]!r} and {name!r}; each actuator can have one controller"
                    )
                owner[int(a)] = name
        free = [i for i in range(backend.num_actuators) if i not in owner]
        if free and not allow_unowned:
            raise InvalidArgumentError(
                f"controllers: no controller drives actuators {[info.actuator_names[i] for i in free]};"
                " add one (PassiveConfig for motors to hold at 0) or pass allow_unowned=True"
                " (and default_ctrl for their values)"
            )
        default = None
        if default_ctrl is not None and not allow_unowned:
            raise InvalidArgumentError(
                "default_ctrl: only used with allow_unowned=True (it fills the columns no controller drives)"
            )
        if default_ctrl is not None:
            n, nu = backend.num_envs, backend.num_actuators
            shape: tuple[int, ...] = (n, nu)
            if (
                isinstance(default_ctrl, torch.Tensor)
                and default_ctrl.dim() == 1
                or (isinstance(default_ctrl, np.ndarray) and default_ctrl.ndim == 1)
            ):
                shape = (nu,)
            default = V.real_tensor(default_ctrl, "default_ctrl", shape, device=backend.device, dtype=torch.float32)
            default = default.expand(n, nu).clone()
            bad = V.nonfinite_rows(default)
            if bool(bad.any()):
                raise NonFiniteError("default_ctrl", torch.nonzero(bad).flatten().tolist())
        modes = {c.normalize_action for c in controllers.values() if c.action_dim > 0}
        if len(modes) > 1:
            which = {name: c.normalize_action for name, c in controllers.items() if c.action_dim > 0}
            raise InvalidArgumentError(
                f"controllers: mixed normalize_action {which}; the combined action"
                " must be all normalized or all in controller units"
            )
        children = dict(controllers)
        lows = [c.action_low for c in children.values()]
        highs = [c.action_high for c in children.values()]
        ids = np.concatenate([c.actuator_columns for c in children.values()]).astype(np.int64)
        super().__init__(
            backend,
            None,
            ids,
            torch.cat(lows).cpu(),
            torch.cat(highs).cpu(),
            physics_rate=any(c.physics_rate for c in children.values()),
            normalize_action=modes.pop() if modes else True,
        )
        self.controllers = children
        self.action_slices: dict[str, slice] = {}
        start = 0
        for name, c in children.items():
            self.action_slices[name] = slice(start, start + c.action_dim)
            start += c.action_dim
        self._allow_unowned = allow_unowned
        self._default_ctrl = default

    def compute(self) -> torch.Tensor:
        """``(N, k)`` the children's commands concatenated (columns :attr:`actuator_ids`)."""
        parts = [c.compute() for c in self.controllers.values()]
        return torch.cat(parts, dim=1)

    def reanchor(self, ids: torch.Tensor) -> None:
        for c in self.controllers.values():
            c.reanchor(ids)

    def reanchor_masked(self, mask: torch.Tensor) -> None:
        for c in self.controllers.values():
            c.reanchor_masked(mask)

    def store_action(self, action: torch.Tensor) -> None:
        for name, c in self.controllers.items():
            c.store_action(action[:, self.action_slices[name]])

    def store_targets(self, action: torch.Tensor) -> None:  # pragma: no cover - store_action splits first
        raise AssertionError("unreachable")

    def physics_parts(self) -> list[tuple[torch.Tensor, Callable[[], torch.Tensor]]]:
        parts: list = []
        for c in self.controllers.values():
            parts.extend(c.physics_parts())
        return parts

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self.controllers.items())
        return f"CombinedController({{{inner}}})"
