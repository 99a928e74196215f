"""StreamExecutor: one ModelExecutor per stream, created on first use (the reference's 7.x).

A "stream" here is any hashable key the caller uses for a queue of requests (a thread id, a
request channel, an int). Each key gets its own loaded ModelExecutor in the StreamExecutor's
`SharedWeights`, so requests on different keys never share input / output bindings, value state or
iteration counts. Runs on one key are serialised in call order, like work on one stream.

Concurrency: with the default session (`SharedWeights()`, one device per executor) the executors of
different keys run on the host at the same time (separate devices and value states; the
compiled loops release the GIL); Init runs once per device. With `SharedWeights(max_devices=k)`
executors share k devices and their weights (uploaded once per device); runs on one device take
turns on the host and overlap on that device's streams.
"""

import threading

from rtsoa.errors import ModelStateError
from rtsoa.runtime.forks import CALLS
from rtsoa.runtime.model import ModelExecutor
from rtsoa.runtime.shared_weights import SharedWeights
from rtsoa.runtime.sources import graph_of


class StreamExecutor:
    """Get-or-create and erase per-stream executors of one model (thread-safe)."""

    def __init__(self, source, executor="auto", session=None, base_dir=None, **options):
        self.graph = graph_of(source, base_dir=base_dir)
        self.executor_name = executor
        self._own_session = session is None
        self.session = session if session is not None else SharedWeights()
        self._options = options
        self._executors = {}
        self._lock = threading.RLock()  # the reference's recursive_mutex
        self.closed = False

    def get_or_create_loaded(self, stream):
        """The loaded executor of `stream`, created and loaded on first use."""
        with CALLS, self._lock:
            if self.closed:
                raise ModelStateError("get_or_create_loaded() on a closed StreamExecutor")
            executor = self._executors.get(stream)
            if executor is None:
                executor = ModelExecutor(
                    self.graph, self.executor_name, session=self.session, **self._options
                ).load()
                self._executors[stream] = executor
            return executor

    def erase(self, stream):
        """Unload and drop the executor of `stream`; False when there was none."""
        with CALLS, self._lock:
            executor = self._executors.pop(stream, None)
        if executor is None:
            return False
        executor.unload()
        return True

    def execute(self, stream, inputs, outputs=None):
        """`execute` on the executor of `stream` (an Execution: `result()` waits)."""
        return self.get_or_create_loaded(stream).execute(inputs, outputs)

    def execute_sync(self, stream, inputs, outputs=None):
        return self.get_or_create_loaded(stream).execute_sync(inputs, outputs)

    def streams(self):
        with CALLS, self._lock:
            return list(self._executors)

    def __len__(self):
        with CALLS, self._lock:
            return len(self._executors)

    def close(self):
        """Erase every stream (and close the session when the StreamExecutor made it)."""
        with CALLS, self._lock:
            for stream in list(self._executors):
                self.erase(stream)
            self.closed = True
        if self._own_session:
            self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
