#!/usr/bin/env bash
# Print the Ray --resources JSON for this machine: per NUMA node that has CPUs one
# expert-worker resource and one sequence-runner resource,
# {"numa_0": W, "numa_1": W, ..., "runner_numa_0": R, ...}, W = WORKERS_PER_NODE (default 1),
# R = RUNNERS_PER_NODE (default 1; 0 = no runner slots).
# Memory-only nodes get none (no worker can run there). No NUMA info -> {"numa_0": W}.
# SYSFS_ROOT (default /sys) lets you point it at a copy of /sys.
set -euo pipefail
root="${SYSFS_ROOT:-/sys}"
per_node="${WORKERS_PER_NODE:-1}"
runners="${RUNNERS_PER_NODE:-1}"
case "$per_node" in ''|*[!0-9]*|0) echo "numa-resources.sh: WORKERS_PER_NODE must be a positive integer, got '$per_node'" >&2; exit 2;; esac
case "$runners" in ''|*[!0-9]*) echo "numa-resources.sh: RUNNERS_PER_NODE must be an integer >= 0, got '$runners'" >&2; exit 2;; esac
entries=()
for dir in "$root"/devices/system/node/node[0-9]*; do
    [ -d "$dir" ] || continue
    id="${dir##*/node}"
    cpus="$(tr -d '[:space:]' < "$dir/cpulist" 2>/dev/null || true)"
    [ -n "$cpus" ] || continue
    entries+=("$id")
done
if [ "${#entries[@]}" -eq 0 ]; then
    entries=(0)
fi
IFS=$'\n' sorted=($(printf '%s\n' "${entries[@]}" | sort -n)); unset IFS
json="{"
for id in "${sorted[@]}"; do
    json+="\"numa_${id}\": ${per_node}, "
done
if [ "$runners" -gt 0 ]; then
    for id in "${sorted[@]}"; do
        json+="\"runner_numa_${id}\": ${runners}, "
    done
fi
echo "${json%, }}"
