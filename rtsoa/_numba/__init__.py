"""Every use of a Numba or llvmlite internal in rtsoa, in one package, each listed with the
attributes it needs in the compat table (`compat`, `python -m rtsoa._numba`).

- `dispatcher`: rtsoa's dispatcher classes (Numba's CPU dispatcher subclassed), the
  wrapper-less internal functions and the unchecked compiled entry points;
- `caching`: rtsoa's disk cache (Numba's function cache subclassed): the package-wide stamp,
  the short load, the tolerant index, reads of the cache index;
- `linking`: out-of-line functions linked once, called by symbol;
- `lazy_bitcode`: cached machine code loaded without parsing its bitcode;
- `bundle`: the Numba type of rtsoa's array bundles;
- `typing_only`: Numba's type inference without code generation;
- `literal_args`: branches on literal arguments pruned before typing (per-dtype op entries);
- `flags`, `messages`: the two process-wide patches (compile-flag lookups, error markup);
- `symbols`: C symbols added to the JIT.
- `events`: Numba's compile events observed (a batch job's clock pauses while compiling).

Outside this package rtsoa uses Numba's public API only (`numba.njit`, `numba.extending`,
`numba.types`, `cfunc`, `carray`, `llvmlite.ir` in `@intrinsic` code generation); a test checks
it (tests/test_numba_compat.py).
"""
