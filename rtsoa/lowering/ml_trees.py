"""The ai.onnx.ml tree ensembles: TreeEnsemble (version 5), TreeEnsembleRegressor and
TreeEnsembleClassifier (versions 1 and 3), lowered to the TreeEnsemble op (`rtsoa.ops.trees`).

Each converter turns the node's attributes into one form, `_Forest` (every node and leaf a
row of flat arrays, children as row indices), and checks it here, naming the node of the
model and the tree node at fault: every child, feature id, mode, set-membership list, leaf
weight and target; every tree reached from its root without a cycle and no deeper than
MAX_DEPTH. The op's jitted walk can then trust the arrays (it still bounds every index).

String class labels are a host step after the device graph (`rtsoa.lowering.ml_labels`).
Refused at lowering, naming what: string class labels in a subgraph, a classifier with one
class, a binary classifier (two classes, weights for one) whose weights are for class 1 or
whose post transform is not NONE or LOGISTIC (onnxruntime writes NaN or ignores it there),
base values of another length than the targets', and LOGISTIC / SOFTMAX / SOFTMAX_ZERO on a
one-target regressor (onnxruntime ignores them there, the specification applies them).
"""

import dataclasses

import numpy as np

from rtsoa.graph.schema import DType
from rtsoa.lowering.ml_domain import SAME_AS_X, attribute, refuse, register_ml_converter
from rtsoa.lowering.ml_labels import refuse_string_labels
from rtsoa.ops import trees
from rtsoa.ops.trees import LEAF, MEMBER

MAX_DEPTH = 10_000  # deeper trees are refused: each row walks every level of every tree

_MODES = {
    "BRANCH_LEQ": trees.LEQ,
    "BRANCH_LT": trees.LT,
    "BRANCH_GTE": trees.GTE,
    "BRANCH_GT": trees.GT,
    "BRANCH_EQ": trees.EQ,
    "BRANCH_NEQ": trees.NEQ,
    "LEAF": LEAF,
}
_AGGREGATES = {"AVERAGE": trees.AVERAGE, "SUM": trees.SUM, "MIN": trees.MIN, "MAX": trees.MAX}
_POSTS = {
    "NONE": trees.NONE,
    "SOFTMAX": trees.SOFTMAX,
    "LOGISTIC": trees.LOGISTIC,
    "SOFTMAX_ZERO": trees.SOFTMAX_ZERO,
    "PROBIT": trees.PROBIT,
}
_INPUT_TYPES = {DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64}


@dataclasses.dataclass
class _Forest:
    """A tree ensemble as flat arrays (rows of `nodes`, see `rtsoa.ops.trees`)."""

    features: list  # per row: feature id (branches)
    modes: list  # per row: mode code
    true_children: list  # per row: row index (branches)
    false_children: list
    missing_true: list  # per row: 0 / 1
    thresholds: list  # per row: float (branches)
    member_sets: list  # per row: list of floats (MEMBER branches), else None
    leaf_weights: list  # per row: list of (target, weight) (leaves), else None
    roots: list  # row index of each tree's root
    labels: list  # where errors name row k: "tree 2 node 5"


def _strings_to_codes(ctx, node, values, table, what):
    codes = []
    for value in values:
        if value not in table:
            refuse(ctx, node, f"{what} {value!r} is not one of {sorted(table)}")
        codes.append(table[value])
    return codes


def _float_list(ctx, node, name, tensor_name, required=True):
    """A float list attribute given as floats or as its `_as_tensor` form (one of them)."""
    values = node.attributes.get(name)
    tensor = node.attributes.get(tensor_name) if tensor_name else None
    if values is not None and tensor is not None:
        refuse(ctx, node, f"give one of {name!r} and {tensor_name!r}, not both")
    if tensor is not None:
        return [float(v) for v in np.asarray(tensor, dtype=np.float64).ravel()]
    if values is None:
        if required:
            refuse(ctx, node, f"attribute {name!r} is required")
        return None
    return [float(np.float32(v)) for v in values]  # float attributes are float32


