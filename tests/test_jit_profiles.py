"""Every jitted function of the device and of the test tooling is compiled with one of the named
profiles of `rtsoa._jit`, whose options are fixed (the malloc + free fast path is tuned on them)."""

import importlib
import pkgutil

import pytest
from numba.core.registry import CPUDispatcher

import rtsoa.device
import rtsoa.testing
from rtsoa import _jit

BASE = {"cache": True, "nogil": True, "boundscheck": False}
EXPECTED = {
    "jit_inline_ir": {**BASE, "_nrt": False, "inline": "always"},
    "jit_inline_llvm": {**BASE, "_nrt": False, "forceinline": True},
    "jit_out_of_line": {**BASE, "_nrt": False, "forceinline": False},
    "jit_with_nrt": {**BASE, "forceinline": False},
}


def jitted_functions():
    for package in (rtsoa.device, rtsoa.testing):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, CPUDispatcher) and value.py_func.__module__ == info.name:
                    yield f"{info.name}.{name}", value


def test_profiles_have_their_documented_options():
    assert {profile.name: profile.options for profile in _jit.PROFILES} == EXPECTED
    for profile in _jit.PROFILES:
        assert profile.__doc__ and getattr(_jit, profile.name) is profile


@pytest.mark.parametrize("name, function", list(jitted_functions()))
def test_every_device_function_uses_a_profile(name, function):
    options = dict(function.targetoptions)
    assert options.pop("nopython") is True
    assert function._cache.__class__.__name__ == "FunctionCache", name
    profiles = [
        profile.name
        for profile in _jit.PROFILES
        if {k: v for k, v in profile.options.items() if k != "cache"} == options
    ]
    assert len(profiles) == 1, f"{name}: {options}"


def test_the_hot_path_keeps_its_inlining():
    from rtsoa.device import allocator, blocks, handles, tables

    assert allocator.device_malloc.targetoptions["forceinline"] is True
    assert allocator.device_free.targetoptions["forceinline"] is True
    for helper in (
        tables.pop_block_slot,
        tables.pop_segment_slot,
        blocks.split,
        handles.block_slot,
    ):
        assert helper.targetoptions["inline"] == "always"
