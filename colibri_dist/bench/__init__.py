"""Benchmarks: each prints ratios against a baseline measured in the same run and writes JSON.

`python -m colibri_dist.bench NAME [options]`, NAME a module here exposing
`main(argv) -> int` (kernels, store, pool, convert, numa).
"""
