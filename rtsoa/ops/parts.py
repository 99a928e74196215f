"""Intra-op parts: one large op's work shared by the thread that launches it and helper threads.

A `PartsPool` is a control block (int64 words) and `helpers` threads that serve it. An op
registered with `parts=True` receives its entry's `mode` as its last compute argument and
splits its work into parts, each part a disjoint piece of the outputs (output channels, rows,
planes), computed by the same loops as the whole op in the same order per element:

    if is_part(mode):  # a part, on whichever thread claimed it
        phase, parts, user = task(table)
        return my_part(..., phase, part_index(mode), parts, user)
    status = run_parts(arena, table, attrs, fattrs, n_in, n_out, phase, parts, user)
    if status == NOT_SHARED:  # another op has the pool: the same parts, here
        for index in range(parts):
            status = my_part(..., phase, index, parts, user)

`run_parts` publishes the task in the pool of the operand table (`table[RESULT_ROW,
POOL_COLUMN]`, set by the executor of a session with `intra_op_threads` > 1; 0 otherwise),
then claims parts itself: every part runs through the op's entry (its address in
`table[RESULT_ROW, ENTRY_COLUMN]`, set by the launch) in MODE_PART, so an exception in a part
is a status, as in a whole op. The caller participates: a helper that is asleep or busy
costs nothing but its share, since the caller takes every part left; the caller returns once
every claimed part is done. One op owns a pool at a time (`LOCK`); an op launched meanwhile on
another thread (the multithread executor) computes the same parts one after the other on its
own thread, so an op's bits depend on its pool's size, never on who computed which part.

Claims: `CLAIM` holds generation << 32 | next part. A helper reads the task words after
seeing a generation and claims with a compare-and-swap on that word, so a claim never
succeeds for a generation other than the one whose words it read (the caller writes the next
task only after every part of the last one is done, and it starts a new generation). While
the caller writes a task's words, CLAIM is closed: the new generation with the part index
CLOSED, which no part count reaches, so a helper that saw the old generation fails its
compare-and-swap and one that sees the new one claims nothing until the task is published
(index 0). A new pool's CLAIM starts closed too: a zero word would be generation 0 open at
part 0, and a helper could claim part 0 of the first task from its half-written words.

Helpers spin while a run of one of the pool's sessions is in progress (`ACTIVE` > 0), yielding
their core after a while; with no run in progress they sleep on the ACTIVE word (a futex) that
the next run's start wakes, so an idle session costs no CPU. `PartsPool.running()` marks a
run and keeps the process's OpenBLAS on one thread meanwhile (each part's GEMM is one thread's
work; the pool is the parallelism), restoring the count when the last pooled run ends.
"""

import contextlib
import ctypes
import ctypes.util
import os
import threading
import weakref

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.extending import intrinsic
from threadpoolctl import ThreadpoolController

from rtsoa._jit import jit, jit_inline_ir, jit_inline_ir_nrt, jit_with_nrt
from rtsoa._numba.symbols import add_symbol
from rtsoa.abi.operands import ENTRY_COLUMN, MODE_PART, POOL_COLUMN, RESULT_ROW
from rtsoa.device.atomics import atomic_add, atomic_cas, atomic_load, atomic_store, cpu_yield
from rtsoa.device.bits import llvm_function
from rtsoa.ops.blas import gemm_addresses
from rtsoa.ops.call import call_entry_raw
from rtsoa.ops.registry import OPS