def _int_list(ctx, node, name, length=None, required=True, default=0):
    values = node.attributes.get(name)
    if values is None:
        if required:
            refuse(ctx, node, f"attribute {name!r} is required")
        return [default] * (length or 0)
    values = [int(v) for v in values]
    if length is not None and len(values) != length:
        refuse(ctx, node, f"attribute {name!r} has {len(values)} entries, the nodes {length}")
    return values


# -- the legacy form: nodes named by (tree id, node id) ------------------------------------------


def _legacy_forest(ctx, node, prefix):
    """A `_Forest` of TreeEnsembleRegressor (`prefix` "target") or TreeEnsembleClassifier
    ("class"), with the targets or classes of its leaf weights."""
    tree_ids = _int_list(ctx, node, "nodes_treeids")
    count = len(tree_ids)
    node_ids = _int_list(ctx, node, "nodes_nodeids", count)
    features = _int_list(ctx, node, "nodes_featureids", count)
    modes = attribute(ctx, node, "nodes_modes", required=True)
    if len(modes) != count:
        refuse(ctx, node, f"attribute 'nodes_modes' has {len(modes)} entries, the nodes {count}")
    modes = _strings_to_codes(ctx, node, modes, _MODES, "node mode")
    values = _float_list(ctx, node, "nodes_values", "nodes_values_as_tensor", required=False)
    values = values if values is not None else [0.0] * count
    if len(values) != count:
        refuse(ctx, node, f"the node values have {len(values)} entries, the nodes {count}")
    true_ids = _int_list(ctx, node, "nodes_truenodeids", count)
    false_ids = _int_list(ctx, node, "nodes_falsenodeids", count)
    missing = _int_list(ctx, node, "nodes_missing_value_tracks_true", count, required=False)
    if len(missing) == 0:
        missing = [0] * count
    if count == 0:
        refuse(ctx, node, "the ensemble has no nodes")

    row_of = {}
    for row, key in enumerate(zip(tree_ids, node_ids, strict=True)):
        if key in row_of:
            refuse(ctx, node, f"tree {key[0]} node {key[1]} is listed twice")
        row_of[key] = row
    labels = [f"tree {t} node {n}" for t, n in zip(tree_ids, node_ids, strict=True)]
    true_rows, false_rows = [], []
    for row in range(count):
        if modes[row] == LEAF:
            true_rows.append(-1)
            false_rows.append(-1)
            continue
        for ids, rows, which in ((true_ids, true_rows, "true"), (false_ids, false_rows, "false")):
            child = row_of.get((tree_ids[row], ids[row]))
            if child is None:
                refuse(
                    ctx,
                    node,
                    f"{labels[row]}: its {which} child {ids[row]} is not a node of "
                    f"tree {tree_ids[row]}",
                )
            rows.append(child)

    leaf_weights = [[] if mode == LEAF else None for mode in modes]
    weight_trees = _int_list(ctx, node, f"{prefix}_treeids")
    weight_count = len(weight_trees)
    weight_nodes = _int_list(ctx, node, f"{prefix}_nodeids", weight_count)
    weight_targets = _int_list(ctx, node, f"{prefix}_ids", weight_count)
    weights = _float_list(ctx, node, f"{prefix}_weights", f"{prefix}_weights_as_tensor")
    if len(weights) != weight_count:
        refuse(ctx, node, f"{len(weights)} {prefix} weights for {weight_count} {prefix} ids")
    for tree, leaf, target, weight in zip(
        weight_trees, weight_nodes, weight_targets, weights, strict=True
    ):
        row = row_of.get((tree, leaf))
        if row is None:
            refuse(ctx, node, f"a {prefix} weight names tree {tree} node {leaf}, not a node")
        if modes[row] != LEAF:
            refuse(ctx, node, f"{labels[row]}: has a {prefix} weight but is not a LEAF")
        leaf_weights[row].append((target, weight))

    children = set(true_rows) | set(false_rows)
    tops = {}  # tree id -> its nodes that are no other node's child, in the listed order
    for row, tree in enumerate(tree_ids):
        tops.setdefault(tree, [])
        if row not in children:
            tops[tree].append(row)
    for tree, rows in tops.items():
        if len(rows) != 1:
            refuse(
                ctx,
                node,
                f"tree {tree} has {len(rows)} nodes that are no other node's child; "
                "a tree has one root",
            )
    roots = [rows[0] for rows in tops.values()]
    return _Forest(
        features,
        modes,
        true_rows,
        false_rows,
        missing,
        values,
        [None] * count,
        leaf_weights,
        roots,
        labels,
    )


