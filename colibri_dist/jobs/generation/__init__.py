"""Job kinds generate and score, on a whole LLM: rows -> prompts -> one LLM call per group of shards -> JSONL
rows (job.py: the kinds; rows.py reads rows, llm.py opens the LLM, each.py hands each finished row over;
batch.py is the Ray Data path)."""
