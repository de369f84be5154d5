"""Ray for the shards: joining or starting a cluster, starting actors, the pool of idle actors.

Embedded by default: the first sharded backend of a process calls
``ray.init()`` (a local Ray, nothing to start by hand). ``address`` joins an
existing cluster instead (``"auto"``: the one started on this machine with
``ray start``; ``"HOST:PORT"``; ``"ray://HOST:PORT"`` for Ray Client), so the
same command spreads its shards over machines.

Each shard is one :class:`~simbackend.sharding.worker.ShardWorker` actor. On a
local Ray an actor reserves no CPU (the engines' own thread counts share the
cores, see :mod:`simbackend.sharding`); on a cluster it reserves one (``cpus``),
and the actors are spread over the nodes.

A backend built with ``sharding={"pool": True}`` hands its actors to this
process's pool on ``close()`` instead of ending them, and the next sharded
backend takes them from there: starting an actor costs about a second (a new
Python process importing torch and the engine), building an engine in a
warm actor a few milliseconds. :func:`shutdown_pool` ends the idle ones.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from simbackend._extras import require_extra

_idle: list[tuple[Any, Any]] = []  # (actor, address it was started under)
_actor_class: Any = None


def ray_module() -> Any:
    """``ray``, or :class:`~simbackend.errors.MissingExtraError` naming the extra."""
    require_extra("ray", purpose="a sharded backend (shards=K)")
    import ray

    return ray


#: ``ray.init``'s arguments that keep Ray quiet: no start-up banner ("Started a local Ray instance", the
#: dashboard's address) nor its notices below errors (the "ray" logger at ERROR), no dashboard, and the
#: actors' own output kept in Ray's log files instead of being copied to this process's terminal
QUIET = {"configure_logging": True, "logging_level": logging.ERROR, "log_to_driver": False}


def connect(address: str | None) -> Any:
    """Ray, initialised: joined to ``address`` or started in this process (``None``), quietly (:data:`QUIET`).

    A Ray this process initialised already (``ray.init(...)`` called by the user, with their own logging
    settings) is used as it is.
    """
    ray = ray_module()
    if not ray.is_initialized():
        if address is None:
            ray.init(include_dashboard=False, num_cpus=os.cpu_count() or 1, namespace="simbackend", **QUIET)
        else:
            ray.init(address=address, namespace="simbackend", **QUIET)
    return ray


def start_actors(count: int, address: str | None, cpus: float | None, pool: bool) -> list[Any]:
    """``count`` actors: idle ones from the pool first (started under the same ``address``), then new ones."""
    global _actor_class
    ray = connect(address)
    out: list[Any] = []
    while _idle and len(out) < count:
        actor, where = _idle.pop()
        if where == address:
            out.append(actor)
        else:
            ray.kill(actor)
    if _actor_class is None:
        from simbackend.sharding.worker import ShardWorker

        # calls run one at a time, in order; `interrupt` runs beside them (it stops a step)
        _actor_class = ray.remote(concurrency_groups={"control": 1})(ShardWorker)
    reserve = cpus if cpus is not None else (0.0 if address is None else 1.0)
    strategy = "DEFAULT" if address is None else "SPREAD"
    while len(out) < count:
        out.append(_actor_class.options(num_cpus=reserve, scheduling_strategy=strategy, max_restarts=0).remote())
    return out


def release(actors: list[Any], address: str | None, pool: bool) -> None:
    """End ``actors``, or keep them idle in the pool (``pool``)."""
    ray = ray_module()
    for actor in actors:
        if pool:
            _idle.append((actor, address))
        else:
            ray.kill(actor)


def shutdown_pool() -> int:
    """End every idle pooled actor; returns how many."""
    n = len(_idle)
    if n:
        ray = ray_module()
        while _idle:
            ray.kill(_idle.pop()[0])
    return n