# -- TreeEnsemble (version 5): branch nodes and leaves apart ------------------------------------


def _forest_v5(ctx, node):
    features = _int_list(ctx, node, "nodes_featureids")
    count = len(features)
    modes_tensor = attribute(ctx, node, "nodes_modes", required=True)
    modes = [int(m) for m in np.asarray(modes_tensor).ravel()]
    if len(modes) != count:
        refuse(ctx, node, f"nodes_modes has {len(modes)} entries, the nodes {count}")
    for k, mode in enumerate(modes):
        if not 0 <= mode <= MEMBER:
            refuse(ctx, node, f"node {k}: mode {mode} is not one of 0 .. {MEMBER}")
    splits = np.asarray(attribute(ctx, node, "nodes_splits", required=True)).ravel()
    if splits.size != count:
        refuse(ctx, node, f"nodes_splits has {splits.size} entries, the nodes {count}")
    true_ids = _int_list(ctx, node, "nodes_truenodeids", count)
    false_ids = _int_list(ctx, node, "nodes_falsenodeids", count)
    true_leafs = _int_list(ctx, node, "nodes_trueleafs", count)
    false_leafs = _int_list(ctx, node, "nodes_falseleafs", count)
    missing = node.attributes.get("nodes_missing_value_tracks_true")
    missing = [0] * count if missing is None or len(missing) == 0 else [int(v) for v in missing]
    if len(missing) != count:
        refuse(ctx, node, f"nodes_missing_value_tracks_true has {len(missing)} entries")
    targets = _int_list(ctx, node, "leaf_targetids")
    leaves = len(targets)
    weights = np.asarray(attribute(ctx, node, "leaf_weights", required=True)).ravel()
    if weights.size != leaves:
        refuse(ctx, node, f"leaf_weights has {weights.size} entries, leaf_targetids {leaves}")
    roots = _int_list(ctx, node, "tree_roots")
    if not roots:
        refuse(ctx, node, "tree_roots is empty")

    member_sets = [None] * count
    members = node.attributes.get("membership_values")
    if any(mode == MEMBER for mode in modes):
        if members is None:
            refuse(ctx, node, "a BRANCH_MEMBER node needs membership_values")
        groups = [[]]
        for value in np.asarray(members, dtype=np.float64).ravel():
            if np.isnan(value):
                groups.append([])
            else:
                groups[-1].append(float(value))
        member_rows = [k for k, mode in enumerate(modes) if mode == MEMBER]
        if len(groups) - 1 < len(member_rows):
            refuse(
                ctx,
                node,
                f"membership_values has {len(groups) - 1} NaN-ended sets for "
                f"{len(member_rows)} BRANCH_MEMBER nodes",
            )
        for k, row in enumerate(member_rows):
            member_sets[row] = groups[k]

    def child(k, ids, leafs, which):
        target = ids[k]
        limit = leaves if leafs[k] else count
        if not 0 <= target < limit:
            kind = "leaf" if leafs[k] else "node"
            refuse(ctx, node, f"node {k}: its {which} {kind} {target} is not in 0 .. {limit - 1}")
        return count + target if leafs[k] else target

    true_rows = [child(k, true_ids, true_leafs, "true") for k in range(count)]
    false_rows = [child(k, false_ids, false_leafs, "false") for k in range(count)]
    root_rows = []
    for k, root in enumerate(roots):
        is_leaf = (
            0 <= root < count
            and true_leafs[root]
            and false_leafs[root]
            and true_ids[root] == false_ids[root]
        )
        limit = leaves if is_leaf else count
        if not 0 <= root < limit:
            refuse(ctx, node, f"tree {k}: its root {root} is not in 0 .. {count - 1}")
        root_rows.append(count + root if is_leaf else root)
    labels = [f"node {k}" for k in range(count)] + [f"leaf {j}" for j in range(leaves)]
    return _Forest(
        features + [0] * leaves,
        modes + [LEAF] * leaves,
        true_rows + [-1] * leaves,
        false_rows + [-1] * leaves,
        missing + [0] * leaves,
        [float(v) for v in splits] + [0.0] * leaves,
        member_sets + [None] * leaves,
        [None] * count + [[(t, float(w))] for t, w in zip(targets, weights, strict=True)],
        root_rows,
        labels,
    )


