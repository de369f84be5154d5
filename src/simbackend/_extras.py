"""Optional parts and the extras that install them: one clear error when one is missing.

The core (``pip install simbackend``) holds the contract, plans, states and the
CLI's shell; engines and heavy parts are extras. A module that needs one calls
:func:`require_extra` before importing it, so that a missing part raises one
line naming the extra to install instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib

from simbackend.errors import MissingExtraError

#: importable module -> (distribution, extra that installs it)
EXTRAS = {
    "mujoco": ("mujoco", "mujoco"),
    "sapien": ("sapien", "sapien"),
    "warp": ("warp-lang", "mjwarp"),
    "mujoco_warp": ("mujoco-warp", "mjwarp"),
    "h5py": ("h5py", "playback"),
    "imageio": ("imageio", "playback"),
    "imageio_ffmpeg": ("imageio-ffmpeg", "playback"),
    "gymnasium": ("gymnasium", "gym"),
    "rsl_rl": ("rsl-rl-lib", "train"),
    "tensordict": ("tensordict", "train"),
    "matplotlib": ("matplotlib", "train"),
    "tqdm": ("tqdm", "train"),
    "cmaes": ("cmaes", "calibrate"),
    "stable_baselines3": ("stable-baselines3", "sb3"),
    "torchrl": ("torchrl", "torchrl"),
    "ray": ("ray", "ray"),
    "onnx": ("onnx", "deploy"),
    "onnxscript": ("onnxscript", "deploy"),
    "onnxruntime": ("onnxruntime", "deploy"),
    "pytest": ("pytest", "contract"),
    "hypothesis": ("hypothesis", "contract"),
}


def require_extra(*modules: str, purpose: str) -> None:
    """Import ``modules`` (names in :data:`EXTRAS`) or raise :class:`MissingExtraError` naming the extra.

    Args:
        modules: the modules ``purpose`` needs.
        purpose: what needs them, for the message (``"the MuJoCo engine"``).
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            dist, extra = EXTRAS[module]
            raise MissingExtraError(
                f"{purpose} needs {dist}, which is not installed ({' '.join(str(e).split())}); install the"
                f" extra: pip install 'simbackend[{extra}]'",
                extra=extra,
            ) from e
