#!/usr/bin/env bash
# Join this machine to a colibri Ray cluster.
#   cluster/start-worker.sh NODE_IP HEAD_ADDRESS   (or env NODE_IP, RAY_HEAD_ADDRESS; HEAD_ADDRESS = ip:port)
# Registers per NUMA node of THIS machine one expert-worker resource (numa_0, numa_1, ...)
# and one sequence-runner resource (runner_numa_0, ...); see numa-resources.sh.
# Extra `ray start` flags: RAY_START_EXTRA. DRY_RUN=1 prints the command instead of running it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node_ip="${1:-${NODE_IP:-}}"
head="${2:-${RAY_HEAD_ADDRESS:-}}"
if [ -z "$node_ip" ] || [ -z "$head" ]; then
    echo "usage: $0 NODE_IP HEAD_IP:PORT   (or set NODE_IP and RAY_HEAD_ADDRESS)" >&2
    exit 2
fi
resources="$("$here/numa-resources.sh")"
cmd=(ray start --address "$head" --node-ip-address "$node_ip" --resources "$resources" --disable-usage-stats)
# shellcheck disable=SC2206
extra=(${RAY_START_EXTRA:-})
cmd+=("${extra[@]}")
if [ "${DRY_RUN:-0}" = "1" ]; then
    printf '%q ' "${cmd[@]}"; echo
    exit 0
fi
exec "${cmd[@]}"
