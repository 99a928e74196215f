"""Every jitted function of the device and of the test tooling is compiled with one of the named
profiles of `rtsoa._jit`, whose options are fixed (the malloc + free fast path is tuned on them)."""

import importlib
import pkgutil

import pytest
from numba.core.registry import CPUDispatcher

import rtsoa.device
import rtsoa.testing
from rtsoa import _jit

BASE = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
EXPECTED = {
    "jit_inline_ir": {**BASE, "_nrt": False, "inline": "always"},
    "jit_inline_llvm": {**BASE, "_nrt": False, "forceinline": True},
    "jit_out_of_line": {**BASE, "_nrt": False, "forceinline": False},
    "jit_with_nrt": {**BASE, "forceinline": False},
    "jit_inline_ir_nrt": {**BASE, "inline": "always"},
}
# Profiles whose functions only jitted code calls directly: compiled without a CPython wrapper
WRAPPERLESS = {"jit_inline_llvm", "jit_out_of_line", "jit_with_nrt"}


def _target_options(profile):
    """The dispatcher options a function compiled with `profile` carries (cache is separate)."""
    options = {k: v for k, v in profile.options.items() if k != "cache"}
    if profile.wrapperless:
        options.update(_jit.NO_WRAPPER)
    return options


def jitted_functions():
    for package in (rtsoa.device, rtsoa.testing):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, CPUDispatcher) and value.py_func.__module__ == info.name:
                    yield f"{info.name}.{name}", value


def test_profiles_have_their_documented_options():
    assert {profile.name: profile.options for profile in _jit.PROFILES} == EXPECTED
    assert {profile.name for profile in _jit.PROFILES if profile.wrapperless} == WRAPPERLESS
    for profile in _jit.PROFILES:
        assert profile.__doc__ and getattr(_jit, profile.name) is profile


@pytest.mark.parametrize("name, function", list(jitted_functions()))
def test_every_device_function_uses_a_profile(name, function):
    options = dict(function.targetoptions)
    assert options.pop("nopython") is True
    assert isinstance(function, _jit.RtsoaDispatcher), name
    assert function._cache.__class__.__name__ == "RtsoaFunctionCache", name
    profiles = [profile for profile in _jit.PROFILES if _target_options(profile) == options]
    assert len(profiles) == 1, f"{name}: {options}"
    assert isinstance(function, _jit.InternalDispatcher) == profiles[0].wrapperless, name


def test_the_hot_path_keeps_its_inlining():
    from rtsoa.device import blocks, handles, hazards, malloc, streams, tables

    # the device API a launch calls: a real call would copy the device state (34 arrays), and
    # an out-of-line function is linked by symbol, so LLVM could no longer inline it either
    for function in (
        malloc.device_malloc,
        malloc.device_free,
        handles.block_location,
        hazards.device_access,
        streams.launch_begin,
        streams.event_record,
        streams.stream_wait_event,
    ):
        assert function.targetoptions["forceinline"] is True, function
    for helper in (
        tables.pop_block_slot,
        tables.pop_segment_slot,
        blocks.split,
        handles.block_slot,
    ):
        assert helper.targetoptions["inline"] == "always"


def test_a_wrapperless_function_called_from_python_runs_its_twin():
    """Functions compiled for jitted callers have no CPython wrapper; a Python call must run a
    twin compiled with one (a jump to the missing wrapper would crash the process), and the
    twin's disk-cache entries must not be the wrapper-less ones (Numba's cache index does not
    record the wrapper flags). Caught regression: calling `checksum.mix` from Python with the
    wrapper-less dispatcher's own entry point."""
    import numpy as np

    from rtsoa.kernels.checksum import mix, mix_numpy

    assert isinstance(mix, _jit.InternalDispatcher)
    salt = np.uint64(12345)
    assert mix(np.int64(7), salt) == mix_numpy(np.array([7]), np.array([salt], np.uint64))[0]
    twin = mix._python_twin
    assert twin is not None and not isinstance(twin, _jit.InternalDispatcher)
    assert twin.py_func.__qualname__ == mix.py_func.__qualname__ + "__python"
    assert twin.py_func.__code__ is mix.py_func.__code__
    assert not any(key in twin.targetoptions for key in _jit.NO_WRAPPER)


