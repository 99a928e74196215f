"""The semantic fuzzer: random small graphs of every built-in kernel, run by every executor in a
worker process, must be refused at load, fail with a typed error, or give the same nodes and
checksum on every executor; never a signal or a hang.

Hypothesis draws a recipe of nodes (checksum, busy, fail with any int64 status, end of
sequence, integer and control-flow kernels, the device-backed kernels with random attributes,
raw switches with random successors), edges, wait-anyone flags, priorities, streams, optional
If / While constructs and `has_loops`. Inputs are wired race-free: a consumer is ordered after
its value's producer and after the value's free, and a free after every earlier use (rtsoa
does not yet refuse racy graphs at load; see docs/guarantees.md). Allocation sizes and
launch costs cover the whole int64 range: sizes are either small enough that no order runs out
of memory or above the arena (refused in every order), costs any int64 (negative ones are
refused). Fail draws the reserved statuses too: a run may end "end" only when the graph holds
a kernel registered to end a sequence.

The multithread executor runs each graph on 1 (refused), 2, 4 and 8 threads: from 4 threads
a class queue has two workers (the shared-queue path), 8 are more than the cores.

The worker (`semantic_worker.py`) runs in a subprocess so that a segfault fails one example
instead of the suite; each case has a timeout. Cases: FUZZ_CASES (default 800; more with
`pytest -m large`, which runs 20,000).
"""

import json
import os
import select
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtsoa import GraphBuilder, GraphFormatError, save_graph
from rtsoa.abi.status import (
    RESERVED_STATUS_BASE,
    STATUS_BAD_NOTIFY,
    STATUS_END_OF_SEQUENCE,
    STATUS_NOTIFY_BASE,
    STATUS_QUEUE_OVERFLOW,
    STATUS_RESERVED_NOT_REGISTERED,
    STATUS_STEP_LIMIT,
    STATUS_UNKNOWN_KERNEL,
)
from rtsoa.kernels import REGISTRY
from rtsoa.kernels.control_flow import add_const_int, add_if, add_while

CASES = int(os.environ.get("FUZZ_CASES", "800"))
TIMEOUT_SECONDS = 60
FIRST_TIMEOUT_SECONDS = 1800  # the worker's first case compiles every loop with every kernel
WORKER = Path(__file__).with_name("semantic_worker.py")
TYPED = {"ok", "end", "KernelError", "GraphFormatError", "ValueError", "UnknownKernelError"}
PLAIN = ["Checksum0", "Checksum1", "Checksum2", "Noop", "Busy", "Fail", "EndOfSequence"]
VALUED = ["ConstInt", "AddInt", "FailWhen", "InferShape", "SwitchNotify"]
DEVICE = ["AllocMemory", "LaunchKernel", "FreeMemory", "RecordEvent", "StreamWaitEvent"]
KERNELS = PLAIN + VALUED + DEVICE
_INT64 = st.integers(-(2**63), 2**63 - 1)
_RESERVED = st.sampled_from(
    [
        RESERVED_STATUS_BASE,
        STATUS_END_OF_SEQUENCE,
        STATUS_UNKNOWN_KERNEL,
        STATUS_QUEUE_OVERFLOW,
        STATUS_STEP_LIMIT,
        STATUS_BAD_NOTIFY,
        STATUS_RESERVED_NOT_REGISTERED,
        STATUS_NOTIFY_BASE,
        STATUS_NOTIFY_BASE + 1,
        2**31 - 1,
    ]
)
# Sizes: at most 2**24 (14 nodes never fill the 1 GiB default arena in any order) or above
# every arena (out of memory in any order), up to int64's ends.
_SIZES = (
    st.integers(-1, 2**24)
    | st.integers(2**31, 2**63 - 1)
    | st.integers(-(2**63), -1)
    | st.sampled_from([2**63 - 1, 2**63 - 600, 2**62, -(2**63)])
)


class Worker:
    """The worker subprocess, restarted after a crash."""

    def __init__(self):
        self.process = None
        self.answered = 0

    def start(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, path):
        if self.process is None or self.process.poll() is not None:
            self.start()
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        timeout = TIMEOUT_SECONDS if self.answered else FIRST_TIMEOUT_SECONDS
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.process.kill()
            self.process = None
            raise AssertionError(f"worker timed out after {timeout} s on {path}")
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            stderr = self.process.stderr.read()[-2000:]
            self.process = None
            raise AssertionError(f"worker died (exit {code}) on {path}:\n{stderr}")
        self.answered += 1
        return json.loads(line)

    def close(self):
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def worker():
    each = Worker()
    yield each
    each.close()


@pytest.fixture(scope="module")
def tally():
    counts = Counter()
    yield counts
    print(f"\nsemantic fuzzer outcomes: {dict(sorted(counts.items()))}")


