"""What every job run shares: input shards + resume manifest (shards.py, signature.py), one run per output dir
(outlock.py), progress display (progress.py), where the MoE layers run (executors.py)."""