# the control block's words; each group a cache line of its own
WORDS = 64
HELPERS = 0  # helper threads serving the block
STOP = 1  # set: the helpers exit
ACTIVE = 2  # runs in progress on the pool's sessions (helpers spin while > 0)
LOCK = 8  # 1 while an op owns the task
CLAIM = 16  # generation << 32 | next part
DONE = 24  # parts finished in this generation
STATUS = 25  # the first nonzero status of a part of this generation
ADDRESS = 32  # the task: the op entry's address
PARTS = 33  # its part count
PHASE = 34  # what the parts compute (the op's phase)
USER = 35  # USER_WORDS words the op passes to its parts
USER_WORDS = 4
ARENA = 40  # the call's arguments: arena pointer, its bytes
ARENA_BYTES = 41
TABLE = 42  # operand table, attribute slots (int64, float64), slot count, inputs, outputs
ATTRS = 43
FATTRS = 44
COUNT = 45
N_IN = 46
N_OUT = 47
HELPED = 48  # statistics: parts helpers ran
SHARED = 49  # tasks published
LEAVE = 50  # tests: the caller claims no part before the helpers have claimed this many
SLEEPING = 51  # helpers asleep on ACTIVE (a run's start wakes them only if there are some)
SGEMM = 52  # the BLAS GEMMs' addresses, for parts of a GEMM (`rtsoa.ops.blas.gemm_at`)
DGEMM = 53
NOT_SHARED = -1  # run_parts: the caller computes the parts itself
NO_USER = (0, 0, 0, 0)  # the user words of a task that has none
MAX_PARTS = 1 << 16
MAX_THREADS = 256  # a pool's threads, the caller's included
AUTO_THREADS = 8  # the most threads `auto_threads` gives a pool
_INDEX_MASK = (1 << 32) - 1
CLOSED = _INDEX_MASK  # CLAIM's part index while no task is open for claims
_GENERATION_MASK = (1 << 31) - 1
TIMESPEC = 56  # two words: a helper's longest sleep (seconds, nanoseconds)
IDLE_WAIT_NS = 100_000_000
SPINS = 100_000  # polls (~2 ms) of an idle helper before it yields its core or sleeps


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
add_symbol("syscall", ctypes.cast(_LIBC.syscall, ctypes.c_void_p).value)
_SYS_FUTEX = 202  # x86-64 and its Linux ABI (the only platform rtsoa's helpers sleep on)
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129


