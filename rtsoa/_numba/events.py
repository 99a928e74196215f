"""Numba's compile events (`numba.core.event`, its documented event API): `on_compile(pause,
resume)` calls `pause()` when this process starts compiling a function and `resume()` when
that compile ends (nested compiles, a callee compiled inside its caller's, count once; cache
loads are not compiles). A batch worker pauses its job's --timeout clock there, so a job is
timed for its work, not for the machine code a cold cache makes it compile.

Process-wide by nature (Numba has one event bus), but it only observes: it changes nothing
Numba does. Without the event API (a Numba that dropped it) the row reads `missing` and no
compile pauses the clock.
"""

import threading

from rtsoa._numba import compat

AVAILABLE = compat.register(
    "compile-events",
    "process",
    ["numba.core.event.register", "numba.core.event.unregister", "numba.core.event.Listener"],
    "observe compiles: a batch worker's --timeout clock pauses while Numba compiles",
    patch=False,
)

_state = {"listener": None}
_guard = threading.Lock()


def on_compile(pause, resume):
    """Call `pause()` / `resume()` around each outermost compile in this process (replacing
    what an earlier call set); None, None: stop."""
    if not AVAILABLE:
        return
    from numba.core import event

    class _Listener(event.Listener):
        def __init__(self):
            self.depth = 0

        def on_start(self, _event):
            self.depth += 1
            if self.depth == 1:
                pause()

        def on_end(self, _event):
            self.depth -= 1
            if self.depth == 0:
                resume()

    with _guard:
        if _state["listener"] is not None:
            event.unregister("numba:compile", _state["listener"])
            _state["listener"] = None
        if pause is not None:
            _state["listener"] = _Listener()
            event.register("numba:compile", _state["listener"])
