"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor) against onnxruntime, single thread both:
a seeded forest of complete trees, whole one-node models run through rtsoa's `execute_sync`
and onnxruntime's `run` on the same rows, interleaved rounds, the ratio of medians.

- `gbm-200x6 rows 1`: the latency of one row through 200 trees of depth 6 (a gradient-boosted
  model's shape), where per-run overhead counts.
- `rf-100x10 rows 1000`: a batch through 100 trees of depth 10 (a random forest's shape),
  where the tree walk counts.

SVMClassifier (RBF kernel, three classes, Platt probabilities) the same way:

- `svc-rbf-300 rows 1` / `rows 1000`: 300 support vectors of 20 features (a small SVC's
  shape), one row and a batch.

    cd asv_bench && python -m benchmarks.bench_ml
"""

import numpy as np

from .bench_ops_nn import ratio
from .common import ensure_rtsoa_importable

# name -> (trees, depth, features, rows)
FORESTS = {
    "gbm-200x6 rows 1": (200, 6, 20, 1),
    "rf-100x10 rows 1000": (100, 10, 20, 1000),
}


def forest_model(trees, depth, features, seed=0):
    """A TreeEnsembleRegressor model of `trees` complete trees of `depth` (node k's children
    2k + 1 and 2k + 2), random features and thresholds, one weight a leaf."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    branches, total = 2**depth - 1, 2 ** (depth + 1) - 1
    a = {k: [] for k in ("tree", "node", "feature", "value", "mode", "true", "false")}
    leaves = {"target_treeids": [], "target_nodeids": [], "target_ids": [], "target_weights": []}
    for tree in range(trees):
        for node in range(total):
            branch = node < branches
            a["tree"].append(tree)
            a["node"].append(node)
            a["feature"].append(int(rng.integers(features)) if branch else 0)
            a["value"].append(float(rng.normal()) if branch else 0.0)
            a["mode"].append("BRANCH_LEQ" if branch else "LEAF")
            a["true"].append(2 * node + 1 if branch else 0)
            a["false"].append(2 * node + 2 if branch else 0)
            if not branch:
                leaves["target_treeids"].append(tree)
                leaves["target_nodeids"].append(node)
                leaves["target_ids"].append(0)
                leaves["target_weights"].append(float(rng.normal()) / trees)
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        n_targets=1,
        nodes_treeids=a["tree"],
        nodes_nodeids=a["node"],
        nodes_featureids=a["feature"],
        nodes_values=a["value"],
        nodes_modes=a["mode"],
        nodes_truenodeids=a["true"],
        nodes_falsenodeids=a["false"],
        **leaves,
    )
    graph = helper.make_graph(
        [node],
        "forest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


# name -> (support vectors, features, rows)
SVMS = {
    "svc-rbf-300 rows 1": (300, 20, 1),
    "svc-rbf-300 rows 1000": (300, 20, 1000),
}


def svm_model(vectors, features, classes=3, seed=0):
    """An SVMClassifier model: RBF kernel, `vectors` random support vectors split over
    `classes`, random coefficients, rho and Platt parameters."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    pairs = classes * (classes - 1) // 2
    per_class = [vectors // classes] * (classes - 1)
    per_class.append(vectors - sum(per_class))
    node = helper.make_node(
        "SVMClassifier",
        ["x"],
        ["label", "y"],
        domain="ai.onnx.ml",
        classlabels_ints=list(range(classes)),
        kernel_type="RBF",
        kernel_params=[1.0 / features, 0.0, 3.0],
        vectors_per_class=per_class,
        support_vectors=rng.normal(size=vectors * features).tolist(),
        coefficients=rng.normal(size=(classes - 1) * vectors).tolist(),
        rho=rng.normal(size=pairs).tolist(),
        prob_a=rng.uniform(-3.0, -0.5, size=pairs).tolist(),
        prob_b=rng.normal(size=pairs, scale=0.2).tolist(),
    )
    graph = helper.make_graph(
        [node],
        "svm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, features])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, None),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


class Forest:
    """One forest (or SVM) prepared for both runtimes; `check` asserts they agree."""

    def __init__(self, name):
        ensure_rtsoa_importable()
        import onnxruntime

        from rtsoa.lowering import lower
        from rtsoa.runtime import load_model

        self.tolerance = (1e-5, 1e-6)
        if name in SVMS:
            vectors, features, rows = SVMS[name]
            proto = svm_model(vectors, features)
            self.tolerance = (1e-4, 1e-5)  # kernels summed in another order
        else:
            trees, depth, features, rows = FORESTS[name]
            proto = forest_model(trees, depth, features)
        rng = np.random.default_rng(1)
        self.inputs = {"x": rng.normal(size=(rows, features)).astype(np.float32)}
        self.model = load_model(lower(proto))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )

    def rtsoa(self):
        return self.model.execute_sync(self.inputs)["y"]

    def onnxruntime(self):
        return self.session.run(["y"], self.inputs)[0]

    def check(self):
        rtol, atol = self.tolerance
        np.testing.assert_allclose(self.rtsoa(), self.onnxruntime(), rtol=rtol, atol=atol)


class TreeEnsembleVersusOnnxruntime:
    """A tree ensemble model's run time, rtsoa over onnxruntime (single thread both)."""

    params = list(FORESTS)
    param_names = ["forest"]
    timeout = 600

    def setup(self, name):
        self.forest = Forest(name)
        self.forest.check()

    def time_rtsoa(self, name):
        self.forest.rtsoa()

    def time_onnxruntime(self, name):
        self.forest.onnxruntime()

    def track_ratio(self, name):
        return ratio(self.forest)[0]

    track_ratio.unit = "ratio"


class SVMClassifierVersusOnnxruntime(TreeEnsembleVersusOnnxruntime):
    """An SVMClassifier model's run time, rtsoa over onnxruntime (single thread both)."""

    params = list(SVMS)
    param_names = ["svm"]


def main():
    """Print each model's times and ratio."""
    for name in list(FORESTS) + list(SVMS):
        forest = Forest(name)
        forest.check()
        value, mine, reference = ratio(forest, rounds=9, repeats=20)
        print(
            f"{name:22} rtsoa {mine * 1e6:9.0f} us  onnxruntime {reference * 1e6:9.0f} us"
            f"  ratio {value:.2f}"
        )


if __name__ == "__main__":
    main()
