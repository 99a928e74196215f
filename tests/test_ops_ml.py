"""The ai.onnx.ml ops (tree ensembles and feature transforms) on whole one-node models, judged
by onnxruntime (and by numpy where onnxruntime's binary-classifier labels are not argmax);
hostile trees and unsupported attributes refused at lowering naming op, node and what."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError
from rtsoa.runtime.inference import InferenceSession
from rtsoa.testing.models import run_onnxruntime

ML = "ai.onnx.ml"
ELEMENT = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
}
LEGACY_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def ml_model(op, feeds, outputs, attributes, ml_opset=3):
    """A model of one ai.onnx.ml node named 'the_node'; `outputs`: (name, element type)."""
    node = helper.make_node(
        op, list(feeds), [name for name, _ in outputs], name="the_node", domain=ML, **attributes
    )
    graph = helper.make_graph(
        [node],
        "ml",
        [helper.make_tensor_value_info(n, ELEMENT[x.dtype], x.shape) for n, x in feeds.items()],
        [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def rtsoa_outputs(model, feeds):
    with InferenceSession(model) as session:
        return session.run(None, feeds)


def same_as_onnxruntime(model, feeds, exact=False):
    want = run_onnxruntime(model, feeds)
    names = [output.name for output in model.graph.output]
    got = rtsoa_outputs(model, feeds)
    for name, have in zip(names, got, strict=True):
        expected = want[name]
        assert have.dtype == expected.dtype and have.shape == expected.shape, name
        if exact or have.dtype.kind in "iubO":
            np.testing.assert_array_equal(have, expected, err_msg=name)
        else:
            np.testing.assert_allclose(have, expected, rtol=2e-5, atol=2e-6, err_msg=name)
    return got


def refused(model, named):
    with pytest.raises(LoweringError) as caught:
        rtsoa_outputs(model, {})
    message = str(caught.value)
    assert "the_node" in message and named in message, message


# -- random forests in both encodings -------------------------------------------------------------


def random_forest(rng, trees=4, features=5, depth=4, targets=2, modes=LEGACY_MODES, grid=False):
    """Per tree, a list of nodes: dicts with mode, feature, value, true / false child ids (in
    the tree), missing flag, and a leaf's [(target, weight)]: 0 to 2 weights, exactly one for
    one target (onnxruntime reads only a leaf's first weight there). `grid` thresholds are
    integers (so EQ / NEQ branches are taken)."""
    forest = []
    for _ in range(trees):
        nodes = []

        def grow(level, nodes=nodes):
            index = len(nodes)
            nodes.append(None)
            if level == depth or (level > 0 and rng.random() < 0.25):
                count = 1 if targets == 1 else int(rng.integers(0, 3))
                weights = [(int(rng.integers(targets)), float(rng.normal())) for _ in range(count)]
                nodes[index] = {"mode": "LEAF", "weights": weights}
                return index
            value = float(rng.integers(-2, 3)) if grid else float(np.float32(rng.normal()))
            entry = {
                "mode": str(rng.choice(modes)),
                "feature": int(rng.integers(features)),
                "value": value,
                "missing": int(rng.integers(2)),
            }
            entry["true"] = grow(level + 1)
            entry["false"] = grow(level + 1)
            nodes[index] = entry
            return index

        grow(0)
        forest.append(nodes)
    return forest


def legacy_attributes(forest, prefix):
    """TreeEnsembleRegressor ("target") / TreeEnsembleClassifier ("class") attributes."""
    a = {k: [] for k in ("treeids", "nodeids", "featureids", "values", "modes", "true", "false")}
    a["missing"], weights = [], {f"{prefix}_{k}": [] for k in ("treeids", "nodeids", "ids")}
    weights[f"{prefix}_weights"] = []
    for tree, nodes in enumerate(forest):
        for index, entry in enumerate(nodes):
            leaf = entry["mode"] == "LEAF"
            a["treeids"].append(tree)
            a["nodeids"].append(index)
            a["featureids"].append(0 if leaf else entry["feature"])
            a["values"].append(0.0 if leaf else entry["value"])
            a["modes"].append(entry["mode"])
            a["true"].append(0 if leaf else entry["true"])
            a["false"].append(0 if leaf else entry["false"])
            a["missing"].append(0 if leaf else entry["missing"])
            for target, weight in entry.get("weights", []):
                weights[f"{prefix}_treeids"].append(tree)
                weights[f"{prefix}_nodeids"].append(index)
                weights[f"{prefix}_ids"].append(target)
                weights[f"{prefix}_weights"].append(weight)
    return {
        "nodes_treeids": a["treeids"],
        "nodes_nodeids": a["nodeids"],
        "nodes_featureids": a["featureids"],
        "nodes_values": a["values"],
        "nodes_modes": a["modes"],
        "nodes_truenodeids": a["true"],
        "nodes_falsenodeids": a["false"],
        "nodes_missing_value_tracks_true": a["missing"],
        **weights,
    }


def v5_attributes(forest, dtype, members=None):
    """TreeEnsemble (ai.onnx.ml 5) attributes of a forest whose leaves have one weight each;
    `members`: {(tree, node index): [values]} turns those branches into BRANCH_MEMBER."""
    codes = {mode: code for code, mode in enumerate(LEGACY_MODES)}
    branch_of, leaf_of = {}, {}
    for tree, nodes in enumerate(forest):
        for index, entry in enumerate(nodes):
            table = leaf_of if entry["mode"] == "LEAF" else branch_of
            table[tree, index] = len(table)
    lists = {k: [] for k in ("featureids", "splits", "modes", "true", "false", "tl", "fl", "mv")}
    member_values, targets, weights = [], [], []
    for tree, nodes in enumerate(forest):
        for index, entry in enumerate(nodes):
            if entry["mode"] == "LEAF":
                ((target, weight),) = entry["weights"]
                targets.append(target)
                weights.append(weight)
                continue
            mode = codes[entry["mode"]]
            if members and (tree, index) in members:
                mode = 6
                member_values.extend(members[tree, index] + [np.nan])
            lists["featureids"].append(entry["feature"])
            lists["splits"].append(entry["value"])
            lists["modes"].append(mode)
            lists["mv"].append(entry["missing"])
            for side, flags in (("true", "tl"), ("false", "fl")):
                child = nodes[entry[side]]
                is_leaf = child["mode"] == "LEAF"
                lists[flags].append(int(is_leaf))
                lists[side].append((leaf_of if is_leaf else branch_of)[tree, entry[side]])
    attributes = {
        "nodes_featureids": lists["featureids"],
        "nodes_splits": helper.make_tensor(
            "s",
            ELEMENT[np.dtype(dtype)],
            [len(lists["splits"])],
            np.asarray(lists["splits"], dtype),
        ),
        "nodes_modes": helper.make_tensor(
            "m", TensorProto.UINT8, [len(lists["modes"])], lists["modes"]
        ),
        "nodes_truenodeids": lists["true"],
        "nodes_falsenodeids": lists["false"],
        "nodes_trueleafs": lists["tl"],
        "nodes_falseleafs": lists["fl"],
        "nodes_missing_value_tracks_true": lists["mv"],
        "leaf_targetids": targets,
        "leaf_weights": helper.make_tensor(
            "w", ELEMENT[np.dtype(dtype)], [len(weights)], np.asarray(weights, dtype)
        ),
        "tree_roots": [branch_of[tree, 0] for tree in range(len(forest))],
    }
    if member_values:
        attributes["membership_values"] = helper.make_tensor(
            "mv", ELEMENT[np.dtype(dtype)], [len(member_values)], np.asarray(member_values, dtype)
        )
    return attributes


def samples(rng, rows=40, features=5, dtype=np.float32, grid=False):
    x = rng.integers(-3, 4, size=(rows, features)) if grid else rng.normal(size=(rows, features))
    x = x.astype(np.float64)
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values take the missing-value track
    if np.dtype(dtype).kind == "i":
        return np.nan_to_num(x).astype(dtype)
    return x.astype(dtype)


# -- TreeEnsembleRegressor ----------------------------------------------------------------------


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 3])
def test_regressor_aggregates_with_every_branch_mode_and_missing_values(aggregate, targets):
    rng = np.random.default_rng(10 + targets)
    forest = random_forest(rng, targets=targets, grid=True)
    attributes = legacy_attributes(forest, "target")
    attributes.update(n_targets=targets, aggregate_function=aggregate)
    attributes["base_values"] = [float(v) for v in rng.normal(size=targets)]
    feeds = {"X": samples(rng, grid=True)}
    same_as_onnxruntime(ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], attributes), feeds)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_regressor_post_transforms_over_targets(post):
    rng = np.random.default_rng(3)
    attributes = legacy_attributes(random_forest(rng, trees=6, targets=3), "target")
    attributes.update(n_targets=3, post_transform=post)
    feeds = {"X": samples(rng)}
    same_as_onnxruntime(ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], attributes), feeds)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_regressor_takes_double_and_integer_features(dtype):
    """onnxruntime runs no integer X at ai.onnx.ml 3: integers are judged by its run of the
    same values as float64 (exact)."""
    rng = np.random.default_rng(4)
    attributes = legacy_attributes(random_forest(rng, grid=True), "target")
    attributes.update(n_targets=2)
    x = samples(rng, dtype=dtype, grid=True)
    model = ml_model("TreeEnsembleRegressor", {"X": x}, [("Y", 1)], attributes)
    (got,) = rtsoa_outputs(model, {"X": x})
    wide = {"X": x.astype(np.float64)}
    want = run_onnxruntime(ml_model("TreeEnsembleRegressor", wide, [("Y", 1)], attributes), wide)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want["Y"], rtol=2e-5, atol=2e-6)


def test_regressor_of_zero_rows_gives_zero_rows():
    rng = np.random.default_rng(5)
    attributes = legacy_attributes(random_forest(rng), "target")
    attributes.update(n_targets=2)
    feeds = {"X": np.zeros((0, 5), dtype=np.float32)}
    model = ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], attributes)
    (y,) = rtsoa_outputs(model, feeds)
    assert y.shape == (0, 2) and y.dtype == np.float32


def test_version_1_regressor_and_the_deprecated_definition_is_refused():
    rng = np.random.default_rng(6)
    attributes = legacy_attributes(random_forest(rng), "target")
    attributes.update(n_targets=2)
    feeds = {"X": samples(rng)}
    same_as_onnxruntime(ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], attributes, 1), feeds)
    model = ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], attributes, 5)
    with pytest.raises(LoweringError, match=r"the_node.*ai.onnx.ml opset 5 is version 5"):
        rtsoa_outputs(model, feeds)


# -- TreeEnsembleClassifier ---------------------------------------------------------------------


def classifier(forest, labels, **extra):
    attributes = legacy_attributes(forest, "class")
    attributes.update(classlabels_int64s=labels, **extra)
    return attributes


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_multiclass_classifier_labels_and_scores(post):
    rng = np.random.default_rng(7)
    attributes = classifier(
        random_forest(rng, trees=5, targets=3), [10, 20, 30], post_transform=post
    )
    attributes["base_values"] = [0.1, -0.2, 0.3]
    feeds = {"X": samples(rng)}
    model = ml_model("TreeEnsembleClassifier", feeds, [("Y", 7), ("Z", 1)], attributes)
    same_as_onnxruntime(model, feeds)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("positive", [True, False])
@pytest.mark.parametrize("base", [None, [0.25]])
def test_binary_classifier_with_one_margin(post, positive, base):
    """Weights for class 0 only (how gradient-boosted binary classifiers are exported)."""
    rng = np.random.default_rng(8)
    forest = random_forest(rng, targets=1)
    if positive:
        for nodes in forest:
            for entry in nodes:
                entry["weights"] = [(t, abs(w) / 4) for t, w in entry.get("weights", [])]
    attributes = classifier(forest, [4, 9], post_transform=post)
    if base is not None:
        attributes["base_values"] = base
    feeds = {"X": samples(rng)}
    model = ml_model("TreeEnsembleClassifier", feeds, [("Y", 7), ("Z", 1)], attributes)
    same_as_onnxruntime(model, feeds)


def probability_leaves(rng, forest, classes):
    """`forest` with a weight for every class at each leaf (as random forests are exported:
    onnxruntime's two-class ensembles treat a class without a score as a margin)."""
    for nodes in forest:
        for entry in nodes:
            if entry["mode"] == "LEAF":
                shares = rng.dirichlet(np.ones(classes))
                entry["weights"] = [(c, float(shares[c])) for c in range(classes)]
    return forest


def test_two_class_classifier_labels_are_the_argmax_of_the_scores():
    """A random forest's leaves weigh both classes. onnxruntime labels such a two-class
    ensemble by the sign of class 1's score; rtsoa (as the specification and onnx.reference)
    by the larger score."""
    rng = np.random.default_rng(9)
    forest = probability_leaves(rng, random_forest(rng, trees=5, targets=2), 2)
    attributes = classifier(forest, [0, 1])
    feeds = {"X": samples(rng, rows=200)}
    model = ml_model("TreeEnsembleClassifier", feeds, [("Y", 7), ("Z", 1)], attributes)
    y, z = rtsoa_outputs(model, feeds)
    want_z = run_onnxruntime(model, feeds)["Z"]
    np.testing.assert_allclose(z, want_z, rtol=2e-5, atol=2e-6)
    np.testing.assert_array_equal(y, np.argmax(z, axis=1))
    assert 0 < y.sum() < len(y)


@pytest.mark.parametrize("classes", [2, 3])
def test_string_class_labels_come_from_a_host_step(classes):
    rng = np.random.default_rng(12)
    forest = probability_leaves(rng, random_forest(rng, trees=3, targets=classes), classes)
    attributes = legacy_attributes(forest, "class")
    attributes["classlabels_strings"] = ["cat", "dog", "emu"][:classes]
    feeds = {"X": samples(rng)}
    model = ml_model("TreeEnsembleClassifier", feeds, [("Y", 8), ("Z", 1)], attributes)
    y, z = rtsoa_outputs(model, feeds)
    want = run_onnxruntime(model, feeds)
    if classes == 3:  # two classes: onnxruntime's labels are not the argmax (see above)
        assert y.tolist() == want["Y"].tolist()
    names = np.array(attributes["classlabels_strings"], dtype=object)
    assert y.tolist() == names[np.argmax(z, axis=1)].tolist()
    np.testing.assert_allclose(z, want["Z"], rtol=2e-5, atol=2e-6)


# -- TreeEnsemble (ai.onnx.ml 5) ------------------------------------------------------------------


def one_weight_forest(rng, targets, grid=False):
    forest = random_forest(rng, targets=targets, grid=grid)
    for nodes in forest:
        for entry in nodes:
            if entry["mode"] == "LEAF":
                entry["weights"] = [(int(rng.integers(targets)), float(rng.normal()))]
    return forest


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_5_matches_onnxruntime(dtype, aggregate):
    rng = np.random.default_rng(20 + aggregate)
    attributes = v5_attributes(one_weight_forest(rng, 2, grid=True), dtype)
    attributes.update(n_targets=2, aggregate_function=aggregate)
    feeds = {"X": samples(rng, dtype=dtype, grid=True)}
    same_as_onnxruntime(
        ml_model("TreeEnsemble", feeds, [("Y", ELEMENT[np.dtype(dtype)])], attributes, 5), feeds
    )


def test_tree_ensemble_5_set_membership():
    rng = np.random.default_rng(30)
    forest = one_weight_forest(rng, 1, grid=True)
    members = {(0, 0): [-1.0, 2.0], (1, 0): [0.0], (2, 0): [1.0, -2.0, 3.0]}
    attributes = v5_attributes(forest, np.float32, members)
    attributes.update(n_targets=1)
    feeds = {"X": samples(rng, grid=True)}
    same_as_onnxruntime(ml_model("TreeEnsemble", feeds, [("Y", 1)], attributes, 5), feeds)


# -- hostile trees and refused attributes ---------------------------------------------------------


def chain(length, features=3):
    """One tree: a chain of BRANCH_LEQ nodes, node k -> k + 1 (true) and a leaf (false)."""
    forest = [[]]
    for k in range(length):
        forest[0].append(
            {
                "mode": "BRANCH_LEQ",
                "feature": 0,
                "value": 0.0,
                "missing": 0,
                "true": k + 1,
                "false": length + 1,
            }
        )
    forest[0].append({"mode": "LEAF", "weights": [(0, 1.0)]})
    forest[0].append({"mode": "LEAF", "weights": [(0, 2.0)]})
    return forest


def regressor(attributes, features=3):
    attributes = {"n_targets": 1, **attributes}
    feeds = {"X": np.zeros((3, features), dtype=np.float32)}
    return ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], attributes), feeds


