"""Count the host reads a stretch of torch code makes: the ops that would synchronise a GPU with the host.

A GPU loop keeps its speed only while the host never waits for the device
(docs/conventions.md: GPU backends never synchronise with the host in
``step``, ``set_state`` or a getter). :func:`count_host_reads` counts, by
call site, the torch ops that make the host wait::

    from simbackend.host_reads import count_host_reads

    with count_host_reads() as reads:
        for _ in range(10):
            env.step(actions)
    assert reads.total == 0, reads.summary()

Kinds of read (:data:`KINDS`):

* ``"scalar read"``: ``aten._local_scalar_dense``, the op behind ``.item()``,
  ``bool()``, ``int()``, ``float()`` and ``operator.index`` of a tensor (an
  ``if t.any():`` too), the ops that return a Python bool of tensor values
  (``aten.equal``, ``aten.allclose``, ``aten.is_nonzero``), and ``histc``
  without a range (it reads the values' min and max).
* ``"data-dependent shape"``: ops whose output size depends on the values,
  which the host must read to allocate it: ``nonzero`` (``torch.nonzero``,
  ``torch.where(m)`` with one argument, ``argwhere``), ``masked_select``,
  ``unique`` and ``unique_consecutive``, ``repeat_interleave`` with a tensor
  of repeats and no ``output_size``, ``bincount``, and indexing with a bool
  mask (``t[mask]``: ``aten.index.Tensor``; ``t[mask] = values``:
  ``aten.index_put_``, which calls ``nonzero`` inside, out of the dispatch
  mode's sight). ``t[mask] = scalar`` is not counted: PyTorch lowers it to
  ``masked_fill_`` (a single bool mask on the tensor's device and a one-element
  CPU value, which is what a Python number becomes), which does not wait.
  ``nonzero_static``, ``torch.where(m, a, b)``, ``masked_fill``,
  ``index_select`` do not wait and are not counted.
* ``"copy to host"``: ``aten._to_copy`` / ``aten.copy_`` from a non-CPU tensor
  to the CPU (``.cpu()``, ``.to("cpu")``, ``.tolist()``, ``.numpy(force=True)``
  of a device tensor); a ``non_blocking`` copy into pinned memory is counted
  too (it does not wait, but its values are only safe to read after a sync).
* ``"read-back call"`` (``cpu_tensors=True`` only): ``Tensor.cpu()`` and
  ``Tensor.tolist()`` called on a CPU tensor. On the CPU they reach no aten op
  at all (the tensor is already on the host), so this is the CPU run's
  stand-in for the copy the same call makes on a GPU. ``.to("cpu")`` of a CPU
  tensor is not counted: on the CPU it cannot be told from ``.to(device)``,
  which on a GPU copies to the device, not from it.

On the CPU and on a GPU. The counter is a ``TorchDispatchMode`` (plus a
``TorchFunctionMode`` for the read-back calls): it sees the aten ops, not the
device, so a CPU-only run counts the device-independent reads (scalar reads,
the data-dependent shapes, the read-back calls) at the same sites as a GPU
run would, which is how a machine without a GPU checks a GPU code path. It
cannot tell a tensor that would live on the GPU from one that lives on the
host by design (a host copy of env ids), and a device-to-host copy only
exists where a tensor is on a device. On a GPU run pass
``cpu_tensors=False``: only reads of non-CPU tensors and copies to the host
are counted, which are the real synchronisations. Not counted: copies from
pageable host memory to the device (``torch.tensor(x, device="cuda")``,
``cpu_tensor.to("cuda")``, and ``t[long_ids] = 1.0``, whose Python number is
copied to the device inside ``index_put_``), which wait too. CUDA has
``torch.cuda.set_sync_debug_mode("error")`` for those and for syncs inside
other kernels; this counter names the Python line that caused each read. On
an H100 (torch 2.11), with ``cpu_tensors=False`` and the cases of
``tests/test_host_reads.py`` on CUDA tensors, the two agreed case by case but
for those host-to-device copies, ``unique(dim=...)`` (counted here: its output
size is data-dependent; the debug mode, a prototype, misses it) and a
``non_blocking`` copy into pinned memory (counted here, no wait).

Call sites: the innermost frame inside the ``simbackend`` package (the path
under it, ``frontend/faults.py:67 publish``), else the innermost frame outside
torch (the file name, ``train.py:40 loop``). Modes are per thread: only the
thread that entered the block is counted.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "COPY_TO_HOST",
    "DATA_DEPENDENT_SHAPE",
    "KINDS",
    "READBACK_CALL",
    "SCALAR_READ",
    "HostReads",
    "count_host_reads",
]

SCALAR_READ = "scalar read"
DATA_DEPENDENT_SHAPE = "data-dependent shape"
COPY_TO_HOST = "copy to host"
READBACK_CALL = "read-back call"
#: the kinds of host read, in the order :meth:`HostReads.summary` reports them
KINDS = (SCALAR_READ, DATA_DEPENDENT_SHAPE, COPY_TO_HOST, READBACK_CALL)

#: ops that hand a value to Python: the tensor whose values are read is the first argument
_SCALAR_OPS = frozenset({"aten._local_scalar_dense", "aten.is_nonzero", "aten.equal", "aten.allclose"})
#: ops whose output size is the count of (some of) their input's values
_SHAPE_OPS = frozenset(
    {
        "aten.nonzero",
        "aten.masked_select",
        "aten._unique",
        "aten._unique2",
        "aten.unique_dim",
        "aten.unique_consecutive",
        "aten.unique_dim_consecutive",
        "aten.bincount",
    }
)
_INDEX_PUT_OPS = frozenset({"aten.index_put_", "aten.index_put", "aten._index_put_impl_"})
_COPY_OPS = frozenset({"aten._to_copy", "aten.copy_"})

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_HERE = os.path.abspath(__file__)


@dataclass
class HostReads:
    """What :func:`count_host_reads` saw: counts per kind and per ``(kind, site)``.

    Attributes:
        kinds: kind (one of :data:`KINDS`) -> count.
        sites: ``(kind, site)`` -> count, ``site`` as ``"file.py:LINE function"``; empty with ``sites=False``.
    """

    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    sites: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)

    @property
    def total(self) -> int:
        """Every host read counted, all kinds together."""
        return sum(self.kinds.values())

    def by_site(self) -> dict[str, int]:
        """``"kind at site"`` -> count, most first."""
        return {f"{kind} at {site}": n for (kind, site), n in self.sites.most_common()}

    def summary(self) -> str:
        """One line per site (``count  kind at site``, most first), for an assertion message."""
        if not self.total:
            return "no host reads"
        if not self.sites:
            return "; ".join(f"{self.kinds[k]} {k}" for k in KINDS if self.kinds[k])
        return "\n".join(f"{n:6d}  {where}" for where, n in self.by_site().items())

    def add(self, kind: str, site: str | None) -> None:
        """Count one read of ``kind`` (at ``site`` where given)."""
        self.kinds[kind] += 1
        if site is not None:
            self.sites[kind, site] += 1


@functools.lru_cache(maxsize=4096)
def _where(filename: str) -> tuple[str, bool, bool]:
    """(the name a site shows, inside this package, inside torch) for a code object's file name."""
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if path == _HERE:
        return "", False, True  # this module's own frames count as torch's: never a site
    if path.startswith(_PACKAGE):
        return path[len(_PACKAGE) :].replace(os.sep, "/"), True, False
    return os.path.basename(path), False, path.startswith(_TORCH) or filename.startswith("<frozen")


