"""How results/scale/stress_qwen3_8L_zen3.json was made: `colibri stress CONFIG` inside a memory cgroup (v1, root).

python results/scale/stress_in_cgroup.py CONFIG OUT [FRACTION] [RUNTIME_MIB]
The group's limit is FRACTION (0.4) x the size of the config's model file + RUNTIME_MIB (1536: Ray's processes,
the Python runtimes and the driver's all-resident reference MoeExecutor, whose mapped pages are reclaimable); the whole
process tree (driver, Ray, workers and their restarts) runs inside it. Prints the group's peak, failcnt, OOM kills.
"""
import json
import os
import sys

import yaml

from colibri_dist.bench.scale.limits import MemoryLimit


def main(config, out, fraction=0.4, runtime_mib=1536):
    size = os.path.getsize(yaml.safe_load(open(config))["model"])
    limit = int(float(fraction) * size) + (int(runtime_mib) << 20)
    with MemoryLimit(limit, name="colibri-stress-limited") as g:
        r = g.run([sys.executable, "-m", "colibri_dist", "stress", config, "--out", out], timeout=3600)
    print(json.dumps({k: v for k, v in r.items() if k not in ("stdout", "stderr")}, indent=1))
    print(r["stdout"][-3000:])
    print(f"model file {size} bytes, group limit {limit} bytes")
    return r["rc"]


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
