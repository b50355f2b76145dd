"""Pool benchmark: the Ray expert pool against the in-process engine, on one layer and on the whole model.

Role: run.py is `colibri bench pool` (layer throughput and per-call overhead vs MoeExecutor, worker imbalance per
balancer, routing cost); whole_model.py is its whole-model part (generation through sequence runners vs LLM
in process, and the scale simulation calibrated from it).
"""
