"""Host steps: ops that run in Python on the host, around a lowered model's device graph.

String tensors never enter the device arena or jitted code: a model's string values live in
a host value table (numpy object arrays of `str`), and the ops that read or make them run as
host steps (`rtsoa.host.strings`), in topological order, before the device graph (the
prologue: steps fed by graph inputs and constants) or after it (the epilogue: steps reading
device results). `rtsoa.host.program` holds the lowered form (`HostProgram`, `HostModel`) and
runs it; `rtsoa.lowering.host_split` splits a model into the two parts.
"""