def test_a_chain_tree_runs_and_a_hostile_one_is_refused_naming_the_node():
    model, _ = regressor(legacy_attributes(chain(3), "target"))
    x = np.array([[0.0, 5, 5], [1.0, 5, 5], [np.nan, 5, 5]], dtype=np.float32)
    (y,) = rtsoa_outputs(model, {"X": x})  # 0 <= 0 down the chain; 1 and NaN to the leaf
    np.testing.assert_array_equal(y, np.array([[1.0], [2.0], [2.0]], dtype=np.float32))
    cycle = legacy_attributes(chain(3), "target")
    cycle["nodes_truenodeids"][2] = 1  # node 2 -> node 1 -> node 2
    cycle["nodes_falsenodeids"][0] = 3  # leaf 3 keeps a parent
    refused(regressor(cycle)[0], "tree 0 node 2: a child leads back to it (a cycle)")
    cycle["nodes_truenodeids"][2] = 0  # every node is a child: no root
    refused(regressor(cycle)[0], "tree 0 has 0 nodes that are no other node's child")
    outside = legacy_attributes(chain(3), "target")
    outside["nodes_falsenodeids"][1] = 99
    refused(regressor(outside)[0], "tree 0 node 1: its false child 99 is not a node of tree 0")
    feature = legacy_attributes(chain(3), "target")
    feature["nodes_featureids"][2] = 3
    refused(regressor(feature)[0], "tree 0 node 2: feature id 3 is not in 0 .. 2")
    mode = legacy_attributes(chain(3), "target")
    mode["nodes_modes"][0] = "BRANCH_MEMBER"
    refused(regressor(mode)[0], "node mode 'BRANCH_MEMBER' is not one of")
    target = legacy_attributes(chain(3), "target")
    target["target_ids"][0] = 1
    refused(regressor(target)[0], "target 1 is not in 0 .. 0")