@intrinsic
def _futex(typingctx, address, operation, value, timeout):
    """syscall(SYS_futex, address, operation, value, timeout): a helper's sleep on a block word
    (FUTEX_WAIT while it holds `value`, at most the timespec at `timeout`)."""
    signature = types.int64(types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        function_type = ir.FunctionType(i64, [i64], var_arg=True)
        function = llvm_function(builder.module, function_type, "syscall")
        pointer = ir.IntType(8).as_pointer()
        return builder.call(
            function,
            [
                ir.Constant(i64, _SYS_FUTEX),
                builder.inttoptr(args[0], pointer),
                builder.trunc(args[1], ir.IntType(32)),
                builder.trunc(args[2], ir.IntType(32)),
                builder.inttoptr(args[3], pointer),
            ],
        )

    return signature, codegen


@intrinsic
def _voidptr(typingctx, address):
    """The int64 `address` as a void pointer (for `carray`)."""
    signature = types.voidptr(types.int64)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return signature, codegen


@jit_inline_ir_nrt
def block_at(address):
    """The control block at `address` as an int64 array."""
    return carray(_voidptr(address), (WORDS,), np.int64)


@jit_inline_ir_nrt
def array_at(address, count, dtype):
    """`count` elements of `dtype` at `address`: scratch a caller passes to its parts as a user
    word (its `.ctypes.data`), alive until `run_parts` returns."""
    return carray(_voidptr(address), (count,), dtype)


@jit_inline_ir
def is_part(mode):
    """Is the entry's `mode` a part of a shared op (MODE_PART)?"""
    return mode & 0xFF == MODE_PART


@jit_inline_ir
def part_index(mode):
    """The part a MODE_PART call computes."""
    return mode >> 8


@jit_inline_ir_nrt
def task(table):
    """(phase, parts, user words) of the task a MODE_PART call belongs to."""
    block = block_at(table[RESULT_ROW, POOL_COLUMN])
    user = (
        atomic_load(block, USER),
        atomic_load(block, USER + 1),
        atomic_load(block, USER + 2),
        atomic_load(block, USER + 3),
    )
    return atomic_load(block, PHASE), atomic_load(block, PARTS), user


@jit_inline_ir_nrt
def helpers_of(table):
    """How many helper threads the table's pool has (0: none)."""
    address = table[RESULT_ROW, POOL_COLUMN]
    if address == 0:
        return np.int64(0)
    return atomic_load(block_at(address), HELPERS)


@jit_inline_ir_nrt
def parts_for(table, work, grain):
    """How many parts `work` (a count in any unit) is worth on the table's pool: one per
    thread, none of less than `grain`; 1 without helpers."""
    threads = helpers_of(table) + 1
    if threads < 2 or work < 2 * grain:
        return np.int64(1)
    return max(np.int64(1), min(threads, work // grain))


@jit_inline_ir_nrt
def pool_gemm(table, itemsize):
    """The address of the BLAS GEMM for elements of `itemsize` bytes (4: sgemm, 8: dgemm) the
    table's pool keeps; 0 without a pool."""
    address = table[RESULT_ROW, POOL_COLUMN]
    if address == 0:
        return np.int64(0)
    return atomic_load(block_at(address), SGEMM if itemsize == 4 else DGEMM)


@jit_with_nrt
def _run_part(block, entry, index):
    status = call_entry_raw(
        entry,
        MODE_PART | (index << 8),
        atomic_load(block, ARENA),
        atomic_load(block, ARENA_BYTES),
        atomic_load(block, TABLE),
        atomic_load(block, ATTRS),
        atomic_load(block, FATTRS),
        atomic_load(block, COUNT),
        atomic_load(block, N_IN),
        atomic_load(block, N_OUT),
    )
    if status != 0:
        atomic_cas(block, STATUS, 0, np.int64(status))


@jit_with_nrt
def run_parts(arena, table, attrs, fattrs, n_in, n_out, phase, parts, user):
    """Compute parts 0 .. parts - 1 of `phase` of the op being launched, on this thread and
    the table's pool's helpers; returns the first failing part's status (0: all succeeded),
    or NOT_SHARED without running any part when there is no pool, one part, no entry address
    or another op owns the pool. `user`: USER_WORDS int64 words its parts read (`task`)."""
    address = table[RESULT_ROW, POOL_COLUMN]
    entry = table[RESULT_ROW, ENTRY_COLUMN]
    if address == 0 or entry == 0 or parts < 2 or parts > MAX_PARTS:
        return np.int64(NOT_SHARED)
    block = block_at(address)
    if atomic_load(block, HELPERS) == 0 or atomic_load(block, STOP) != 0:
        return np.int64(NOT_SHARED)
    if atomic_cas(block, LOCK, 0, 1) != 0:
        return np.int64(NOT_SHARED)
    generation = ((atomic_load(block, CLAIM) >> 32) + 1) & _GENERATION_MASK
    atomic_store(block, CLAIM, generation << 32 | CLOSED)  # no claim while the words change
    atomic_store(block, ADDRESS, entry)
    atomic_store(block, PARTS, parts)
    atomic_store(block, PHASE, phase)
    for k in range(USER_WORDS):
        atomic_store(block, USER + k, user[k])
    atomic_store(block, ARENA, arena.ctypes.data)
    atomic_store(block, ARENA_BYTES, arena.shape[0])
    atomic_store(block, TABLE, table.ctypes.data)
    atomic_store(block, ATTRS, attrs.ctypes.data)
    atomic_store(block, FATTRS, fattrs.ctypes.data)
    atomic_store(block, COUNT, attrs.shape[0])
    atomic_store(block, N_IN, n_in)
    atomic_store(block, N_OUT, n_out)
    atomic_store(block, DONE, 0)
    atomic_store(block, STATUS, 0)
    atomic_add(block, SHARED, 1)
    atomic_store(block, CLAIM, generation << 32)  # published: helpers may claim from here
    leave = min(atomic_load(block, LEAVE), parts)
    while atomic_load(block, CLAIM) & _INDEX_MASK < leave:  # (a test's: helpers go first)
        if atomic_load(block, STOP) != 0:  # no helper left to claim them
            break
        cpu_yield()
    while True:
        index = atomic_add(block, CLAIM, 1) & _INDEX_MASK
        if index >= parts:
            break
        _run_part(block, entry, index)
        atomic_add(block, DONE, 1)
    spins = 0
    while atomic_load(block, DONE) < parts:  # a helper finishing the part it claimed
        spins += 1
        if spins >= 64:
            cpu_yield()
            spins = 0
    status = atomic_load(block, STATUS)
    atomic_store(block, LOCK, 0)
    return status


@jit_inline_ir_nrt
def share_items(arena, table, attrs, fattrs, n_in, n_out, mode, items, work, grain, may_split):
    """For an op split by whole items (channels, planes) in phase 0: the items [first, end)
    this call computes. A part (`mode`) computes its share; any other call shares the items
    across the pool when `may_split`, there are several and `work` is worth several parts of
    `grain` (`parts_for`), and computes them all when it cannot. Returns (status, first,
    end): status NOT_SHARED means compute [first, end) here; any other is the parts' status,
    for the op to return (the parts ran)."""
    if is_part(mode):
        parts, index = task(table)[1], part_index(mode)
        return np.int64(NOT_SHARED), index * items // parts, (index + 1) * items // parts
    if may_split and items > 1:
        parts = min(parts_for(table, work, grain), items)
        if parts > 1:
            status = run_parts(arena, table, attrs, fattrs, n_in, n_out, 0, parts, NO_USER)
            if status != NOT_SHARED:
                return np.int64(status), np.int64(0), np.int64(0)
    return np.int64(NOT_SHARED), np.int64(0), np.int64(items)


@jit
def _serve(block):
    """A helper thread's loop: claim parts of the block's tasks until STOP. Idle in a run, it
    polls (yielding its core after SPINS polls); with no run in progress it sleeps on the
    ACTIVE word (a futex), which a run's start wakes, at most IDLE_WAIT_NS at a time."""
    idle = 0
    words = block.ctypes.data
    while atomic_load(block, STOP) == 0:
        claim = atomic_load(block, CLAIM)
        index = claim & _INDEX_MASK
        if index < atomic_load(block, PARTS):
            entry = atomic_load(block, ADDRESS)
            if atomic_cas(block, CLAIM, claim, claim + 1) == claim:
                _run_part(block, entry, index)
                atomic_add(block, HELPED, 1)
                atomic_add(block, DONE, 1)
                idle = 0
            continue
        idle += 1
        if idle < SPINS:
            continue
        if atomic_load(block, ACTIVE) > 0:
            cpu_yield()
        else:
            atomic_add(block, SLEEPING, 1)
            if atomic_load(block, ACTIVE) == 0:  # (a run that started meanwhile saw SLEEPING)
                _futex(words + 8 * ACTIVE, _FUTEX_WAIT_PRIVATE, 0, words + 8 * TIMESPEC)
            atomic_add(block, SLEEPING, -1)
            idle = 0  # awake: a run may be starting, poll without yielding for a while
    return 0


def threads_problem(threads):
    """What makes `threads` no thread count of a pool (None: nothing): the one check of
    `PartsPool`, `SessionOptions.intra_op_threads` and `ModelExecutor(intra_op_threads=)`."""
    if isinstance(threads, bool) or not isinstance(threads, int | np.integer):
        return f"an int, got {type(threads).__name__}"
    if not 1 <= threads <= MAX_THREADS:
        return f"1 .. {MAX_THREADS}, got {threads}"
    return None


def parts_ops():
    """The names of the ops that share their parts (registered with parts=True)."""
    return frozenset(name for name, definition in OPS.items() if definition.parts)


def auto_threads(op_names):
    """The pool size a model launching ops `op_names` gets by default: one thread per core
    this process may run on (at most AUTO_THREADS) when one of them shares its parts, else 1
    (no pool: its ops and the BLAS as they are)."""
    if not parts_ops() & set(op_names):
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), AUTO_THREADS))


