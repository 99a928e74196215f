"""The lowered form of a model with host steps: `HostModel` (the device graph and its
`HostProgram`). Lowering (`rtsoa.lowering.host_split`) makes one; `ModelExecutor` runs it
(`rtsoa.runtime.host_steps`).

A run: the model's inputs are checked and put in a host value table with the program's
constants; the prologue's steps run in order; the device graph runs on `device_inputs` read
from the table (graph inputs and prologue results) and its `device_outputs` join the table;
the epilogue's steps run; the model's outputs are read from the table. The device graph of
a model whose every op runs on the host has no nodes and is not run.
"""

from typing import NamedTuple

from rtsoa.host.kinds import STRING


class HostStep(NamedTuple):
    """One op run on the host: `HOST_OPS[(domain, op)].run(parameters, inputs)`."""

    op: str
    domain: str
    inputs: tuple  # value names ("" for an absent optional input)
    outputs: tuple  # value names
    parameters: dict  # what the op's prepare returned at lowering
    where: str  # how errors name the node: "StringSplit node 'split' (#2)"


class HostValue(NamedTuple):
    """A model input or output: name, kind (STRING or a numpy dtype; None: unknown), dims
    (ints, symbol names, None for unknown; None: unknown rank)."""

    name: str
    kind: object
    dims: tuple | None

    @property
    def is_string(self):
        return self.kind == STRING


class HostProgram(NamedTuple):
    inputs: tuple  # HostValue per model input, in order
    outputs: tuple  # HostValue per model output, in order
    constants: dict  # name -> numpy array (string constants as object arrays of str)
    prologue: tuple  # HostSteps run before the device graph, in topological order
    epilogue: tuple  # HostSteps run after it
    device_inputs: tuple  # names the device graph takes, in its input order
    device_outputs: tuple  # names the device graph returns, in its output order

    @property
    def input_names(self):
        return [value.name for value in self.inputs]


class HostModel(NamedTuple):
    """A lowered model with host steps: `device`, the ExecuteGraph of its device ops (no nodes
    when every op runs on the host), and `program`, what runs around it."""

    device: object  # ExecuteGraph
    program: HostProgram

    @property
    def meta(self):
        return self.device.meta
