"""The .colibri container: spec, mmap reader, streaming writer, HF converter, quantizers."""
