"""Resize against onnxruntime's on the same inputs, single thread both: the upsampling steps of
detection and segmentation heads (nearest and linear 2x), cubic, and an antialiased
downscale. rtsoa's side is the op's compute through its compiled entry on a prepared operand
table, as for Conv (`bench_ops_nn.OneOp`); the ratio is measured back to back, interleaved.

    cd asv_bench && python -m benchmarks.bench_ops_resize
"""

import numpy as np

from .bench_ops_nn import OneOp, ratio

# name -> (X shape, scales, attributes)
RESIZES = {
    "nearest 2x 1x64x80x80": ((1, 64, 80, 80), (1, 1, 2, 2), {"mode": "nearest"}),
    "linear 2x 1x32x64x64": ((1, 32, 64, 64), (1, 1, 2, 2), {"mode": "linear"}),
    "cubic 2x 1x8x64x64": ((1, 8, 64, 64), (1, 1, 2, 2), {"mode": "cubic"}),
    "linear antialias 0.25x 1x3x256x256": (
        (1, 3, 256, 256),
        (1, 1, 0.25, 0.25),
        {"mode": "linear", "antialias": 1},
    ),
}


def _resize(name):
    """Resize `name` of RESIZES as a OneOp (roi empty, scales given)."""
    shape, scales, attributes = RESIZES[name]
    rng = np.random.default_rng(7)
    feeds = {
        "x": rng.standard_normal(shape).astype(np.float32),
        "roi": np.zeros(0, dtype=np.float32),
        "scales": np.array(scales, dtype=np.float32),
    }
    return OneOp("Resize", feeds, attributes, opset=19)


class ResizeVersusOnnxruntime:
    """Resize compute time, rtsoa over onnxruntime (single thread both)."""

    params = list(RESIZES)
    param_names = ["resize"]
    timeout = 300

    def setup(self, name):
        self.resize = _resize(name)
        self.resize.check()

    def time_rtsoa(self, name):
        self.resize.rtsoa()

    def time_onnxruntime(self, name):
        self.resize.onnxruntime()

    def track_ratio(self, name):
        return ratio(self.resize)[0]

    track_ratio.unit = "ratio"


def main():
    """Print each Resize's times and ratio."""
    for name in RESIZES:
        resize = _resize(name)
        resize.check()
        value, mine, reference = ratio(resize, rounds=7, repeats=5)
        print(
            f"Resize {name:36} rtsoa {mine * 1e6:8.0f} us  onnxruntime {reference * 1e6:8.0f} us"
            f"  ratio {value:.2f}"
        )


if __name__ == "__main__":
    main()
