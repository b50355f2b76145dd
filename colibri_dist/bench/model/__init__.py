"""Whole-model benchmarks: decode and prefill of a whole model, alone and against llama.cpp on the same machine.

Role: run.py is `colibri bench model` (cd.LLM vs transformers bf16 on the OLMoE-shaped benchmark checkpoint;
its checkpoint() and FULL / QUICK shapes are the model the pool, serve and prefix benchmarks run too);
peer.py is `colibri bench peer` (colibri vs llama.cpp, same run), with peer_colibri.py (containers, one engine's
measurement), peer_llama.py (GGUF files, llama-batched-bench) and peer_table.py (medians, ratios, markdown).
"""