_blas_lock = threading.Lock()
_blas_state = {"runs": 0, "saved": None, "libraries": None}
# what OpenBLAS builds call their thread-count functions (SciPy's and NumPy's wheels prefix
# them, the 64-bit-integer builds add a suffix)
_OPENBLAS_NAMES = [
    (f"{prefix}openblas_{{}}_num_threads{suffix}")
    for prefix in ("scipy_", "")
    for suffix in ("64_", "")
]


def _blas_libraries():
    """[(get, set)] of the process's BLAS thread counts. OpenBLAS is called directly: its
    count is one per process, and threadpoolctl leaves it to the first thread that set it (a
    run on another thread would not pin it); other BLAS libraries through threadpoolctl."""
    # the BLAS Numba's np.dot calls (SciPy's), which Numba loads at a process's first GEMM:
    # loaded here, when a pooled run first needs it (importing scipy.linalg costs 0.3 s)
    import scipy.linalg.cython_blas  # noqa: F401

    found = []
    for library in ThreadpoolController().select(user_api="blas").lib_controllers:
        if library.internal_api == "openblas":
            handle = ctypes.CDLL(library.filepath)
            for name in _OPENBLAS_NAMES:
                getter = getattr(handle, name.format("get"), None)
                setter = getattr(handle, name.format("set"), None)
                if getter is not None and setter is not None:
                    setter.argtypes = [ctypes.c_int]
                    found.append((getter, setter))
                    break
        else:
            found.append((lambda lib=library: lib.num_threads, library.set_num_threads))
    return found


