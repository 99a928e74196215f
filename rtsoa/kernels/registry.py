"""The kernel registry: kernels by name, with their metadata, bound to graphs at load.

A kernel is an njit function `run(rt, node) -> int32 status` (rt: `rtsoa.kernels.Runtime`),
defined at module level in an importable module, registered with the `kernel` decorator:

    @kernel("Add", worker="launch", requires={"inputs": 2, "outputs": 1})
    def add(rt, node):
        ...
        return np.int32(0)

A family of kernels that differ only in constants shares one function: registered with
`constants=(...)`, the function is `run(rt, node, *constants)` and is compiled once for all of
them (the sixteen built-in `ChecksumK` kernels are one function and sixteen salts):

    def scale(rt, node, factor):
        ...

    for k, factor in enumerate((1, 2, 4)):  # keep the jitted function: every name shares it
        scale = kernel(f"Scale{k}", constants=(np.int64(factor),))(scale)

The generated dispatch (`rtsoa.kernels.dispatch`) imports every kernel by module and attribute
name, so user kernels work exactly like the built-ins. A kernel's dispatch id is its position in
the registry's names sorted, so ids do not depend on the order modules were imported in.
"""

import re
import sys
from typing import NamedTuple

import numpy as np

from rtsoa._jit import jit_internal
from rtsoa._numba.dispatcher import is_dispatcher
from rtsoa.abi.registry import Registry
from rtsoa.errors import KernelDefinitionError, UnknownKernelError
from rtsoa.graph.schema import WorkerClass
from rtsoa.kernels.conformance import check_kernels

_WORKERS = {
    "normal": WorkerClass.NORMAL,
    "memory": WorkerClass.MEMORY,
    "launch": WorkerClass.LAUNCH,
}
_REQUIREMENTS = ("inputs", "outputs", "attributes", "successors")  # columns of requires
# Kernel names: identifiers, optionally dotted ("Add", "custom.Add"); they reach generated
# source, traces and error messages, so nothing else (no quotes, spaces or newlines).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_NAME_LENGTH = 128
# Critical-section keys: kernels with the same non-zero code never run at the same time.
CRITICAL_SECTIONS = {None: 0, "memory": 1, "launch": 2}


class KernelTables(NamedTuple):
    """Registry metadata as arrays indexed by dispatch id (see `KernelRegistry.tables`)."""

    requires: np.ndarray
    worker: np.ndarray
    critical_section: np.ndarray
    control_flow: np.ndarray
    ends_sequence: np.ndarray
    locks_device: np.ndarray


class KernelInfo(NamedTuple):
    """One registry entry."""

    name: str
    function: object  # the njit dispatcher
    module: str  # importable module defining it
    attribute: str  # module-level name of the function
    worker: WorkerClass  # which worker of the multi-thread executor runs it
    critical_section: str | None  # "memory" / "launch" / None (reference's critical-section key)
    outputs: object  # outputs creator: callable(builder, node, **options) -> value ids, or None
    trace: object  # trace printer: callable(graph, node) -> str, or None
    requires: dict  # minimum inputs / outputs / attributes / successors, checked at load
    control_flow: bool  # switch / pivot / loop kernels: the graph needs a queue executor
    ends_sequence: bool  # may return STATUS_END_OF_SEQUENCE (obeyed from no other kernel)
    constants: tuple = ()  # numpy scalars passed after (rt, node): run(rt, node, *constants)
    # it takes the device lock itself around its device calls (`rtsoa.device.lock`), so a
    # multithread run runs it outside the lock: its computation beside other launches
    locks_device: bool = False


_CONSTANT_TYPES = (np.int64, np.uint64, np.float64)


def _constants(name, constants):
    """`constants` as a tuple of numpy int64 / uint64 / float64 scalars (ValueError naming the
    kernel and the position of the first that is none of these or out of its range)."""
    if isinstance(constants, (str, bytes)) or not isinstance(constants, (tuple, list)):
        raise ValueError(f"kernel {name!r}: constants must be a tuple, got {constants!r}")
    result = []
    for position, value in enumerate(constants):
        if isinstance(value, _CONSTANT_TYPES):
            result.append(value)
        elif isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
            result.append(np.int64(value))
        elif isinstance(value, float):
            result.append(np.float64(value))
        else:
            raise ValueError(
                f"kernel {name!r}: constant {position} ({value!r}) is not an int64, uint64 "
                "or float64 value"
            )
    return tuple(result)


def default_trace(graph, node):
    """`Name(node=3, attrs=[...])`: the fallback trace printer."""
    attrs = ", ".join(str(int(a)) for a in graph.attributes(node))
    return f"{graph.kernel_name(node)}(node={node}, attrs=[{attrs}])"


