"""Engine-to-engine (and engine-to-robot) calibration: fit one engine's model parameters so that it
reproduces reference trajectories.

* :mod:`.params`: :class:`ParameterSet`, the fitted parameters (plan terms with bounds).
* :mod:`.reference`: :func:`load_reference` (this project's recordings and ``simbackend-log``
  files) and :func:`write_log`.
* :mod:`.fit`: :class:`Replayer` (the env batch as the population, multiple shooting,
  per-channel normalised errors) and :func:`calibrate` (CMA-ES).
* :mod:`.excite`: :func:`excite` (open-loop chirps and steps on a robot's joints) and
  :func:`excite_policy` (a checkpoint's episodes), logged on any engine.
* :mod:`.report`: the report (JSON) and its pictures.

The command line: ``simbackend excite`` and ``simbackend calibrate``; the guide: ``docs/calibration.md``.
"""

from .excite import SIGNALS, excite, excite_policy
from .fit import CHANNELS, DIVERGED_LOSS, CalibrationResult, Replayer, calibrate
from .params import Parameter, ParameterSet
from .reference import LOG_FORMAT, Reference, Segment, load_reference, write_log

__all__ = [
    "CHANNELS",
    "DIVERGED_LOSS",
    "LOG_FORMAT",
    "SIGNALS",
    "CalibrationResult",
    "Parameter",
    "ParameterSet",
    "Reference",
    "Replayer",
    "Segment",
    "calibrate",
    "excite",
    "excite_policy",
    "load_reference",
    "write_log",
]
