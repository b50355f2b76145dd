"""What every job run shares: the plan (plan.py), input shards + resume manifest (shards.py), the resume
signature (signature.py), partial rows of unwritten shards (partial.py), one run per output dir (outlock.py),
progress display (progress.py), where the MoE layers run (executors.py)."""
