"""Regenerate the committed example graphs byte for byte: `python datasets/make_datasets.py`.

Every graph comes from `rtsoa.graph.generators` with a fixed seed; Arrow IPC output is
deterministic, so rerunning this script leaves `git status` clean.
"""

import sys
from pathlib import Path

from rtsoa.graph.generators import generate
from rtsoa.graph.io import save_graph

HERE = Path(__file__).resolve().parent

# name -> (kind, nodes, options); keep this list append-only so old results stay comparable.
DATASETS = {
    "chain-1k": ("chain", 1_000, {}),
    "random-10k": ("random", 10_000, {"edges_per_node": 10, "window": 1000}),
    "layered-2k": ("layered", 2_000, {"width": 100, "fan_in": 4}),
    "lowered-4k": ("lowered", 4_000, {"fan_in": 2, "window": 64}),
}
SEED = 2026


def main(out=HERE):
    for name, (kind, nodes, options) in DATASETS.items():
        graph = generate(kind, nodes, seed=SEED, kernels=8, **options)
        path = save_graph(graph, Path(out) / f"{name}.rtsoa")
        print(f"{path}: {graph.num_nodes} nodes, {graph.num_edges} edges")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