_UNKNOWN_HINT = (
    "register them with @rtsoa.kernels.kernel(...) in a module imported before loading the graph"
)


class KernelRegistry(Registry):
    """Name -> KernelInfo (`rtsoa.abi.registry.Registry`); a kernel's dispatch id is its
    position in the sorted names."""

    def __init__(self):
        super().__init__("kernel", UnknownKernelError, _UNKNOWN_HINT)
        self._dependencies = []
        self._sorted = ()
        self._tables = None

    def _changed(self):
        super()._changed()  # bumps `version`, which memoized dispatch keys use
        self._sorted = tuple(self[name] for name in self.names())
        self._tables = None

    def tables(self):
        """Per dispatch id, as arrays for vectorized and jitted use at prepare (memoized):
        `requires` int64[k, 4] (inputs, outputs, attributes, successors), `worker` int8
        (WorkerClass), `critical_section` int8 (CRITICAL_SECTIONS code, which the multi-thread
        executor serialises on), `control_flow` bool, `ends_sequence` bool, `locks_device` bool
        (the kernel holds the device lock itself, only around its device calls)."""
        if self._tables is None:
            entries = self._sorted
            self._tables = KernelTables(
                requires=np.array(
                    [[info.requires[key] for key in _REQUIREMENTS] for info in entries],
                    dtype=np.int64,
                ).reshape(len(entries), len(_REQUIREMENTS)),
                worker=np.array([int(info.worker) for info in entries], dtype=np.int8),
                critical_section=np.array(
                    [CRITICAL_SECTIONS[info.critical_section] for info in entries], dtype=np.int8
                ),
                control_flow=np.array([info.control_flow for info in entries], dtype=bool),
                ends_sequence=np.array([info.ends_sequence for info in entries], dtype=bool),
                locks_device=np.array([info.locks_device for info in entries], dtype=bool),
            )
        return self._tables

    def depends_on(self, *modules):
        """Hash these modules' sources too (helpers in modules that define no kernel)."""
        for module in modules:
            name = module if isinstance(module, str) else module.__name__
            if name not in self._dependencies:
                self._dependencies.append(name)
                self.version += 1

    def dependencies(self):
        """Module names, besides the kernels' own, whose source the dispatch cache key covers."""
        return tuple(self._dependencies)

    def register(
        self,
        name,
        function,
        worker="normal",
        critical_section=None,
        outputs=None,
        trace=None,
        requires=None,
        control_flow=False,
        ends_sequence=False,
        constants=(),
        locks_device=False,
    ):
        """Add (or re-register from the same place) a kernel; returns its KernelInfo.

        `constants`: int64 / uint64 / float64 values (numpy scalars; a Python int is taken as
        int64, a float as float64) the dispatch passes after (rt, node). Kernels that share a
        function and the constants' types share one compile.

        The name must be identifier-like (KernelDefinitionError otherwise); the kernel's types
        (int32 status, no undeclared allocation) are checked at the first prepare that uses
        it (`check_kernels`). Reserved statuses are obeyed only from kernels registered for
        them: `notify(k)` from `control_flow` kernels, STATUS_END_OF_SEQUENCE from
        `ends_sequence` ones; from any other kernel they stop the run as failures.

        `locks_device=True` (a kernel with a critical section only): the kernel wraps every
        device call in `rtsoa.device.lock.device_enter` / `device_exit` itself, so the
        multithread executor does not hold the device lock around the whole kernel.
        """
        check_name(name)
        if not is_dispatcher(function):
            raise TypeError(f"kernel {name!r} must be an njit function, got {type(function)}")
        if worker not in _WORKERS:
            raise ValueError(f"kernel {name!r}: worker must be one of {sorted(_WORKERS)}")
        if critical_section not in CRITICAL_SECTIONS:
            raise ValueError(f"kernel {name!r}: critical_section must be None, memory or launch")
        if locks_device and critical_section is None:
            raise ValueError(f"kernel {name!r}: locks_device needs a critical_section")
        requires = dict(requires or {})
        unknown = sorted(set(requires) - set(_REQUIREMENTS))
        if unknown:
            raise ValueError(f"kernel {name!r}: unknown requirement(s) {unknown}")
        constants = _constants(name, constants)
        py_func = function.py_func
        info = KernelInfo(
            name=str(name),
            function=function,
            module=py_func.__module__,
            attribute=py_func.__name__,
            worker=_WORKERS[worker],
            critical_section=critical_section,
            outputs=outputs,
            trace=trace or default_trace,
            requires={key: int(requires.get(key, 0)) for key in _REQUIREMENTS},
            control_flow=bool(control_flow),
            ends_sequence=bool(ends_sequence),
            constants=constants,
            locks_device=bool(locks_device),
        )
        if "<locals>" in py_func.__qualname__:
            raise ValueError(f"kernel {name!r} must be a module-level function")
        old = self.get(info.name)
        if old is not None and (old.module, old.attribute) != (info.module, info.attribute):
            raise ValueError(
                f"kernel {name!r} is already registered by {old.module}.{old.attribute}"
            )
        return self.add(info.name, info, replace=True)

    def check_kernels(self, runtime, used=None):
        """Check the kernels a graph's dispatch module holds (dispatch ids `used`, None: all)
        type as int32 for `runtime` and allocate only when registered to; once per dispatch
        key and machine. KernelDefinitionError names the first that does not (see
        `rtsoa.kernels.conformance`)."""
        check_kernels(self, runtime, used)

    def add_node(self, builder, name, output_options=None, **fields):
        """Add a node running kernel `name` to `builder` (`fields` as for
        `GraphBuilder.add_node`) and create its output values with the kernel's outputs
        creator, given `output_options`; returns (node, output value ids)."""
        info = self[name]
        node = builder.add_node(name, **fields)
        if info.outputs is None:
            return node, []
        return node, list(info.outputs(builder, node, **(output_options or {})))

    def unregister(self, name):
        """Remove a kernel (tests); kernels sorted after it shift their dispatch ids."""
        self.remove(name)

    def entries(self):
        """The KernelInfo tuple in dispatch-id order (sorted by name)."""
        return self._sorted

    def check_importable(self):
        """Every kernel must be reachable as module.attribute (the dispatch imports it so)."""
        for info in self.values():
            module = sys.modules.get(info.module)
            if module is None or info.module == "__main__":
                raise ValueError(
                    f"kernel {info.name!r} is defined in {info.module!r}, which the generated "
                    "dispatch cannot import; define kernels in an importable module"
                )
            if getattr(module, info.attribute, None) is not info.function:
                raise ValueError(
                    f"kernel {info.name!r}: {info.module}.{info.attribute} is not the registered "
                    "function (kernels must be module-level and keep their name)"
                )