# -- checks and the op's inputs ------------------------------------------------------------------


def _check(ctx, node, forest, n_targets, width):
    """LoweringError naming the tree node at fault; else the deepest tree's depth."""
    for row, mode in enumerate(forest.modes):
        if mode == LEAF:
            for target, _ in forest.leaf_weights[row] or ():
                if not 0 <= target < n_targets:
                    refuse(
                        ctx,
                        node,
                        f"{forest.labels[row]}: target {target} is not in 0 .. {n_targets - 1}",
                    )
            continue
        feature = forest.features[row]
        if feature < 0 or (width is not None and feature >= width):
            bound = f"0 .. {width - 1} (X has {width} features)" if width is not None else ">= 0"
            refuse(ctx, node, f"{forest.labels[row]}: feature id {feature} is not in {bound}")
    return _depth(ctx, node, forest)


def _depth(ctx, node, forest):
    """The largest number of branch nodes on a path from a root; LoweringError for a cycle or
    a path deeper than MAX_DEPTH."""
    depth = [-1] * len(forest.modes)  # -1 not seen, -2 on the current path
    for root in forest.roots:
        stack = [root]
        while stack:
            row = stack[-1]
            if forest.modes[row] == LEAF:
                depth[row] = 0
                stack.pop()
                continue
            kids = (forest.true_children[row], forest.false_children[row])
            waiting = [kid for kid in kids if depth[kid] < 0]
            for kid in waiting:
                if depth[kid] == -2:
                    refuse(ctx, node, f"{forest.labels[row]}: a child leads back to it (a cycle)")
            if waiting:
                depth[row] = -2
                stack.extend(waiting)
                if len(stack) > MAX_DEPTH * 2 + 2:
                    refuse(ctx, node, f"{forest.labels[row]}: a tree deeper than {MAX_DEPTH}")
                continue
            depth[row] = 1 + max(depth[kid] for kid in kids)
            if depth[row] > MAX_DEPTH:
                refuse(ctx, node, f"{forest.labels[row]}: a tree deeper than {MAX_DEPTH}")
            stack.pop()
    return max(depth[root] for root in forest.roots)


def _padded(values, dtype):
    return np.array(list(values) + [0], dtype=dtype)


