"""`colibri bench scale` (python -m colibri_dist.bench scale): real-size shapes, in RAM and larger than RAM.

Role: the package of one benchmark; run.py is its entry point, the other files one job each (shapes,
checkpoint, routing, prepare, limits, disk, child, measure, summary, report; the pool stage: pool, pool_groups,
pool_summary).
"""
