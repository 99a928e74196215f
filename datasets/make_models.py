"""Regenerate the committed example models: `python datasets/make_models.py`.

- `mlp.onnx`: a 2-layer perceptron (MatMul + Add + Relu, then Gemm), input x [batch, 16],
  output y [batch, 4], seeded weights (rtsoa.testing.models.mlp).
- `mlp.rtsoa`: it, lowered by `rtsoa lower` (Init uploads the weights, Main computes).
- `mlp-inputs.npz`: an input set (x of shape [3, 16]) for `rtsoa run --inputs`.
"""

import sys
from pathlib import Path

import numpy as np
import onnx

from rtsoa.graph.io import save_graph
from rtsoa.lowering import lower
from rtsoa.testing.models import mlp

HERE = Path(__file__).resolve().parent


def main(out=HERE):
    out = Path(out)
    proto = mlp(seed=2026)
    onnx.save(proto, out / "mlp.onnx")
    save_graph(lower(proto), out / "mlp.rtsoa", overwrite=True)
    x = np.random.default_rng(2026).standard_normal((3, 16)).astype(np.float32)
    np.savez(out / "mlp-inputs.npz", x=x)
    print(f"{out / 'mlp.onnx'}, {out / 'mlp.rtsoa'}, {out / 'mlp-inputs.npz'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
