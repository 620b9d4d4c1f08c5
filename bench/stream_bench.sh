#!/usr/bin/env bash
# A worker's memory against its data set's size: Criteo-format files of
# 1x, 4x and 16x the same synthetic lines (1x written once, then repeated),
# each trained for one epoch by one worker and one server (--model=ctr,
# tables of 16 floats, an MLP of 64 and 32, batch 256), with the examples
# held in memory and streamed (--stream_data, the default buffer of 65,536).
# Prints, per size and path, the worker's peak resident memory (its
# summary's peak_rss_mib) and examples/s, then:
#   stream_rss_16x_vs_1x           streamed: peak memory at 16x over 1x (flat: 1)
#   memory_rss_16x_vs_1x           in memory, for comparison
#   stream_vs_memory_examples_per_sec   at 16x, streamed over in memory
#   bench/stream_bench.sh [--quick]    (--quick: 1x of 25,000 lines; else 100,000)
set -euo pipefail
cd "$(dirname "$0")/.."
lines=100000
[ "${1:-}" = "--quick" ] && lines=25000

bazel build -c opt //deploy:local_cluster //worker:worker //ps_server:ps_server 2>/dev/null
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1x: a label that follows the first category and the first integer (as
# tests/local_cluster_test.cc's files), the rest noise, some of it missing.
mkdir -p "$work/1"
python3 - "$lines" "$work/1" <<'PY'
import random, sys
n, out = int(sys.argv[1]), sys.argv[2]
rng = random.Random(1)
def line():
    category, count = rng.randrange(40), rng.randrange(100)
    ints = [str(count)] + ["" if rng.random() < 0.3 else str(rng.randrange(50)) for _ in range(12)]
    cats = ["%x" % (0x1000 + category)] + [
        "" if rng.random() < 0.25 else "%x" % rng.randrange(5000) for _ in range(25)]
    return "\t".join([str(int(category < 8 or count > 90))] + ints + cats)
with open(out + "/train.txt", "w") as f:
    f.write("\n".join(line() for _ in range(n)) + "\n")
with open(out + "/test.txt", "w") as f:
    f.write("\n".join(line() for _ in range(10000)) + "\n")
PY
for times in 4 16; do
  mkdir -p "$work/$times"
  cp "$work/1/test.txt" "$work/$times/"
  for _ in $(seq "$times"); do cat "$work/1/train.txt"; done > "$work/$times/train.txt"
done

run() {  # "peak_rss_mib examples/s"; $1: the size, then the worker's flags
  local times=$1
  shift
  "$bin/deploy/local_cluster" --num_ps=1 --num_workers=1 --mode=async \
    --summary_json="$work/summary.json" -- --model=ctr --dataset=criteo \
    --data_dir="$work/$times" --hidden=64,32 --embedding_dim=16 --batch_size=256 --epochs=1 \
    --log_every_steps=100000 "$@" > "$work/cluster.log" 2>&1 ||
    { tail -20 "$work/cluster.log" >&2; exit 1; }
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
print("%.1f %.1f" % (s["peak_rss_mib"], s["examples_per_sec"]))' "$work/summary.json"
}

declare -A rss rate
for times in 1 4 16; do
  for path in memory stream; do
    flags=()
    [ "$path" = stream ] && flags=(--stream_data)
    read -r rss[$path$times] rate[$path$times] <<< "$(run "$times" "${flags[@]}")"
    echo "worker_${path}_${times}x_peak_rss_MiB=${rss[$path$times]}"
    echo "worker_${path}_${times}x_examples_per_sec=${rate[$path$times]}"
  done
done
ratio() { python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$@"; }
echo "stream_rss_16x_vs_1x=$(ratio "${rss[stream16]}" "${rss[stream1]}")"
echo "memory_rss_16x_vs_1x=$(ratio "${rss[memory16]}" "${rss[memory1]}")"
echo "stream_vs_memory_examples_per_sec=$(ratio "${rate[stream16]}" "${rate[memory16]}")"
