"""Expert-store benchmarks: how fast experts come from each tier, what compression and the cache policies buy,
and what a cache budget costs the engine, each against a baseline taken in the same run.

Role: run.py is `colibri bench store`; tiers.py (load GB/s per tier vs raw reads), zstd.py (ratio and speed,
the disk speed below which it pays), traces.py (synthetic traces and the policies' hit rates vs Belady),
models.py (traces recorded from the oracle tiny models, the lookahead's recall) and engine.py (one MoE
layer's time per tier, same bits) are one section each.
"""