def _blas_enter():
    """One pooled run more: the first pins the process's BLAS libraries to one thread."""
    with _blas_lock:
        state = _blas_state
        if state["runs"] == 0:
            if state["libraries"] is None:
                state["libraries"] = _blas_libraries()
            state["saved"] = [(setter, getter()) for getter, setter in state["libraries"]]
            for setter, threads in state["saved"]:
                if threads != 1:
                    setter(1)
        state["runs"] += 1


def _blas_exit():
    with _blas_lock:
        state = _blas_state
        state["runs"] -= 1
        if state["runs"] == 0:
            for setter, threads in state["saved"]:
                if threads != 1:
                    setter(threads)
            state["saved"] = None


def _stop(block, threads):
    block[STOP] = 1
    block[ACTIVE] += 1  # sleepers wake within IDLE_WAIT_NS at most; wake them now
    _LIBC.syscall(
        _SYS_FUTEX, ctypes.c_void_p(block.ctypes.data + 8 * ACTIVE), _FUTEX_WAKE_PRIVATE,
        len(threads), None,
    )  # fmt: skip
    for thread in threads:
        thread.join()
    block[HELPERS] = 0


class PartsPool:
    """`threads` - 1 helper threads sharing the large ops of the sessions that use this pool
    (`address` goes into their executors' operand tables). `threads` 1: no helper (ops run
    whole). `close()` stops the helpers (also when the pool is garbage-collected)."""

    def __init__(self, threads):
        problem = threads_problem(threads)
        if problem is not None:
            raise ValueError(f"PartsPool: threads: {problem}")
        self.threads = int(threads)
        raw = np.zeros(WORDS + 8, dtype=np.int64)  # on a cache line of its own
        start = (-raw.ctypes.data % 64) // 8
        self.block = raw[start : start + WORDS]
        self.block[TIMESPEC + 1] = IDLE_WAIT_NS
        self.block[CLAIM] = CLOSED  # (generation 0, no task: see the module docstring)
        if self.threads > 1:
            self.block[SGEMM], self.block[DGEMM] = gemm_addresses()
        self._helpers = []
        for _ in range(self.threads - 1):
            thread = threading.Thread(
                target=_serve, args=(self.block,), name="rtsoa-parts", daemon=True
            )
            thread.start()
            self._helpers.append(thread)
        self.block[HELPERS] = len(self._helpers)
        self._finalizer = weakref.finalize(self, _stop, self.block, self._helpers)

    @property
    def address(self):
        """The block's address, for `table[RESULT_ROW, POOL_COLUMN]` (0 without helpers)."""
        return int(self.block.ctypes.data) if self._helpers and not self.closed else 0

    @property
    def closed(self):
        return not self._finalizer.alive

    @property
    def helped(self):
        """Parts the helpers have computed so far."""
        return int(self.block[HELPED])

    def leave_to_helpers(self, parts):
        """Tests: each shared task's first `parts` parts are claimed by helpers, the caller
        waiting for them, so a test sees helpers compute deterministically."""
        self.block[LEAVE] = int(parts)

    @property
    def shared(self):
        """Tasks (op phases) shared so far."""
        return int(self.block[SHARED])

    @contextlib.contextmanager
    def running(self):
        """One run of a session on this pool: helpers spin, BLAS on one thread."""
        if not self._helpers or self.closed:
            yield
            return
        _blas_enter()
        with _active_lock:
            self.block[ACTIVE] += 1
        if self.block[SLEEPING] > 0:
            self._wake()
        try:
            yield
        finally:
            with _active_lock:
                self.block[ACTIVE] -= 1
            _blas_exit()

    def _wake(self):
        """Wake the helpers sleeping on the ACTIVE word."""
        _LIBC.syscall(
            _SYS_FUTEX, ctypes.c_void_p(self.block.ctypes.data + 8 * ACTIVE),
            _FUTEX_WAKE_PRIVATE, len(self._helpers), None,
        )  # fmt: skip

    def close(self):
        """Stop the helper threads (waits for them); ops of its sessions then run whole."""
        self._finalizer()


_active_lock = threading.Lock()