def check_name(name):
    """KernelDefinitionError unless `name` is an identifier-like kernel name."""
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        raise KernelDefinitionError(
            f"bad kernel name {name!r}: use letters, digits and underscores, not starting with a "
            f"digit, optionally dotted ('Add', 'custom.Add'), at most {MAX_NAME_LENGTH} characters"
        )


REGISTRY = KernelRegistry()


def kernel(
    name,
    worker="normal",
    critical_section=None,
    outputs=None,
    trace=None,
    requires=None,
    control_flow=False,
    registry=None,
    allocates=False,
    ends_sequence=False,
    constants=(),
    locks_device=False,
):
    """Decorator: jit `run(rt, node) -> int32` (unless already jitted) and register it
    (`run(rt, node, *constants)` with `constants`, see the module docstring).

    Kernels are compiled without Numba's reference-counting runtime (NRT) unless
    `allocates=True`: with NRT every call increfs and decrefs each array of the runtime tuple,
    which with the device's arrays in it costs ~50x the kernel itself. A kernel that creates
    arrays (np.empty, ...) must say `allocates=True`; reading, writing and slicing do not count.
    An already-jitted function keeps the options it was compiled with. `control_flow=True`
    lets the kernel's `notify(k)` be obeyed, `ends_sequence=True` its STATUS_END_OF_SEQUENCE,
    `locks_device=True` holds the device lock only around its device calls (see
    `KernelRegistry.register`).
    """

    def decorate(function):
        if not is_dispatcher(function):
            # Not disk-cached on its own: a kernel's cache file would only notice edits to its
            # own module, not to helpers it inlines. The generated dispatch caches the compiled
            # kernel inside each loop, under a key that hashes every kernel module. Only loops
            # call kernels, so no CPython wrapper (most of a kernel's own compile time).
            # Inlined into the dispatch (alwaysinline): a kernel LLVM left out of line was a
            # real call taking the runtime tuple by value, ~430 stack words pushed per call
            # (seen in the machine code of the sequential loop on a lowered model: most of
            # its time per OpLaunch, AllocMemory and FreeMemory).
            function = jit_internal(function, cache=False, _nrt=bool(allocates), forceinline=True)
        (registry if registry is not None else REGISTRY).register(
            name,
            function,
            worker=worker,
            critical_section=critical_section,
            outputs=outputs,
            trace=trace,
            requires=requires,
            control_flow=control_flow,
            ends_sequence=ends_sequence,
            constants=constants,
            locks_device=locks_device,
        )
        return function

    return decorate