def test_kernels_are_compiled_without_a_python_wrapper():
    """A kernel's own compile is mostly its CPython wrapper (the runtime tuple holds ~60
    arrays); kernels only run inside loops, so the kernel decorator leaves it out."""
    from rtsoa.kernels import REGISTRY

    for info in REGISTRY.entries():
        if info.module.startswith("rtsoa."):
            assert isinstance(info.function, _jit.InternalDispatcher), info.name


def test_constant_arguments_from_jitted_callers_share_one_compile():
    """A jitted caller's constant arguments reach a wrapper-less callee as plain types: Numba
    would otherwise compile the callee (and everything it calls with that argument) once per
    constant value, `f(x, True)` and `f(x, False)` twice. Caught cost: 335 of 823 cached
    signatures of a test run had a literal argument; the op library compiled in 285 s of CPU
    instead of 212 s.
    `literal_args=True` keeps Numba's behaviour for a function whose typing needs the value."""
    from numba import njit

    def add_or_sub(x, add):
        return x + 1 if add else x - 1

    widened = _jit.jit_internal(add_or_sub, cache=False)
    literal = _jit.jit_internal(add_or_sub, cache=False, literal_args=True)

    def make_caller(callee):
        @njit(cache=False)
        def caller(x):
            return callee(x, True) * 100 + callee(x, False) + callee(x, 1 > 0)

        return caller

    assert make_caller(widened)(5) == 6 * 100 + 4 + 6
    assert make_caller(literal)(5) == 6 * 100 + 4 + 6
    assert len(widened.signatures) == 1
    assert not any("Literal" in str(t) for t in widened.signatures[0])
    # Literal[bool](True), Literal[bool](False) and the computed bool: three compiles
    assert len(literal.signatures) == 3


def test_cheap_flag_lookups_keep_numbas_hash_and_equality():
    """`_install_cheap_flag_lookups` (installed on import) answers as Numba's own `__hash__` /
    `__eq__` do, on pairs that exercise each of its shortcuts and its fallback. Mutations it
    catches: the same-class shortcut without the set-values compare (the `released` /
    `nowrapper` pair compares equal), a hash per object instead of per class (equal flags
    hash apart), a comparison of the set options that answers False when their values are
    equal (`plain` vs `default_set`) or True when one is set on one side only (`plain` vs
    `released`, `both` vs `released`)."""
    from numba.core import targetconfig
    from numba.core.compiler import Flags

    assert _jit.CHEAP_FLAG_LOOKUPS
    config_class = targetconfig.TargetConfig

    def numba_values(flags):  # Numba's definition: every option, set or default
        return {name: getattr(flags, name) for name in flags.options}

    def numba_hash(flags):
        return hash(tuple(sorted(numba_values(flags))))

    plain, released, nowrapper = Flags(), Flags(), Flags()
    released.release_gil = True
    nowrapper.no_cpython_wrapper = True
    default_set = Flags()
    default_set.release_gil = Flags.options["release_gil"].default  # set, to its default
    copied = Flags(released)
    both = Flags()
    both.release_gil = True
    both.no_cpython_wrapper = True
    other_default = Flags()  # a set option at its default against another set one
    other_default.no_cpython_wrapper = Flags.options["no_cpython_wrapper"].default
    pairs = [
        (both, released),
        (released, both),
        (default_set, other_default),
        (nowrapper, other_default),
        (plain, plain),
        (plain, Flags()),
        (released, copied),
        (plain, default_set),  # different set values, equal values: the fallback's answer
        (plain, released),
        (released, nowrapper),
    ]
    for a, b in pairs:
        assert (a == b) == (numba_values(a) == numba_values(b)), (a, b)
        assert (a != b) == (numba_values(a) != numba_values(b)), (a, b)
        assert hash(a) == numba_hash(a)
        if a == b:
            assert hash(a) == hash(b)
    assert config_class._rtsoa_cheap_lookups
    # a dict keyed by flags finds an equal, distinct key (what Numba's typing caches do)
    cache = {("key", released): 1}
    assert cache[("key", copied)] == 1
    assert ("key", plain) not in cache