def test_a_tree_deeper_than_the_limit_is_refused():
    from rtsoa.lowering.ml_trees import MAX_DEPTH

    refused(regressor(legacy_attributes(chain(MAX_DEPTH + 1), "target"))[0], "deeper than")


def test_unsupported_classifier_and_regressor_settings_are_refused():
    rng = np.random.default_rng(11)
    forest = random_forest(rng, targets=1)
    feeds = {"X": samples(rng)}
    outputs = [("Y", 7), ("Z", 1)]
    for name, attributes in (
        ("class 1 only", classifier(forest, [0, 1])),
        ("post transform NONE or LOGISTIC", classifier(forest, [0, 1], post_transform="PROBIT")),
        ("at least 2", classifier(forest, [0])),
    ):
        if name == "class 1 only":
            attributes["class_ids"] = [1] * len(attributes["class_ids"])
        refused(ml_model("TreeEnsembleClassifier", feeds, outputs, attributes), name)
    one_target = legacy_attributes(forest, "target")
    one_target.update(n_targets=1, post_transform="LOGISTIC")
    refused(ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], one_target), "one target")
    base = legacy_attributes(forest, "target")
    base.update(n_targets=1, base_values=[1.0, 2.0])
    refused(ml_model("TreeEnsembleRegressor", feeds, [("Y", 1)], base), "2 base values")
