"""Worker process of the semantic fuzzer: runs saved graphs on every executor, one per line.

Reads graph directory paths from stdin; for each, loads the graph and runs it on every
executor (a fresh executor and default device each; the multithread one on 1, 2, 4 and 8
threads, named "multithread-<threads>"), then prints one JSON line:
{"load": "ok" | "<error type>", "runs": {executor: [outcome, nodes, checksum, status]},
 "ends_sequence": whether any kernel of the graph is registered to end a sequence}
where outcome is "ok", "end" (end of sequence: order-dependent, not compared) or the error's
type name. A crash or hang of this process is what the fuzzer is looking for.
"""

import json
import sys

from rtsoa import RtsoaError, load_graph
from rtsoa.executors import EXECUTORS, KernelError, prepare_executor
from rtsoa.kernels import REGISTRY

THREADS = (1, 2, 4, 8)  # the multithread executor's runs (1: refused with a ValueError)


def _executors():
    """(run name, prepare options): every executor, the multithread one on 1 (refused at
    prepare: it needs a memory and a normal worker), 2, 4 and 8 threads."""
    for name in EXECUTORS:
        if name == "multithread":
            for threads in THREADS:
                yield f"{name}-{threads}", {"threads": threads}
        else:
            yield name, {}


def outcomes(path):
    try:
        graph = load_graph(path)
    except RtsoaError as error:
        return {"load": type(error).__name__, "runs": {}}
    runs = {}
    for name, options in _executors():
        try:
            # one dispatch for every graph: a compile per executor, not per kernel-module set
            result = prepare_executor(graph, name.split("-")[0], kernels="all", **options).run()
        except KernelError as error:
            runs[name] = ["KernelError", error.nodes_executed, 0, error.status]
        except (RtsoaError, ValueError) as error:  # refused at prepare (typed)
            runs[name] = [type(error).__name__, 0, 0, 0]
        else:
            outcome = "end" if result.end_of_sequence else "ok"
            runs[name] = [outcome, result.nodes_executed, result.checksum, result.status]
    ends = any(name in REGISTRY and REGISTRY[name].ends_sequence for name in graph.kernel_names)
    return {"load": "ok", "runs": runs, "ends_sequence": ends}


def main():
    for line in sys.stdin:
        print(json.dumps(outcomes(line.strip())), flush=True)


if __name__ == "__main__":
    main()
