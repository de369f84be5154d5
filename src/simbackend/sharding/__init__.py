"""Sharded backends: one ``SimBackend`` of N envs whose envs run in K Ray actors.

``make_backend(sim, model, N, shards=K)`` (CLI: ``--shards K``) splits the envs
into K contiguous blocks (sizes as ``numpy.array_split``; never more shards
than envs) and builds, in each of K Ray actors, the ordinary engine ``sim`` of
its block. The front end is the same as for one process: validation, names,
time, controls, the divergence rule, randomization, snapshots, readouts and
rendering do not know the envs are elsewhere. What changes:

* **Where it runs.** By default a Ray in this process (``ray.init()``, nothing
  to start); ``sharding={"address": "auto"}`` or ``"HOST:PORT"`` (CLI
  ``--ray-address``) joins a cluster, and the shards spread over its nodes.
  Local shards share the machine's cores: with ``nthread=0`` each engine gets
  ``cores // K`` threads.
* **Cost.** One round trip per ``step``/``set_state`` (every shard gets its
  part before any answer is awaited). Each mutating call answers with the
  shard's ``qpos``/``qvel`` and the frame reads (body and site poses, body
  velocities, sensors) asked since the previous steps, so the getters a task
  calls every step need no round trip; Jacobians, rays, pictures' states and
  model fields are fetched when asked and kept until the state changes.
* **Identity.** Env ``i`` follows the same trajectory, bit for bit, as env
  ``i`` of the unsharded backend, for any K: engines step their envs
  independently, and randomization draws are keyed by the global env id.
* **Failures.** A shard that dies, or does not answer within
  ``sharding.timeout`` seconds (300), raises
  :class:`~simbackend.errors.ShardFailedError` naming the shard and its env ids;
  the backend can then only be closed. With ``sharding={"restart": True}`` a
  new actor takes the shard's place, its envs restored from the state the shard
  returned with its last answer (an engine with snapshots loses nothing; one
  without loses its warm starts), the failed call is repeated, and a
  :class:`ShardRestartWarning` says so. An error the shard's engine raises
  reaches the caller as itself, noted with the shard. Ctrl-C during a step
  leaves every env at its pre-call state, as unsharded.
* **Close.** ``close()`` ends every actor; with ``sharding={"pool": True}``
  they wait, idle, for the next sharded backend of this process (the test
  suite's setting: an actor takes about a second to start).

Sharded backends run on CPU (their results come back to this process's CPU
tensors); a GPU engine batches thousands of envs in one process already.
"""

from __future__ import annotations

from simbackend.sharding.cluster import shutdown_pool

__all__ = ["ShardRestartWarning", "ShardedEngine", "shutdown_pool"]


def __getattr__(name: str) -> object:
    if name in ("ShardedEngine", "ShardRestartWarning"):
        from simbackend.sharding import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'simbackend.sharding' has no attribute {name!r}")
