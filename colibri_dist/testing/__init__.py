"""Test and tool harnesses, off the product path: Ray set-ups for stress runs and tests (cluster.py: one
local Ray with worker hooks, or several raylets on loopback) and the pool scale simulation behind
`bench pool --sim` (simulate.py). Ranked above pool/ (it drives real pools) and below jobs/ (the stress
harness calls it); with pool/ and serve/ray_serve.py the only places that import ray (tests/layering).
"""
