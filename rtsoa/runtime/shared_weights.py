"""SharedWeights: the weights of a model shared by the executors created in it.

(Named for what it shares: `rtsoa.InferenceSession` is the model entry, as in onnxruntime.
`Session`, its former name, still works and warns; it goes in the next version.)

What is shared, on the simulated device (said plainly):
- A `ModelHome` is one device with the model's weights on it. `load()` of the first executor
  placed on a home runs Init there once (weights uploaded into device blocks); every further
  executor on that home copies the value slots Init wrote (block handles and shape rows) into
  its own value state: the weights are referenced, not uploaded again. DeInit runs once, when
  the home's last user goes (a private home: at `unload()`; a session's: at `close()`).
- Each executor keeps its own value state (inputs, intermediates, outputs), its own device
  stream(s) and events, so executors of one home never overwrite each other's tensors.
- One home serves one run at a time (its `lock`: the device's allocator state is not
  thread-safe); runs of executors on one home overlap on the device timeline (their streams),
  not on the host. Executors on different homes (devices) run on the host concurrently (the
  compiled loops release the GIL), but cannot share weights: device memory is per device.
- `SharedWeights(max_devices=None)` gives every executor its own home (host-concurrent, weights
  uploaded once per device), which no other executor is placed on: it is closed (DeInit) and
  dropped when its executor unloads, so erasing and re-creating executors (StreamExecutor
  keys) does not pile up devices. `max_devices=k` places executors round-robin on at most k
  homes (with k=1, all share one upload), kept until `close()`.
- Lowered ONNX models have no variables (only initializers, which are constants), so there is
  no variable state to share beyond the weights.
Homes are per graph object: executors share weights when built from the same ExecuteGraph.
"""

import itertools
import threading
import warnings

from rtsoa.device import defaults, device_for_graph
from rtsoa.errors import ModelStateError, SessionStateError
from rtsoa.graph.pages import release_file_pages
from rtsoa.graph.schema import GraphKind
from rtsoa.kernels.abi import ValueState, new_values
from rtsoa.runtime.external_weights import prepare_root
from rtsoa.runtime.forks import CALLS
from rtsoa.runtime.resources import IndexPool

# Every kernel a lowered model runs: Init, Main and DeInit (and every model) share one compiled
# dispatch and loop over these.
MODEL_KERNELS = (
    "AllocMemory",
    "ConstTensor",
    "FreeMemory",
    "OpInferShape",
    "OpInferShapeKept",
    "OpLaunch",
    "RecordEvent",
    "StreamWaitEvent",
    "UploadConstant",
)
DEFAULT_HBM_BYTES = 1 << 30


def model_device(graph, hbm_bytes=None):
    """A device for a model: the graph's streams and events plus room for the streams and
    events of several executors and callers (default counts of rtsoa.device.defaults)."""
    streams = max(int(graph.meta.stream_count), 1)
    return device_for_graph(
        graph,
        hbm_bytes=hbm_bytes or DEFAULT_HBM_BYTES,
        num_streams=max(defaults.NUM_STREAMS, 2 * streams),
        num_events=max(defaults.NUM_EVENTS, 4 * streams),
    )


