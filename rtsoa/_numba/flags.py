"""cheap-flag-lookups: Numba's compile-flag objects made cheap to hash and compare.

Process-wide: the flag objects are Numba's own and every compile in the process looks its
overloads up by them, so this cannot be limited to rtsoa's functions. It stays because of its
gain, and is proposed to Numba (docs/numba-upstream.md).

Every typing of an `@overload`ed function (`np.empty`, `len`, `max`, ... and rtsoa's own) looks
its implementation up in a dict keyed by (context, argument types, flags). Numba's
`TargetConfig.__hash__` and `__eq__` rebuild a dict of all options through their property getters
on each call, so a cold `rtsoa run datasets/lowered-4k.rtsoa` spent ~12 % of its profiled time
(9.4 million getter calls, 170,000 comparisons) in them. The hash Numba computes depends on the
option names only (it sorts the dict's keys), so it is memoised per class with the same value;
equality compares, for two objects of one class, only the options set in either (every other
option holds the class's default in both), and asks Numba's own comparison for objects of
different classes. Results are unchanged: only the lookups get cheaper (cold `lowered-4k` in
alternated runs: 68.8 / 68.0 s user before, 62.8 / 65.2 s after). Fallback: Numba's methods.
"""

from rtsoa._numba import compat

_CONFIG = "numba.core.targetconfig.TargetConfig."


def _install():
    if not compat.register(
        "cheap-flag-lookups",
        "process",
        [_CONFIG + "__hash__", _CONFIG + "__eq__", _CONFIG + "__init__"],
        "compile-flag objects hashed once per class and compared by the options set",
    ):
        return False
    from numba.core import targetconfig

    config_class = targetconfig.TargetConfig
    if getattr(config_class, "_rtsoa_cheap_lookups", False):
        return True
    if "_values" not in config_class.__init__.__code__.co_names:
        compat.skip("cheap-flag-lookups", "TargetConfig no longer keeps its options in _values")
        return False
    numba_eq = config_class.__eq__
    numba_hash = config_class.__hash__
    hashes = {}

    def __hash__(self):
        cls = type(self)
        value = hashes.get(cls)
        if value is None:
            value = hashes[cls] = numba_hash(self)
        return value

    def __eq__(self, other):
        if self is other:
            return True
        if type(self) is not type(other):
            return numba_eq(self, other)
        mine, theirs = self._values, other._values
        if mine == theirs:
            return True
        # options set in neither hold the class's defaults in both: compare only the others
        for name in mine.keys() | theirs.keys():
            if getattr(self, name) != getattr(other, name):
                return False
        return True

    config_class.__hash__ = __hash__
    config_class.__eq__ = __eq__
    config_class._rtsoa_cheap_lookups = True
    return True


INSTALLED = _install()
