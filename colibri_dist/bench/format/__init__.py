"""Container benchmarks: what writing a .colibri costs and what checking one on first use costs.

Role: convert.py is `colibri bench convert` (the HF -> .colibri converter against a plain read of the same
shards: speed, peak memory, one read per expert); integrity.py is `colibri bench integrity` (CRC-32, the
finiteness scan, Model.verify() and an engine's first forward with checksums on and off).
"""
