"""Job kinds generate and score: rows -> prompts -> one LLM -> resumable JSONL shards (job.py runs them;
rows, plan, llm, metrics and batch are its parts; batch.py is the Ray Data path)."""
