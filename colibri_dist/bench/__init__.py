"""Benchmarks: each prints ratios against a baseline measured in the same run and writes JSON.
`python -m colibri_dist.bench NAME [options]` (or `colibri bench NAME`), NAME one of __main__.NAMES,
runs the `main(argv) -> int` of its module (__main__.MODULES). One folder per family:
  kernels/     kernels, levels, model_ops: one expert, layer or op vs the read bandwidth and torch
  model/       model, peer: the whole model's decode and prefill, alone and against llama.cpp
  scale/       scale: real-size shapes, in RAM and larger than RAM
  store/       store: expert-store tiers, compression, cache policies
  format/      convert, integrity: writing a .colibri and checking it on first use
  pool/        pool: the Ray expert pool vs the in-process engine
  numa/        numa: memory and thread placement per worker
  generation/  generate, prefix, serve: the layers above the model
"""
