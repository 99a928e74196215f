"""Tooling shared by rtsoa's tests and asv benchmarks, never used by the product.

Nothing in here is part of a cache key of product code: `rtsoa._jit` stamps these files
with the package stamp plus their own source, and the kernel dispatch does not hash them.
"""
