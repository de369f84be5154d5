"""simbackend.host_reads: which torch calls count as host reads, of which kind, and at which call site.

Each case is a small function below: a read is expected at the line after
its ``def``, or at the line marked ``# the read`` (``file:line function``). The ops each case reaches in the
dispatch mode (torch 2.13, CPU) are in the comments; ``t[mask] = 0`` reaches
``aten.index_put_`` but ATen lowers it to ``masked_fill_`` (no ``nonzero``), so
it is not a read. Tensors on the ``meta`` device stand in for a GPU's (a
non-CPU device on a machine without one): their copies to the CPU raise, after
the counter has seen them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import simbackend
from simbackend.host_reads import (
    COPY_TO_HOST,
    DATA_DEPENDENT_SHAPE,
    KINDS,
    READBACK_CALL,
    SCALAR_READ,
    HostReads,
    count_host_reads,
)

T = torch.arange(6.0)
M = T > 2  # three True
A, B = torch.zeros(6), torch.ones(6)
IDS = torch.tensor([1, 2])


# -- read -------------------------------------------------------------------------------------------------
def bool_of_any() -> object:  # aten.any, aten._local_scalar_dense
    return bool(M.any())


def int_of_sum() -> object:  # aten.sum, aten._local_scalar_dense
    return int(T.sum())


def item() -> object:  # aten.select, aten._local_scalar_dense
    return T[0].item()


def if_any() -> object:  # aten.any, aten._local_scalar_dense
    return 1 if M.any() else 0


def tensor_as_index() -> object:  # aten._local_scalar_dense (operator.index)
    return [0, 1, 2][IDS[0]]


def equal() -> object:  # aten.equal
    return torch.equal(A, B)


def allclose() -> object:  # aten.allclose
    return torch.allclose(A, B)


def histc() -> object:  # aten.histc without a range: the values' min and max are read
    return torch.histc(T)


def mask_index() -> object:  # aten.index.Tensor with a bool index
    return T[M]


def mask_index_2d() -> object:  # aten.index.Tensor (None, mask)
    return T.reshape(2, 3)[:, M[:3]]


def mask_put_values() -> object:  # aten.index_put_ with a bool index and a (3,) value
    t = T.clone()
    t[M] = torch.zeros(3)  # the read
    return t


def mask_put_accumulate() -> object:  # aten.index_put_(accumulate=True)
    return T.clone().index_put_((M,), torch.tensor(1.0), accumulate=True)


def nonzero() -> object:  # aten.nonzero
    return torch.nonzero(M)


def nonzero_as_tuple() -> object:  # aten.nonzero, aten.unbind
    return M.nonzero(as_tuple=True)


def where_one_arg() -> object:  # aten.nonzero, aten.unbind
    return torch.where(M)


def argwhere() -> object:  # aten.nonzero
    return torch.argwhere(M)


def masked_select() -> object:  # aten.masked_select
    return torch.masked_select(T, M)


def unique() -> object:  # aten._unique2
    return torch.unique(T)


def unique_dim() -> object:  # aten.unique_dim
    return torch.unique(T[None], dim=1)


def unique_consecutive() -> object:  # aten.unique_consecutive
    return torch.unique_consecutive(T)


def repeat_interleave() -> object:  # aten.repeat_interleave.Tensor (no output_size), aten.index_select
    return torch.repeat_interleave(T, torch.ones(6, dtype=torch.long))


def bincount() -> object:  # aten.bincount
    return torch.bincount(IDS)


def tolist() -> object:  # no aten op on the CPU: the read-back call itself
    return T.tolist()


def cpu() -> object:  # no aten op on the CPU: the read-back call itself
    return T.cpu()


COUNTED: list[tuple[Callable[[], object], str]] = [
    (bool_of_any, SCALAR_READ),
    (int_of_sum, SCALAR_READ),
    (item, SCALAR_READ),
    (if_any, SCALAR_READ),
    (tensor_as_index, SCALAR_READ),
    (equal, SCALAR_READ),
    (allclose, SCALAR_READ),
    (histc, SCALAR_READ),
    (mask_index, DATA_DEPENDENT_SHAPE),
    (mask_index_2d, DATA_DEPENDENT_SHAPE),
    (mask_put_values, DATA_DEPENDENT_SHAPE),
    (mask_put_accumulate, DATA_DEPENDENT_SHAPE),
    (nonzero, DATA_DEPENDENT_SHAPE),
    (nonzero_as_tuple, DATA_DEPENDENT_SHAPE),
    (where_one_arg, DATA_DEPENDENT_SHAPE),
    (argwhere, DATA_DEPENDENT_SHAPE),
    (masked_select, DATA_DEPENDENT_SHAPE),
    (unique, DATA_DEPENDENT_SHAPE),
    (unique_dim, DATA_DEPENDENT_SHAPE),
    (unique_consecutive, DATA_DEPENDENT_SHAPE),
    (repeat_interleave, DATA_DEPENDENT_SHAPE),
    (bincount, DATA_DEPENDENT_SHAPE),
    (tolist, READBACK_CALL),
    (cpu, READBACK_CALL),
]


# -- no read ----------------------------------------------------------------------------------------------
def where_three_args() -> object:  # aten.where.self
    return torch.where(M, A, B)


def masked_fill() -> object:  # aten.masked_fill.Scalar
    return T.masked_fill(M, 0.0)


def mask_put_scalar() -> object:  # aten.index_put_, lowered by ATen to masked_fill_ (a CPU one-element value)
    t = T.clone()
    t[M] = 0
    return t


def index_select() -> object:  # aten.index_select
    return T.index_select(0, IDS)


def nonzero_static() -> object:  # aten.nonzero_static
    return torch.nonzero_static(M, size=6)


def long_index() -> object:  # aten.index.Tensor with a long index
    return T[IDS]


def long_put() -> object:  # aten.index_put_ with a long index
    t = T.clone()
    t[IDS] = 1.0
    return t


def repeat_interleave_sized() -> object:  # aten.repeat_interleave.Tensor(output_size=6)
    return torch.repeat_interleave(T, torch.ones(6, dtype=torch.long), output_size=6)


def repeat_interleave_int() -> object:  # expand and view
    return torch.repeat_interleave(T, 2)


def dtype_cast() -> object:  # aten._to_copy without a device
    return T.to(torch.float64)


def count_nonzero() -> object:  # aten.count_nonzero: a device tensor
    return torch.count_nonzero(M)


def histc_in_range() -> object:  # aten.histc with its range given
    return torch.histc(T, bins=4, min=0.0, max=8.0)


def length() -> object:  # no op: a shape
    return len(T) + T.shape[0] + T.numel()


NOT_COUNTED = [
    where_three_args,
    masked_fill,
    mask_put_scalar,
    index_select,
    nonzero_static,
    long_index,
    long_put,
    repeat_interleave_sized,
    repeat_interleave_int,
    dtype_cast,
    count_nonzero,
    histc_in_range,
    length,
]


def _site(fn: Callable[..., object]) -> str:
    """The site a read in ``fn`` is named by: its line marked ``# the read``, else the first of its body."""
    lines, first = inspect.getsourcelines(fn)
    marked = [i for i, line in enumerate(lines) if line.rstrip().endswith("# the read")]
    return f"{Path(__file__).name}:{first + (marked[0] if marked else 1)} {fn.__name__}"