def _emit(ctx, node, forest, x, outputs, settings, base, labels=None):
    """Check `forest` and emit the TreeEnsemble op: `settings` maps the slots N_TARGETS,
    AGGREGATE, POST, OUT_DTYPE, KIND, ALL_POSITIVE to values."""
    dims = ctx.tensor(x).dims
    if dims is not None and len(dims) != 2:
        refuse(ctx, node, f"X has rank {len(dims)}; the tree ensembles take [N, F]")
    width = dims[1] if dims is not None and isinstance(dims[1], int) else None
    depth = _check(ctx, node, forest, settings[trees.N_TARGETS], width)
    rows = []
    member_values, weight_targets, weight_values = [], [], []
    for row, mode in enumerate(forest.modes):
        first = stop = 0
        if mode == MEMBER:
            first = len(member_values)
            member_values.extend(forest.member_sets[row])
            stop = len(member_values)
        elif mode == LEAF:
            first = len(weight_values)
            for target, weight in forest.leaf_weights[row]:
                weight_targets.append(target)
                weight_values.append(weight)
            stop = len(weight_values)
        rows.append(
            (
                forest.features[row] if mode != LEAF else 0,
                mode,
                max(forest.true_children[row], 0),
                max(forest.false_children[row], 0),
                1 if forest.missing_true[row] else 0,
                first,
                stop,
            )
        )
    slots = [0] * trees.SLOTS
    for slot, value in settings.items():
        slots[slot] = int(value)
    slots[trees.MAX_DEPTH] = depth
    slots[trees.N_NODES] = len(rows)
    slots[trees.N_TREES] = len(forest.roots)
    slots[trees.N_WEIGHTS] = len(weight_values)
    slots[trees.N_BASE] = len(base)
    slots[trees.N_MEMBERS] = len(member_values)
    arrays = [
        np.array(rows, dtype=np.int64).reshape(-1).tolist() + [0],
        _padded(forest.thresholds, np.float64),
        _padded(forest.roots, np.int64),
        _padded(weight_targets, np.int64),
        _padded(weight_values, np.float64),
        _padded(base, np.float64),
        _padded(member_values, np.float64),
    ]
    arrays[0] = np.array(arrays[0], dtype=np.int64)
    if labels is not None:
        arrays.append(np.array(labels, dtype=np.int64))
    names = []
    for role, array in zip(
        ("nodes", "thresholds", "roots", "targets", "weights", "base", "members", "labels"),
        arrays,
        strict=False,
    ):
        name = ctx.fresh_name(f"tree_{role}")
        ctx.set_constant(name, array)
        names.append(name)
    ctx.emit("TreeEnsemble", [x] + names, outputs, {"slots": slots})


def _input(ctx, node, allowed):
    x = node.inputs[0]
    dtype = ctx.tensor(x).dtype
    if dtype != DType.UNDEFINED and dtype not in allowed:
        refuse(
            ctx,
            node,
            f"X is {DType(dtype).name.lower()}; the op takes "
            f"{', '.join(sorted(DType(d).name.lower() for d in allowed))}",
        )
    return x, dtype


def _base(ctx, node, n_targets):
    base = _float_list(ctx, node, "base_values", "base_values_as_tensor", required=False) or []
    if len(base) not in (0, n_targets):
        refuse(
            ctx, node, f"{len(base)} base values for {n_targets} targets (give 0 or {n_targets})"
        )
    return base


def _post(ctx, node):
    """The post transform code (a string before version 5, an int from it on)."""
    post = attribute(ctx, node, "post_transform", "NONE")
    if isinstance(post, int):
        if not trees.NONE <= post <= trees.PROBIT:
            refuse(ctx, node, f"post_transform {post} is not one of 0 .. 4")
        return post
    return _strings_to_codes(ctx, node, [post], _POSTS, "post_transform")[0]


def _regressor_post(ctx, node, post, n_targets):
    if n_targets == 1 and post in (trees.LOGISTIC, trees.SOFTMAX, trees.SOFTMAX_ZERO):
        refuse(
            ctx,
            node,
            "a post transform other than NONE or PROBIT on one target is not "
            "supported (onnxruntime does not apply it, the specification does)",
        )
    return post


@register_ml_converter("TreeEnsembleRegressor", (1, 3))
def tree_ensemble_regressor(ctx, node):
    """TreeEnsembleRegressor: X [N, F] -> Y [N, n_targets] float32."""
    x, _ = _input(ctx, node, _INPUT_TYPES)
    n_targets = int(attribute(ctx, node, "n_targets", 1))
    if n_targets < 1:
        refuse(ctx, node, f"n_targets {n_targets}: need at least 1")
    forest = _legacy_forest(ctx, node, "target")
    aggregate = attribute(ctx, node, "aggregate_function", "SUM")
    aggregate = _strings_to_codes(ctx, node, [aggregate], _AGGREGATES, "aggregate_function")[0]
    post = _regressor_post(ctx, node, _post(ctx, node), n_targets)
    settings = {
        trees.N_TARGETS: n_targets,
        trees.AGGREGATE: aggregate,
        trees.POST: post,
        trees.OUT_DTYPE: DType.FLOAT32,
        trees.KIND: trees.REGRESSOR,
    }
    _emit(ctx, node, forest, x, node.outputs[:1], settings, _base(ctx, node, n_targets))


