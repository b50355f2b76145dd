#!/usr/bin/env bash
# Start the Ray head of a colibri cluster on this machine.
#   cluster/start-head.sh NODE_IP [PORT]        (or env NODE_IP, RAY_PORT; default port 6379)
# Registers per NUMA node one expert-worker and one runner resource (numa_<i>, runner_numa_<i>; see
# numa-resources.sh) so pool workers started with worker_resources="numa" land
# one per socket. Extra `ray start` flags: RAY_START_EXTRA. DRY_RUN=1 prints the
# command instead of running it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node_ip="${1:-${NODE_IP:-}}"
port="${2:-${RAY_PORT:-6379}}"
if [ -z "$node_ip" ]; then
    echo "usage: $0 NODE_IP [PORT]   (the address other machines reach this one at; or set NODE_IP)" >&2
    exit 2
fi
resources="$("$here/numa-resources.sh")"
cmd=(ray start --head --node-ip-address "$node_ip" --port "$port" --resources "$resources"
     --include-dashboard=false --disable-usage-stats)
# shellcheck disable=SC2206
extra=(${RAY_START_EXTRA:-})
cmd+=("${extra[@]}")
if [ "${DRY_RUN:-0}" = "1" ]; then
    printf '%q ' "${cmd[@]}"; echo
    exit 0
fi
exec "${cmd[@]}"
