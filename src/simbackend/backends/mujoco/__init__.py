"""MuJoCo reference backend (``mujoco.batch.Batch``)."""

from simbackend.backends.mujoco.backend import MuJoCoBackend

__all__ = ["MuJoCoBackend"]