@register_ml_converter("TreeEnsembleClassifier", (1, 3), (DType.INT64, DType.FLOAT32))
def tree_ensemble_classifier(ctx, node):
    """TreeEnsembleClassifier: X [N, F] -> Y [N] int64 labels, Z [N, classes] float32."""
    x, _ = _input(ctx, node, _INPUT_TYPES)
    refuse_string_labels(ctx, node)
    labels = _int_list(ctx, node, "classlabels_int64s")
    if len(labels) < 2:
        refuse(ctx, node, f"{len(labels)} class labels: a classifier needs at least 2")
    forest = _legacy_forest(ctx, node, "class")
    post = _post(ctx, node)
    used = {t for weights in forest.leaf_weights if weights for t, _ in weights}
    kind = trees.CLASSIFIER
    all_positive = all(w >= 0 for weights in forest.leaf_weights if weights for _, w in weights)
    if len(labels) == 2 and len(used) == 1:
        kind = trees.BINARY
        if used != {0}:
            refuse(
                ctx,
                node,
                "a binary classifier with weights for class 1 only is not "
                "supported (weights for class 0, the margin of class 1, are)",
            )
        if post not in (trees.NONE, trees.LOGISTIC):
            refuse(
                ctx,
                node,
                "a binary classifier (weights for one class) takes post "
                "transform NONE or LOGISTIC only",
            )
        base_given = _float_list(ctx, node, "base_values", "base_values_as_tensor", False)
        if base_given is not None and len(base_given) > 1:
            refuse(
                ctx,
                node,
                "a binary classifier (weights for one class) takes at most one base value",
            )
        base = base_given or []
    else:
        base = _base(ctx, node, len(labels))
    settings = {
        trees.N_TARGETS: len(labels),
        trees.AGGREGATE: trees.SUM,
        trees.POST: post,
        trees.OUT_DTYPE: DType.FLOAT32,
        trees.KIND: kind,
        trees.ALL_POSITIVE: all_positive,
    }
    y, z = (list(node.outputs) + ["", ""])[:2]
    outputs = [z or ctx.fresh_name("scores")] + ([y] if y else [])
    _emit(ctx, node, forest, x, outputs, settings, base, labels)


@register_ml_converter("TreeEnsemble", (5,), (SAME_AS_X,))
def tree_ensemble(ctx, node):
    """TreeEnsemble (ai.onnx.ml 5): X [N, F] -> Y [N, n_targets], X's element type."""
    x, dtype = _input(ctx, node, {DType.FLOAT32, DType.FLOAT64})
    n_targets = int(attribute(ctx, node, "n_targets", required=True))
    if n_targets < 1:
        refuse(ctx, node, f"n_targets {n_targets}: need at least 1")
    aggregate = int(attribute(ctx, node, "aggregate_function", trees.SUM))
    if not trees.AVERAGE <= aggregate <= trees.MAX:
        refuse(ctx, node, f"aggregate_function {aggregate} is not one of 0 .. 3")
    post = _regressor_post(ctx, node, _post(ctx, node), n_targets)
    forest = _forest_v5(ctx, node)
    settings = {
        trees.N_TARGETS: n_targets,
        trees.AGGREGATE: aggregate,
        trees.POST: post,
        trees.OUT_DTYPE: dtype if dtype != DType.UNDEFINED else DType.FLOAT32,
        trees.KIND: trees.REGRESSOR,
    }
    if dtype == DType.UNDEFINED:
        refuse(ctx, node, "the element type of X is not known at lowering")
    _emit(ctx, node, forest, x, node.outputs[:1], settings, [])
