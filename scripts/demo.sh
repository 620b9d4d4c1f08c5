#!/usr/bin/env bash
# Installs what is missing, builds, and runs a local Fulcrum cluster on
# 127.0.0.1: 2 parameter servers in sync mode and 3 workers running the
# custom-loop example (a linear regression trained through the servers).
# Every output line is prefixed with its process's role and index.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
bazel build //ps_server:ps_server //examples:custom_loop
bin=$(bazel info bazel-bin 2>/dev/null)

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ps_hosts="127.0.0.1:$(free_port),127.0.0.1:$(free_port)"
worker_hosts="127.0.0.1:$(free_port),127.0.0.1:$(free_port),127.0.0.1:$(free_port)"
echo "cluster: ps=$ps_hosts workers=$worker_hosts (sync mode)"

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT INT TERM

for i in 0 1; do
  "$bin/ps_server/ps_server" --ps_hosts="$ps_hosts" --worker_hosts="$worker_hosts" \
    --task_index=$i --bind_host=127.0.0.1 --mode=sync 2>&1 | sed -u "s/^/[ps $i] /" &
  pids+=($!)
done
workers=()
for w in 0 1 2; do
  # Worker 0 is the chief: when it finishes it tells the servers the job is done.
  "$bin/examples/custom_loop" --ps_hosts="$ps_hosts" --mode=sync --worker_id=$w \
    --steps=300 2>&1 | sed -u "s/^/[worker $w] /" &
  workers+=($!)
done
status=0
for pid in "${workers[@]}"; do wait "$pid" || status=1; done
wait "${pids[@]}" || status=1
pids=()
echo "demo finished with status $status"
exit $status
