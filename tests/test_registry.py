"""`rtsoa.abi.registry.Registry`, the one shape of rtsoa's name -> entry tables."""

import numpy as np
import pytest

from rtsoa._numba import compat
from rtsoa.abi.registry import Registry
from rtsoa.batch.jobs import JOB_KINDS  # the built-in kinds register there
from rtsoa.errors import UnknownKernelError, UnknownOpError
from rtsoa.executors.base import EXECUTORS
from rtsoa.graph.generators import GENERATORS
from rtsoa.host.ops import HOST_OPS
from rtsoa.kernels import REGISTRY
from rtsoa.lowering import converters
from rtsoa.lowering.fuse import FUSIONS
from rtsoa.ops import OPS


class Unknown(KeyError):
    pass


def test_entries_keep_registration_order_and_ids_follow_sorted_names():
    registry = Registry("thing", Unknown)
    for name in ("b", "c", "a"):
        registry.add(name, name.upper())
    assert list(registry) == ["b", "c", "a"]
    assert list(registry.items()) == [("b", "B"), ("c", "C"), ("a", "A")]
    assert registry.names() == ("a", "b", "c")
    assert registry.ids() == {"a": 0, "b": 1, "c": 2}
    bound = registry.bind(["c", "a", "c"])
    assert bound.dtype == np.int32 and bound.tolist() == [2, 0, 2]


def test_a_name_is_registered_once_unless_replaced_on_purpose():
    registry = Registry("thing", Unknown)
    entry = object()
    assert registry.add("x", entry) is entry
    version = registry.version
    registry.add("x", entry)  # the same entry again: no change
    assert registry.version == version
    with pytest.raises(ValueError, match="thing 'x' is already registered"):
        registry.add("x", object())
    assert registry["x"] is entry
    other = object()
    registry.add("x", other, replace=True)
    assert registry["x"] is other and registry.version == version + 1


def test_unknown_names_raise_the_registrys_error_naming_them():
    registry = Registry("thing", Unknown)
    registry.add("known", 1)
    with pytest.raises(Unknown, match="unknown thing 'missing'; known: known"):
        registry["missing"]
    with pytest.raises(Unknown, match="unknown things 'p', 'q'"):
        registry.bind(["known", "p", "q", "p"])
    with pytest.raises(Unknown, match="unknown thing 'gone'"):
        registry.remove("gone")
    hinted = Registry("widget", Unknown, hint="register it with @widget")
    with pytest.raises(Unknown, match="unknown widget 'w': register it with @widget"):
        hinted["w"]
    big = Registry.of("item", {f"n{k}": k for k in range(40)}, Unknown)
    with pytest.raises(Unknown, match=r"unknown item 'z' \(40 items are registered\)"):
        big["z"]


def test_it_reads_like_a_mapping_even_for_unhashable_names():
    registry = Registry.of("thing", [("a", 1), ("b", 2)], Unknown)
    assert "a" in registry and "z" not in registry and ["a"] not in registry
    assert registry.get("b") == 2 and registry.get("z", 9) == 9 and registry.get(["a"]) is None
    assert len(registry) == 2 and dict(registry) == {"a": 1, "b": 2}
    with pytest.raises(Unknown):
        registry[["a"]]
    registry.remove("a")
    assert list(registry) == ["b"] and registry.ids() == {"b": 0}
    registry["c"] = 3  # item assignment replaces on purpose (a test's monkeypatch)
    registry["b"] = 4
    del registry["c"]
    assert dict(registry) == {"b": 4}


def test_every_rtsoa_registry_has_the_one_shape():
    registries = {
        "kernels": REGISTRY,
        "ops": OPS,
        "executors": EXECUTORS,
        "converters": converters._CONVERTERS,
        "fusions": FUSIONS,
        "job kinds": JOB_KINDS,
        "compat table": compat.TABLE,
        "graph generators": GENERATORS,
        "host ops": HOST_OPS,
    }
    for name, registry in registries.items():
        assert isinstance(registry, Registry), name
        assert len(registry) > 0, name
    with pytest.raises(UnknownKernelError, match="unknown kernel 'NoSuchKernel'"):
        REGISTRY.bind(["OpLaunch", "NoSuchKernel"])
    with pytest.raises(UnknownOpError, match="unknown op 'NoSuchOp'"):
        OPS["NoSuchOp"]
    assert REGISTRY.names() == tuple(sorted(REGISTRY))  # dispatch ids: sorted names
    assert list(FUSIONS) == [  # the order they run in
        "batch_norm",
        "batch_norm_activation",
        "conv_activation",
        "matmul_bias",
        "gemm_activation",
        "winograd",
    ]
