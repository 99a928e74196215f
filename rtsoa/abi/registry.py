"""The one shape of rtsoa's registries: a name -> entry table filled by registration.

Kernels (`rtsoa.kernels.registry`), ops (`rtsoa.ops.registry`), executors, ONNX converters,
lowering fusions, batch job kinds and the Numba compat table are each a `Registry`:

    EXECUTORS = Registry("executor", ValueError)
    EXECUTORS.add("sequential", SequentialExecutor)
    EXECUTORS["sequential"]          # the entry; an unknown name raises the registry's error
    EXECUTORS.names()                # sorted: a name's position there is its id
    EXECUTORS.bind(["a", "b"])       # int32 ids of names, all unknown ones named at once

A registry iterates in registration order (what listings and help texts show); ids come from
the sorted names, so they do not depend on the order modules were imported in. Registering a
name twice is an error unless the new entry is the one registered (`replace=True` lets a
caller redefine an entry on purpose, e.g. a module reloaded by a test). `version` grows with
every change, so memoized derived tables know when to rebuild.

This module imports nothing of rtsoa: the error a registry raises for an unknown name is
given to it (a KeyError subclass, so `name in registry` and `registry.get` work as for a dict).
"""

from collections.abc import Mapping

import numpy as np


class Registry(Mapping):
    """Name -> entry, in registration order (see the module docstring)."""

    def __init__(self, what, unknown=KeyError, hint=""):
        self.what = what  # what an entry is, for messages ("kernel", "op", ...)
        self._unknown = unknown  # the error class of an unknown name
        self._hint = hint  # how to register one, appended to the unknown-name error
        self._entries = {}
        self._ids = None  # {name: id}, memoized until the next change
        self.version = 0

    @classmethod
    def of(cls, what, entries, unknown=KeyError, hint=""):
        """A registry holding `entries` (a mapping or (name, entry) pairs), in their order."""
        registry = cls(what, unknown, hint)
        for name, entry in dict(entries).items():
            registry.add(name, entry)
        return registry

    def add(self, name, entry, replace=False):
        """Register `entry` under `name`; returns it. ValueError if `name` is registered to
        another entry, unless `replace`."""
        old = self._entries.get(name, _ABSENT)
        if old is not _ABSENT:
            if old is entry or old == entry:
                return entry  # registered again from the same place: no change
            if not replace:
                raise ValueError(f"{self.what} {name!r} is already registered")
        self._entries[name] = entry
        self._changed()
        return entry

    def remove(self, name):
        """Unregister `name` (the registry's error if it is unknown); names sorted after it
        shift their ids."""
        if name not in self._entries:
            raise self._error([name])
        del self._entries[name]
        self._changed()

    def __setitem__(self, name, entry):
        """`registry[name] = entry`: register or replace on purpose (`add(..., replace=True)`),
        e.g. a test patching one entry for a while."""
        self.add(name, entry, replace=True)

    def __delitem__(self, name):
        self.remove(name)

    def _changed(self):
        self._ids = None
        self.version += 1

    def _error(self, names):
        listed = ", ".join(repr(name) for name in names)
        message = f"unknown {self.what}{'s' if len(names) > 1 else ''} {listed}"
        if self._hint:
            message += f": {self._hint}"
        elif len(self._entries) <= _LISTED:
            message += f"; known: {', '.join(map(str, self._entries)) or 'none'}"
        else:
            message += f" ({len(self._entries)} {self.what}s are registered)"
        return self._unknown(message)

    def __getitem__(self, name):
        try:
            return self._entries[name]
        except KeyError:
            raise self._error([name]) from None
        except TypeError:  # an unhashable name is unknown too
            raise self._error([name]) from None

    def get(self, name, default=None):
        try:
            return self._entries.get(name, default)
        except TypeError:
            return default

    def __contains__(self, name):
        try:
            return name in self._entries
        except TypeError:
            return False

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    # A registry is one table, compared and hashed by identity (kept as a weak key by caches),
    # not by its contents as Mapping would.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self):
        return f"<Registry of {len(self)} {self.what}s>"

    def names(self):
        """The registered names, sorted: a name's position is its id."""
        return tuple(sorted(self._entries))

    def ids(self):
        """{name: id} (memoized until the next change)."""
        if self._ids is None:
            self._ids = {name: index for index, name in enumerate(self.names())}
        return self._ids

    def bind(self, names):
        """The ids of `names` as an int32 array; the registry's error names every unknown
        one."""
        ids = self.ids()
        unknown = list(dict.fromkeys(name for name in names if name not in ids))
        if unknown:
            raise self._error(unknown)
        return np.array([ids[name] for name in names], dtype=np.int32)


_ABSENT = object()
_LISTED = 12  # an unknown-name error lists the known names of registries this small
