"""Ctrl-C held over a block that must not be cut in two, and delivered after it.

A ``KeyboardInterrupt`` can surface between any two bytecodes of the main
thread. Most of the front end does not care: a step is undone as a whole when
it raises. A few blocks must run to their end once started, or the state and
what the getters say part ways: sending a call to every shard and recording
their answers (:mod:`simbackend.sharding.engine`), and putting every env back
after an interrupted step. :class:`HeldInterrupt` holds SIGINT over such a
block; the block may look at :meth:`HeldInterrupt.take` to answer it early at
a point of its choosing, and whatever it did not take is delivered when the
block ends, as the handler that was in place would have delivered it;
:meth:`HeldInterrupt.deliver` hands it over earlier, at a point the block
chooses, so that a program's own SIGINT handler (one that notes the request
and lets the call finish) keeps its meaning.

Only the main thread receives SIGINT, so elsewhere the block runs unchanged.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any


class HeldInterrupt:
    """``with HeldInterrupt() as held:`` SIGINT is recorded, not raised, until the block ends.

    ``held.take()`` says whether one arrived since the last ``take`` (and forgets
    it); an interrupt not taken is delivered on exit through the handler that was
    installed before (Python's default raises ``KeyboardInterrupt``). Nested blocks
    pass a held interrupt outwards. Costs two ``signal.signal`` calls.
    """

    __slots__ = ("_old", "_pending", "_active")

    def __init__(self) -> None:
        self._old: Any = None
        self._pending = False
        self._active = False

    def __enter__(self) -> HeldInterrupt:
        self._pending = False
        if threading.current_thread() is not threading.main_thread():
            return self  # SIGINT only ever reaches the main thread
        old = signal.getsignal(signal.SIGINT)
        if old in (signal.SIG_IGN, None):  # ignored, or installed outside Python: nothing to hold
            return self
        self._old = old
        signal.signal(signal.SIGINT, self._hold)
        self._active = True
        return self

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self._pending = True

    def take(self) -> bool:
        """Whether SIGINT arrived since the block began or since the last ``take``; forgets it."""
        pending, self._pending = self._pending, False
        return pending

    def deliver(self) -> None:
        """Hand a held SIGINT, if one arrived, to the handler that was in place, now: it decides, as it
        would have without the block (Python's default raises ``KeyboardInterrupt`` here; a handler of the
        program's own may only note it and return)."""
        if self._active and self.take():
            self._forward(self._old)

    @staticmethod
    def _forward(old: Any) -> None:
        if old is signal.SIG_DFL:  # the process's own default: end it as the signal would have
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.raise_signal(signal.SIGINT)
        elif callable(old):
            old(signal.SIGINT, None)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not self._active:
            return
        self._active = False
        old, self._old = self._old, None
        signal.signal(signal.SIGINT, old)
        if self.take():
            self._forward(old)  # Python's default handler raises KeyboardInterrupt here
