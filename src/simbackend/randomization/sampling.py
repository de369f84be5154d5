"""Counter-based sampling: the same values for env ``i`` on every engine and for any ``num_envs``.

A draw is a pure function of ``(seed, stream key, env id, draw count, value
index)``: the five integers are folded into one 64-bit word through
SplitMix64's finalizer (a bijective mixer with full avalanche), whose top 53
bits give a uniform number in ``(0, 1)``. No generator state is shared
between envs, so env 3's values are the same whether the batch holds 4 envs
or 64, whichever backend or device applies them, and whatever other envs were
drawn before. The arithmetic is numpy ``uint64`` (wrapping), so any language
can reproduce it; distributions are transforms of these uniforms (inverse
CDF for the gaussian, via torch's ``ndtri``/``ndtr`` in float64).
:func:`uniforms_torch` computes the same bits with torch ``int64`` ops on the
device of its tensors, so a GPU draws for a mask of envs without a host read.
"""

from __future__ import annotations

import numpy as np
import torch

from .plan import Distribution

# SplitMix64's constants (the golden-ratio increment and the finalizer's multipliers), as Python ints
_GOLDEN_INT, _M1_INT, _M2_INT = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_GOLDEN, _M1, _M2 = np.uint64(_GOLDEN_INT), np.uint64(_M1_INT), np.uint64(_M2_INT)


def _as_int64(v: int) -> int:
    """The signed ``int64`` with the bits of ``v`` modulo 2**64 (two's complement)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


# the same constants as torch int64 scalars: wrapping int64 products and sums have the bits of uint64 ones
_GOLDEN_I64, _M1_I64, _M2_I64 = _as_int64(_GOLDEN_INT), _as_int64(_M1_INT), _as_int64(_M2_INT)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def uniforms(seed: int, key: int, env_ids: np.ndarray, counts: np.ndarray, size: int) -> np.ndarray:
    """``(n, size)`` float64 uniforms in the open interval (0, 1).

    Args:
        seed: the plan's seed.
        key: the term's 64-bit stream key.
        env_ids: ``(n,)`` env ids.
        counts: ``(n,)`` how many times this term was drawn for each env before.
        size: values per env.
    """
    with np.errstate(over="ignore"):
        env = np.asarray(env_ids, np.uint64)[:, None]
        cnt = np.asarray(counts, np.uint64)[:, None]
        k = np.arange(size, dtype=np.uint64)[None, :]
        x = _mix(np.full(1, np.uint64(seed) ^ np.uint64(key), np.uint64) + _GOLDEN)
        x = _mix(x + env * _GOLDEN)
        x = _mix(x + cnt * _GOLDEN + _GOLDEN)
        x = _mix(x + k * _GOLDEN + np.uint64(1))
    return ((x >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` on int64 is arithmetic: it copies the sign bit)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix_torch(x: torch.Tensor) -> torch.Tensor:
    """:func:`_mix` on int64 tensors: the same bits, read as two's complement."""
    x = (x ^ _shr(x, 30)) * _M1_I64
    x = (x ^ _shr(x, 27)) * _M2_I64
    return x ^ _shr(x, 31)


def uniforms_torch(seed: int, key: int, env_ids: torch.Tensor, counts: torch.Tensor, size: int) -> torch.Tensor:
    """:func:`uniforms` in torch: the same ``(n, size)`` float64 values, bit for bit, on ``env_ids``' device.

    Every step is an ``int64`` tensor op (wrapping products and sums, XOR, and
    logical shifts emulated by a mask), so nothing is read back to the host:
    a GPU can draw per-env values for a device mask of envs without a sync.

    Args:
        seed: the plan's seed (a Python int, ``0 <= seed < 2**64``).
        key: the term's 64-bit stream key (a Python int).
        env_ids: ``(n,)`` integer tensor of env ids.
        counts: ``(n,)`` integer tensor, how many times this term was drawn for each env before, on
            ``env_ids``' device (a CPU tensor is copied there, and a copy from pageable memory waits).
        size: values per env.
    """
    dev = env_ids.device
    env = env_ids.to(torch.int64)[:, None]
    cnt = counts.to(device=dev, dtype=torch.int64)[:, None]
    k = torch.arange(size, dtype=torch.int64, device=dev)[None, :]
    x = _mix_torch(torch.full((1,), _as_int64(seed ^ key), dtype=torch.int64, device=dev) + _GOLDEN_I64)
    x = _mix_torch(x + env * _GOLDEN_I64)
    x = _mix_torch(x + cnt * _GOLDEN_I64 + _GOLDEN_I64)
    x = _mix_torch(x + k * _GOLDEN_I64 + 1)
    return (_shr(x, 11).to(torch.float64) + 0.5) * (1.0 / 9007199254740992.0)


def draw(dist: Distribution, u: np.ndarray) -> np.ndarray:
    """Values of ``dist`` from uniforms ``u`` ``(n, k, width)``; bounds broadcast over the last axis."""

    def b(v: tuple) -> np.ndarray:
        return np.asarray(v, np.float64)

    if dist.kind == "fixed":
        return np.broadcast_to(b(dist.value), u.shape).copy()
    if dist.kind == "uniform":
        lo, hi = b(dist.low), b(dist.high)
        return lo + u * (hi - lo)
    if dist.kind == "log_uniform":
        lo, hi = np.log(b(dist.low)), np.log(b(dist.high))
        return np.exp(lo + u * (hi - lo))
    # gaussian, truncated to [low, high] where given: inverse CDF over the truncated mass
    mean, std = b(dist.mean), b(dist.std)
    t = torch.from_numpy(np.ascontiguousarray(u))
    if dist.low is not None or dist.high is not None:
        std_safe = np.where(std > 0, std, 1.0)
        a = (
            torch.special.ndtr(torch.from_numpy(np.broadcast_to((b(dist.low) - mean) / std_safe, u.shape[-1:]).copy()))
            if dist.low is not None
            else torch.zeros(u.shape[-1:], dtype=torch.float64)
        )
        c = (
            torch.special.ndtr(torch.from_numpy(np.broadcast_to((b(dist.high) - mean) / std_safe, u.shape[-1:]).copy()))
            if dist.high is not None
            else torch.ones(u.shape[-1:], dtype=torch.float64)
        )
        t = a + t * (c - a)
    z = torch.special.ndtri(t.clamp(1e-300, 1 - 1e-16)).numpy()
    out = mean + std * z
    if dist.low is not None:  # rounding at extreme truncations: stay inside the bounds
        out = np.maximum(out, b(dist.low))
    if dist.high is not None:
        out = np.minimum(out, b(dist.high))
    return out