@pytest.mark.parametrize("fn,kind", COUNTED, ids=[fn.__name__ for fn, _ in COUNTED])
def test_each_host_read_is_counted_once_at_its_line(fn: Callable[[], object], kind: str) -> None:
    with count_host_reads() as reads:
        fn()
    assert reads.kinds == {kind: 1}, reads.summary()
    assert reads.total == 1
    assert reads.sites == {(kind, _site(fn)): 1}, reads.summary()


@pytest.mark.parametrize("fn", NOT_COUNTED, ids=[fn.__name__ for fn in NOT_COUNTED])
def test_device_side_ops_are_not_counted(fn: Callable[[], object]) -> None:
    with count_host_reads() as reads:
        fn()
    assert reads.total == 0 and not reads.sites, reads.summary()


def test_reads_of_cpu_tensors_are_left_out_with_cpu_tensors_false() -> None:
    """A GPU run's setting: the CPU tensors' reads are the host's own, not synchronisations."""
    with count_host_reads(cpu_tensors=False) as reads:
        for fn, _ in COUNTED:
            fn()
    assert reads.total == 0, reads.summary()


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device="meta")


def test_reads_of_device_tensors_are_counted_with_cpu_tensors_false() -> None:
    """``meta`` tensors are on a device: reading them is a read on either setting, and a copy of one to the
    CPU is a copy to host (once: ``.tolist()`` of a device tensor is its ``aten._to_copy``, not a read-back
    call too). The ops raise on meta after the counter has seen them."""
    x, m = _meta(4), _meta(4, dtype=torch.bool)
    cases = [
        (lambda: bool(x.sum()), SCALAR_READ),  # aten._local_scalar_dense
        (lambda: x.nonzero(), DATA_DEPENDENT_SHAPE),  # aten.nonzero
        (lambda: x[m], DATA_DEPENDENT_SHAPE),  # aten.index.Tensor
        (lambda: x.cpu(), COPY_TO_HOST),  # aten._to_copy(device=cpu)
        (lambda: x.to("cpu"), COPY_TO_HOST),  # aten._to_copy(device=cpu)
        (lambda: x.tolist(), COPY_TO_HOST),  # aten._to_copy(device=cpu)
        (lambda: torch.empty(4).copy_(x), COPY_TO_HOST),  # aten.copy_(cpu, meta)
    ]
    for cpu_tensors in (True, False):
        for fn, kind in cases:
            with (
                count_host_reads(cpu_tensors=cpu_tensors) as reads,
                contextlib.suppress(NotImplementedError, RuntimeError),
            ):
                fn()
            line = fn.__code__.co_firstlineno
            assert reads.sites == {(kind, f"{Path(__file__).name}:{line} <lambda>"): 1}, (line, reads.summary())
    with count_host_reads(cpu_tensors=False) as reads:
        torch.zeros(4).to("meta")  # to the device: no read
        x + 1, torch.where(m, x, x), x.masked_fill(m, 0.0)  # noqa: B018 - device ops
    assert reads.total == 0, reads.summary()


