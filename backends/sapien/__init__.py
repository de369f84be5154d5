"""SAPIEN 3 / PhysX 5 backend (CPU PhysX everywhere, GPU PhysX where CUDA is)."""

from .backend import SapienBackend

__all__ = ["SapienBackend"]