def _site() -> str:
    """The innermost frame of simbackend's code on the stack, else the innermost frame outside torch."""
    frame: FrameType | None = inspect.currentframe()
    outside: tuple[str, FrameType] | None = None
    while frame is not None:
        name, in_package, in_torch = _where(frame.f_code.co_filename)
        if in_package:
            return f"{name}:{frame.f_lineno} {frame.f_code.co_name}"
        if outside is None and not in_torch:
            outside = (name, frame)
        frame = frame.f_back
    if outside is None:
        return "?"
    name, frame = outside
    return f"{name}:{frame.f_lineno} {frame.f_code.co_name}"


def _arg(args: tuple, kwargs: dict, pos: int, name: str, default: Any = None) -> Any:
    return kwargs[name] if name in kwargs else (args[pos] if len(args) > pos else default)


def _on_device(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type != "cpu"


def _is_mask(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


def _masked_fill_path(args: tuple, kwargs: dict) -> bool:
    """Whether ``index_put_`` takes ATen's ``masked_fill_`` shortcut (``canDispatchToMaskedFill``): no
    accumulation, a one-element CPU value, and one index, a mask on the tensor's own device."""
    self, indices, value = args[0], _arg(args, kwargs, 1, "indices", ()), _arg(args, kwargs, 2, "values")
    if _arg(args, kwargs, 3, "accumulate", False):
        return False
    if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type == "cpu"):
        return False
    given = [i for i in indices if i is not None]
    return len(given) == 1 and _is_mask(given[0]) and given[0].device == self.device


def _classify(name: str, args: tuple, kwargs: dict, cpu_tensors: bool) -> str | None:
    """The kind of host read an aten op (overload packet ``name``) makes, or None."""

    def counted(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and (cpu_tensors or t.device.type != "cpu")

    if name in _SCALAR_OPS:
        return SCALAR_READ if counted(args[0]) else None
    if name == "aten.histc":  # without a range, it reads the data's min and max on the host
        low, high = _arg(args, kwargs, 2, "min", 0), _arg(args, kwargs, 3, "max", 0)
        return SCALAR_READ if low == high and counted(args[0]) else None
    if name in _SHAPE_OPS:
        return DATA_DEPENDENT_SHAPE if counted(args[0]) else None
    if name == "aten.repeat_interleave":
        repeats = args[0] if len(args) == 1 else _arg(args, kwargs, 1, "repeats")
        if isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None and counted(repeats):
            return DATA_DEPENDENT_SHAPE
        return None
    if name == "aten.index":
        masks = [i for i in _arg(args, kwargs, 1, "indices", ()) if _is_mask(i)]
        return DATA_DEPENDENT_SHAPE if any(counted(m) for m in masks) else None
    if name in _INDEX_PUT_OPS:
        masks = [i for i in _arg(args, kwargs, 1, "indices", ()) if _is_mask(i)]
        if any(counted(m) for m in masks) and not _masked_fill_path(args, kwargs):
            return DATA_DEPENDENT_SHAPE
        return None
    if name in _COPY_OPS:
        if name == "aten._to_copy":
            src, dst = args[0], kwargs.get("device")
            to_cpu = dst is not None and torch.device(dst).type == "cpu"
        else:
            src, dst = _arg(args, kwargs, 1, "src"), args[0]
            to_cpu = isinstance(dst, torch.Tensor) and dst.device.type == "cpu"
        return COPY_TO_HOST if to_cpu and _on_device(src) else None
    return None


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops that read device values on the host."""

    def __init__(self, record: HostReads, sites: bool, cpu_tensors: bool) -> None:
        super().__init__()
        self.record, self.sites, self.cpu_tensors = record, sites, cpu_tensors

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        kind = _classify(str(func.overloadpacket), args, kwargs, self.cpu_tensors)
        if kind is not None:
            self.record.add(kind, _site() if self.sites else None)
        return func(*args, **kwargs)


_READBACK_METHODS: frozenset[Callable[..., Any]] = frozenset({torch.Tensor.cpu, torch.Tensor.tolist})


class _CallCounter(TorchFunctionMode):
    """Counts ``Tensor.cpu()`` and ``Tensor.tolist()`` of CPU tensors (no aten op sees those)."""

    def __init__(self, record: HostReads, sites: bool) -> None:
        super().__init__()
        self.record, self.sites = record, sites

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _READBACK_METHODS and args and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu":
            self.record.add(READBACK_CALL, _site() if self.sites else None)
        return func(*args, **kwargs)


@contextlib.contextmanager
def count_host_reads(*, sites: bool = True, cpu_tensors: bool = True) -> Iterator[HostReads]:
    """Count the host reads of the ops run in the block, by kind and by call site.

    Args:
        sites: record the call site of each read (a walk up the stack per read; ``False`` counts kinds only).
        cpu_tensors: count reads of CPU tensors too, and the read-back calls (``.cpu()``, ``.tolist()``)
            of CPU tensors: a CPU run's stand-in for the device (the default). ``False`` counts only
            reads of non-CPU tensors and copies to the host: the real synchronisations of a GPU run.

    Yields:
        the :class:`HostReads` record, filled while the block runs (read it after the block).
    """
    record = HostReads()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_OpCounter(record, sites, cpu_tensors))
        if cpu_tensors:
            stack.enter_context(_CallCounter(record, sites))
        yield record
