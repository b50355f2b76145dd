"""Kernel benchmarks: one expert, one MoE layer or one dense/attention op at a time, against this machine's
read bandwidth and torch's own CPU blocks, in the same run.

Role: run.py is `colibri bench kernels` (bandwidth, the kernels table, expert shapes, quality, routing; the
machine() and read_bandwidth() the other families divide by), with table.py, shapes.py, quality.py and
model_quality.py one section each; levels.py is `colibri bench levels` (every SIMD level, alternated);
ops.py is `colibri bench model_ops` (dense products and paged-KV attention vs torch).
"""
