"""A whole RL step on a CUDA graph: captured once, replayed at every step.

At a few thousand envs a GPU step is short enough that launching its kernels
one by one from Python is much of its cost. :class:`CapturedStep` captures
one RL step of a :class:`~simbackend.tasks.Task` — ``Task.step(action)``
(controller, physics, observations, rewards, terminations) and the reset of
the envs whose episode ended (``Task.reset(done)``, by mask) — in a
``torch.cuda.graph`` and replays it: one launch per step, the engine's kernels
included (an engine that declares ``capabilities.cuda_graphs`` launches them on
the capturing stream).

Capture needs a step that reads nothing back from the device and allocates
only from torch's graph pool: a CUDA backend with deferred checks
(``SimBackend.deferred_checks``, docs/conventions.md "Host reads"), an engine
declaring ``cuda_graphs``, a task without host-side randomization (reset or
interval terms), and no observer (a recorder runs Python at every step).
Otherwise, or when the capture itself fails, the object steps eagerly, the
same calls without a graph, and :attr:`CapturedStep.reason` says why. Either
way it is called the same way and gives the same episodes.

What a replay does not do: run Python. So input errors found on the device
(NaN actions reaching the backend as NaN ctrl) are recorded but raised only by
:meth:`CapturedStep.synchronize` (one host read: call it once per iteration,
outside the rollout); ``info["timing"]`` holds the capture's values; and the
returned tensors are the graph's own buffers, overwritten by the next call
(clone what you keep).
"""

from __future__ import annotations

from typing import Any

import torch

from simbackend import _validate as V
from simbackend import checks
from simbackend.errors import ArgumentTypeError
from simbackend.tasks import Task

__all__ = ["CapturedStep", "capture_blockers"]


def capture_blockers(task: Any) -> list[str]:
    """Why ``task``'s step cannot be captured in a CUDA graph (empty: it can be tried)."""
    backend = task.backend
    reasons = []
    if torch.device(task.device).type != "cuda":
        reasons.append(f"the backend runs on {str(task.device)!r}, not on a CUDA device")
    if not getattr(backend, "deferred_checks", False):
        reasons.append("the backend checks input values at once (a host read at every step)")
    if not getattr(backend.capabilities, "cuda_graphs", False):
        reasons.append(f"engine {backend.name!r} does not declare cuda_graphs")
    plan = getattr(task, "plan", None)
    if plan is not None and (plan.phase_terms("reset") or plan.phase_terms("interval")):
        reasons.append("the randomization plan draws reset or interval terms on the host")
    if getattr(backend, "observers", ()):
        reasons.append("an observer (a recorder) runs Python at every step")
    return reasons


class CapturedStep:
    """``Task.step(action)`` and ``Task.reset(done)`` of the envs whose episode ended, as one call, replayed
    from a CUDA graph where the task allows it (see the module docstring).

    Args:
        task: the task (its backend on a CUDA device, with deferred checks).
        warmup: eager steps before the capture (zero action): kernels compiled, buffers allocated.
            They are real steps of every env.
        capture: ``False`` steps eagerly whatever the task allows.

    Attributes:
        task: the task.
        reason: why the step runs eagerly, or ``None`` when it replays a graph.
    """

    def __init__(self, task: Any, *, warmup: int = 3, capture: bool = True):
        if not isinstance(task, Task):  # every argument checked before anything runs
            raise ArgumentTypeError(
                f"task: expected a Task (simbackend.tasks.make_task; a backend is stepped by its task),"
                f" got {type(task).__name__}"
            )
        warmup = V.positive_int(warmup, "warmup")  # bad arguments raise; only the capture's failure is a reason
        capture = checks.boolean(capture, "capture")
        self.task = task
        self.num_envs, self.action_dim, self.device = task.num_envs, task.action_dim, task.device
        blockers = capture_blockers(task) if capture else ["capture=False"]
        self.reason: str | None = "; ".join(blockers) or None
        self._graph: Any = None
        self._action: torch.Tensor | None = None
        self._out: Any = None
        if self.reason is None:
            try:
                self._capture(warmup)
            except Exception as e:  # noqa: BLE001 - any failure: eager steps, and the reason says which
                self._graph = None
                self.reason = f"the capture failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"

    @property
    def captured(self) -> bool:
        """Whether calls replay a CUDA graph."""
        return self._graph is not None

    def _eager(self, action: torch.Tensor) -> Any:
        out = self.task.step(action)
        done = out.terminated | out.truncated
        obs = self.task.reset(done)
        info = dict(out.info)
        info["done"] = done
        return type(out)(obs, out.reward, out.terminated, out.truncated, info)

    def _capture(self, warmup: int) -> None:
        self.task.backend.synchronize()  # an error deferred before: raised now, not inside the capture
        self._action = torch.zeros((self.num_envs, self.action_dim), dtype=torch.float32, device=self.device)
        for _ in range(warmup):
            self._eager(self._action)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._out = self._eager(self._action)
        self._graph = graph

    def __call__(self, action: Any) -> Any:
        """One RL step: a :class:`~simbackend.tasks.TaskStep` whose ``obs`` is the observation after the
        resets (the next policy input) and whose ``info["done"]`` is ``terminated | truncated`` (the envs
        reset); ``reward``, ``terminated``, ``truncated`` and the rest of ``info`` are ``Task.step``'s."""
        if self._graph is None:
            return self._eager(action)
        assert self._action is not None
        a = V.real_tensor(action, "action", (self.num_envs, self.action_dim), device=self.device, dtype=torch.float32)
        self._action.copy_(a)
        self._graph.replay()
        return self._out

    def synchronize(self) -> None:
        """Wait for the device and raise any input error the replays recorded (one host read)."""
        self.task.backend.synchronize()

    def __repr__(self) -> str:
        state = "captured" if self.captured else f"eager ({self.reason})"
        return f"CapturedStep({self.task!r}, {state})"
