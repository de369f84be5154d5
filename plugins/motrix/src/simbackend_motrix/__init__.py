"""MotrixSim backend for simbackend, installed as a plugin (entry point ``simbackend.backends: motrix``).

Depends only on simbackend's public API and ``motrixsim``; simbackend does not
import it or know its name. See README.md for the three commands.
"""

from .engine import MotrixEngine

__all__ = ["MotrixEngine"]