class ModelHome:
    """One device holding one graph's weights, shared by the executors placed on it."""

    def __init__(self, graph, device, external=()):
        self.graph = graph
        self.device = device
        # (Weight, handle) of the caller's constant memory (external_weights.py): Init skips their
        # upload and DeInit their free; their slots hold the caller's blocks
        self.external = tuple(external)
        self.lock = threading.RLock()
        self.streams = IndexPool("stream", device.num_streams)
        self.events = IndexPool("event", device.num_events)
        self.notifies = IndexPool("notify", 0)
        self.weights = None  # the value state Init wrote
        self.users = 0
        self.init_runs = 0
        self.released_bytes = 0  # constant-blob bytes Init's last run handed back (pages.py)
        self._deinit = None

    def acquire(self):
        """The value state Init wrote (running Init on first use); one more user."""
        with self.lock:
            if self.weights is None:
                values = new_values(self.graph.num_values, shapes=True)
                prepare = {"device": self.device, "values": values, "kernels": MODEL_KERNELS}
                skip_init = [node for weight, _ in self.external for node in weight.skipped_init]
                skip_deinit = [n for weight, _ in self.external for n in weight.skipped_deinit]
                init = prepare_root(self.graph, GraphKind.INIT, skip_init, **prepare)
                self._deinit = prepare_root(self.graph, GraphKind.DEINIT, skip_deinit, **prepare)
                init.run()
                for weight, handle in self.external:
                    values.slots[weight.block] = handle
                # Main runs on other streams: the uploads must be complete before it reads them
                self.device.synchronize()
                # Init was the blob's one reader: a mapped file's pages leave the resident set
                # (read back from the file if Init runs again after DeInit; graph/pages.py)
                self.released_bytes = release_file_pages(self.graph.constants)
                self.weights = values
                self.init_runs += 1
            self.users += 1
            return ValueState(slots=self.weights.slots.copy(), shapes=self.weights.shapes.copy())

    def release(self, deinit):
        """One user fewer; with `deinit` and no user left, run DeInit (weights freed)."""
        with self.lock:
            self.users -= 1
            if deinit and self.users == 0:
                self.close()

    def close(self):
        with self.lock:
            if self.weights is not None:
                self._deinit.run()
                self.weights = None
                self._deinit = None


class SharedWeights:
    """Weights shared by the executors of one model, alive until `close()` (or the end of a
    `with` block). See the module docstring for what is shared."""

    def __init__(self, max_devices=None, hbm_bytes=None):
        if max_devices is not None and int(max_devices) < 1:
            raise ValueError(f"max_devices must be >= 1 or None, got {max_devices}")
        self.max_devices = None if max_devices is None else int(max_devices)
        self.hbm_bytes = hbm_bytes
        self._homes = {}  # id(graph) -> (graph, [homes], round-robin counter)
        self._dropped_init_runs = 0  # Init runs of homes closed and dropped by `release`
        self._lock = threading.Lock()
        self.closed = False

    def home_for(self, graph):
        """The home of the next executor of `graph` in this session."""
        with CALLS, self._lock:
            if self.closed:
                raise SessionStateError("the session is closed")
            entry = self._homes.get(id(graph))
            if entry is None:
                entry = self._homes[id(graph)] = (graph, [], itertools.count())
            _, homes, counter = entry
            if self.max_devices is None or len(homes) < self.max_devices:
                homes.append(ModelHome(graph, model_device(graph, self.hbm_bytes)))
                return homes[-1]
            return homes[next(counter) % len(homes)]

    def release(self, home):
        """An executor of `home` unloaded: one user fewer. Without `max_devices` the home was
        that executor's alone, so it is closed (DeInit) and dropped with its device."""
        with CALLS, self._lock:
            home.release(deinit=False)
            if self.max_devices is not None or home.users:
                return
            entry = self._homes.get(id(home.graph))
            if entry is not None and home in entry[1]:
                entry[1].remove(home)
                if not entry[1]:
                    del self._homes[id(home.graph)]
                home.close()
                self._dropped_init_runs += home.init_runs

    def homes(self):
        with CALLS, self._lock:
            return [home for _, homes, _ in self._homes.values() for home in homes]

    @property
    def devices(self):
        return [home.device for home in self.homes()]

    @property
    def init_runs(self):
        """How many times Init ran in this session (once per device)."""
        with CALLS, self._lock:
            dropped = self._dropped_init_runs
        return dropped + sum(home.init_runs for home in self.homes())

    def close(self):
        """Run DeInit on every device (weights freed); executors of the session must be unloaded
        first (ModelStateError otherwise)."""
        with CALLS, self._lock:
            if self.closed:
                return
            busy = [home for _, homes, _ in self._homes.values() for home in homes if home.users]
            if busy:
                raise ModelStateError(
                    f"close() of a session with {sum(h.users for h in busy)} executor(s) still "
                    "loaded; unload them first"
                )
            for _, homes, _ in self._homes.values():
                for home in homes:
                    home.close()
            self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def __getattr__(name):
    if name == "Session":
        warnings.warn(
            "rtsoa.runtime.shared_weights.Session is deprecated: use SharedWeights",
            DeprecationWarning,
            stacklevel=2,
        )
        return SharedWeights
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