class Recipe:
    """Builds one random graph from hypothesis draws, wiring uses race-free."""

    def __init__(self, draw):
        self.draw = draw
        self.streams = draw(st.integers(1, 3))
        self.events = draw(st.integers(1, 3))
        self.builder = GraphBuilder(stream_count=self.streams, event_count=self.events)
        self.ints = []  # INT / SHAPE value ids (integers whatever the order)
        self.blocks = []  # MEMORY_BLOCK value ids (handles differ with the order: never ints)
        self.users = {}  # value -> nodes that used it (a free must follow them)
        self.freed_by = {}  # block -> its first free node (later uses follow it)
        self.nodes = []

    def _use(self, node, value):
        producer = self.producer.get(value)
        if producer is not None and producer != node:
            self.builder.add_edge(producer, node)
        if value in self.freed_by and self.freed_by[value] != node:
            self.builder.add_edge(self.freed_by[value], node)
        self.users.setdefault(value, []).append(node)

    def _pick(self, pool):
        return self.draw(st.sampled_from(pool)) if pool else None

    def add(self, name):
        draw = self.draw
        info = REGISTRY[name]
        attributes = [
            draw(st.integers(-2, 1000) | _INT64) for _ in range(info.requires["attributes"])
        ]
        if name in ("AllocMemory", "InferShape"):
            attributes = [draw(_SIZES)]
        if name == "LaunchKernel":
            attributes = [
                draw(st.integers(0, 2**30) | _INT64),
                draw(st.integers(0, 2**30) | _INT64),
            ]
        if name == "Fail":
            attributes = [draw(st.integers(-2, 1000) | _INT64 | _RESERVED)]
        if name in ("RecordEvent", "StreamWaitEvent"):
            attributes = [draw(st.integers(-1, self.events))]
        if name == "Busy":
            attributes = [draw(st.integers(-5, 500))]
        pool = self.blocks if name in ("LaunchKernel", "FreeMemory") else self.ints
        inputs = []
        for _ in range(info.requires["inputs"]):
            value = self._pick(pool)
            if value is None:
                return
            inputs.append(value)
        node, outputs = REGISTRY.add_node(
            self.builder,
            name,
            attributes=attributes,
            inputs=inputs,
            priority=draw(st.integers(0, 3)),
            stream=draw(st.integers(0, self.streams - 1)),
            wait_anyone=draw(st.booleans()) and draw(st.booleans()),
        )
        for value in inputs:
            self._use(node, value)
        if name == "FreeMemory":
            block = inputs[0]
            for user in self.users.get(block, []):
                if user != node:
                    self.builder.add_edge(user, node)
            self.freed_by.setdefault(block, node)
        for value in outputs:
            self.producer[value] = node
            (self.blocks if name == "AllocMemory" else self.ints).append(value)
        self.nodes.append(node)

    def build(self):
        draw = self.draw
        self.producer = {}
        for _ in range(draw(st.integers(1, 14))):
            self.add(draw(st.sampled_from(KERNELS)))
        if draw(st.booleans()) and len(self.nodes) > 1:
            for _ in range(draw(st.integers(1, 6))):  # extra forward edges
                a, b = sorted(draw(st.lists(st.sampled_from(self.nodes), min_size=2, max_size=2)))
                if a != b:
                    self.builder.add_edge(a, b)
        construct = draw(st.sampled_from(["none", "if", "while"]))
        if construct == "if":
            node, condition = add_const_int(self.builder, draw(st.integers(-3, 5)))
            branches = [self._branch] * draw(st.integers(1, 3))
            add_if(self.builder, condition, branches, after=[node])
        elif construct == "while":
            add_while(self.builder, draw(st.integers(0, 4)), body=self._branch)
        if draw(st.integers(0, 9)) == 0 and len(self.nodes) > 1:  # a back edge
            a, b = sorted(draw(st.lists(st.sampled_from(self.nodes), min_size=2, max_size=2)))
            if a != b:
                self.builder.add_edge(b, a)
                self.builder.has_loops = draw(st.booleans())
        return self.builder.finalize()

    def _branch(self, builder, subgraph, pivot, *counter):
        node = builder.add_node(self.draw(st.sampled_from(PLAIN[:4])), graph=subgraph)
        builder.add_edge(pivot, node)
        return [node]


@st.composite
def graphs(draw):
    try:
        return draw_graph(draw)
    except GraphFormatError as error:
        return error


def draw_graph(draw):
    return Recipe(draw).build()


def check_outcomes(answer, path):
    assert answer["load"] in ("ok", "GraphFormatError"), (path, answer)
    runs = answer["runs"]
    if runs:  # one thread is refused at prepare (a memory and a normal worker are needed)
        assert runs["multithread-1"][0] in ("ValueError", "GraphFormatError"), (path, runs)
    for name, (outcome, *_rest) in runs.items():
        assert outcome in TYPED, (path, name, runs)
        # a reserved status is obeyed only from a kernel registered for it
        assert outcome != "end" or answer["ends_sequence"], (path, name, runs)
    finished = {tuple(run[1:3]) for run in runs.values() if run[0] == "ok"}
    assert len(finished) <= 1, f"executors disagree on {path}: {runs}"
    completed = [run[0] for run in runs.values() if run[0] in ("ok", "KernelError")]
    if "ok" in completed and "KernelError" in completed:
        raise AssertionError(f"one executor failed where another finished, {path}: {runs}")


def _fuzz(graph, worker, tally, tmp_path_factory):
    if isinstance(graph, GraphFormatError):
        tally["refused at build"] += 1
        return
    path = save_graph(graph, tmp_path_factory.mktemp("fuzz") / "g.rtsoa")
    answer = worker.ask(path)
    check_outcomes(answer, path)
    for outcome in {run[0] for run in answer["runs"].values()}:
        tally[outcome] += 1


@settings(
    max_examples=CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(graph=graphs())
def test_every_graph_is_refused_fails_typed_or_agrees(graph, worker, tally, tmp_path_factory):
    _fuzz(graph, worker, tally, tmp_path_factory)


@pytest.mark.large
@settings(
    max_examples=10 * CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(graph=graphs())
def test_every_graph_is_refused_fails_typed_or_agrees_large(graph, worker, tally, tmp_path_factory):
    _fuzz(graph, worker, tally, tmp_path_factory)
