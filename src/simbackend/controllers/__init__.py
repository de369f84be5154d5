"""Controllers: policy actions to actuator commands, written only against the contract.

Build one from a config, or a combination from a mapping of configs::

    from simbackend.controllers import JointPDConfig, PassiveConfig, make_controller
    ctl = make_controller(sim, {"cart": JointPDConfig(["slider"], kp=50.0, kd=10.0, low=-1.0, high=1.0),
                                "pole": PassiveConfig(["hinge"])})
    info = ctl.apply(actions, nsteps=4)     # (N, action_dim) in [-1, 1]

Every controller is batched over the ``N`` envs in torch on ``backend.device``
(float32). Configs (:mod:`simbackend.controllers.config`) are frozen dataclasses
validated when made; names, actuator kinds and ranges are checked when the
controller is built on a backend. Errors name the argument.

=============================  ==========================  =========================================
config                         drives                      action
=============================  ==========================  =========================================
:class:`JointPositionConfig`   position actuators          joint targets, absolute or delta
:class:`JointPDConfig`         motors (PD every substep)   joint targets, absolute or delta
:class:`EEPoseConfig`          position actuators (IK)     site pose: translation + rotation vector
:class:`PassiveConfig`         motors held at 0            none
=============================  ==========================  =========================================

A new controller is a :class:`Controller` subclass naming its config in
``config_type``, registered with :func:`register_controller` or through the
entry-point group ``simbackend.controllers``; :func:`make_controller` then
builds it from that config, alone or inside a mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError

from .base import CombinedController, Controller, check_backend
from .config import (
    EE_FRAMES,
    EEPoseConfig,
    JointPDConfig,
    JointPositionConfig,
    PassiveConfig,
)
from .ee import EEPoseController
from .joint import JointPDController, JointPositionController, PassiveController
from .registry import available_controllers, controller_class, register_controller

__all__ = [
    "EE_FRAMES",
    "CombinedController",
    "Controller",
    "EEPoseConfig",
    "EEPoseController",
    "JointPDConfig",
    "JointPDController",
    "JointPositionConfig",
    "JointPositionController",
    "PassiveConfig",
    "PassiveController",
    "available_controllers",
    "make_controller",
    "register_controller",
]


def make_controller(backend: Any, config: Any, *, allow_unowned: bool = False, default_ctrl: Any = None) -> Controller:
    """Build a controller on ``backend`` from one config, or a :class:`CombinedController`
    from a mapping ``{name: config}`` (action = the children's actions concatenated in
    mapping order).

    Args:
        backend: the :class:`~simbackend.contract.SimBackend`.
        config: a config of a registered controller (:class:`JointPositionConfig`,
            :class:`JointPDConfig`, :class:`EEPoseConfig`, :class:`PassiveConfig` or
            a third party's), or a mapping of names to them.
        allow_unowned, default_ctrl: for a mapping, passed to :class:`CombinedController`
            (``default_ctrl``: ``(N, nu)`` or ``(nu,)``).

    Returns:
        The controller; its targets are anchored at the backend's current state.
    """
    backend = check_backend(backend)
    if isinstance(config, Mapping):
        children = {}
        for name, c in config.items():
            if not isinstance(name, str):
                raise ArgumentTypeError(f"config: names must be strings, got {type(name).__name__}")
            children[name] = (controller_class(c, f"config[{name!r}]"), c)
        if not children:
            raise InvalidArgumentError("config: expected at least one controller config, got an empty mapping")
        built = {name: cls(backend, c) for name, (cls, c) in children.items()}
        return CombinedController(backend, built, allow_unowned=allow_unowned, default_ctrl=default_ctrl)
    cls = controller_class(config)
    if allow_unowned or default_ctrl is not None:
        raise InvalidArgumentError("allow_unowned, default_ctrl: only for a mapping of configs (a CombinedController)")
    return cls(backend, config)
