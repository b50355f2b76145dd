"""NUMA benchmark (`colibri bench numa`, `colibri numa bench`): memory placement x thread placement per worker
of this machine's plan, read bandwidth and one expert's speed for each (docs/NUMA.md).

Role: run.py is the benchmark (main is handed on here, the name `colibri numa bench` calls); config.py turns
its experiment file (configs/numa-experiment.yaml) into the parameters it runs with.
"""
from .run import main  # noqa: F401