def _helper_that_reads(t: torch.Tensor) -> int:
    return int(t.sum())


def test_a_read_in_a_helper_is_named_at_the_helper() -> None:
    """The innermost frame outside torch: the helper's line, not its caller's."""
    with count_host_reads() as reads:
        _helper_that_reads(T)
        _helper_that_reads(T)
    assert reads.sites == {(SCALAR_READ, _site(_helper_that_reads)): 2}


_PACKAGE_SOURCE = """\
def read(t, callback=None):
    if callback is not None:
        return callback(t)
    return torch.unique(t)
"""


def test_a_read_in_the_package_is_named_by_the_package_frame() -> None:
    """Code of the simbackend package is named by its path under the package, and its innermost frame
    wins over deeper frames outside it (a callback the package calls) and torch's own (torch.unique is
    Python code in torch/functional.py)."""
    path = Path(simbackend.__file__).parent / "sub" / "fake_module.py"  # never written: only the code's file name
    namespace: dict = {"torch": torch}
    exec(compile(_PACKAGE_SOURCE, str(path), "exec"), namespace)
    read = namespace["read"]
    with count_host_reads() as reads:
        read(T)
        read(T, callback=_helper_that_reads)
    assert reads.sites == {
        (DATA_DEPENDENT_SHAPE, "sub/fake_module.py:4 read"): 1,
        (SCALAR_READ, "sub/fake_module.py:3 read"): 1,
    }, reads.summary()


def test_the_record() -> None:
    with count_host_reads() as reads:
        for _ in range(3):
            bool_of_any()
        nonzero()
    after = reads.total
    bool_of_any()  # outside the block: not counted
    assert after == reads.total == 4
    assert reads.kinds == {SCALAR_READ: 3, DATA_DEPENDENT_SHAPE: 1}
    assert reads.by_site() == {
        f"scalar read at {_site(bool_of_any)}": 3,
        f"data-dependent shape at {_site(nonzero)}": 1,
    }
    lines = reads.summary().splitlines()
    assert lines == [
        f"     3  scalar read at {_site(bool_of_any)}",
        f"     1  data-dependent shape at {_site(nonzero)}",
    ]
    with count_host_reads(sites=False) as kinds_only:
        bool_of_any(), tolist()
    assert kinds_only.kinds == {SCALAR_READ: 1, READBACK_CALL: 1} and not kinds_only.sites
    assert kinds_only.summary() == "1 scalar read; 1 read-back call"
    assert HostReads().summary() == "no host reads" and HostReads().total == 0
    assert set(KINDS) == {SCALAR_READ, DATA_DEPENDENT_SHAPE, COPY_TO_HOST, READBACK_CALL}


def test_blocks_nest() -> None:
    """An inner block counts its own reads; the outer one counts them too."""
    with count_host_reads() as outer:
        bool_of_any()
        with count_host_reads() as inner:
            nonzero()
    assert inner.kinds == {DATA_DEPENDENT_SHAPE: 1}
    assert outer.kinds == {SCALAR_READ: 1, DATA_DEPENDENT_SHAPE: 1}, outer.summary()
