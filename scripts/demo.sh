#!/usr/bin/env bash
# Installs what is missing, builds, and trains on Fashion-MNIST with a local
# cluster: 2 parameter servers and 3 workers in sync mode on 127.0.0.1 (MLP
# 256-128, Adam 1e-3, batch 64 per worker, 10 epochs). Progress streams with
# each line prefixed by its process; at the end the final test accuracy is
# printed and the training curves are rendered to demo-output/training_curves.svg.
# Extra arguments go to every worker, e.g. `scripts/demo.sh --epochs=2`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
bazel build //deploy:local_cluster
bin=$(bazel info bazel-bin 2>/dev/null)

out=demo-output
mkdir -p "$out"
"$bin/deploy/local_cluster" --num_ps=2 --num_workers=3 --mode=sync \
  --summary_json="$out/summary.json" --metrics_jsonl="$out/metrics.jsonl" \
  -- --model=mlp --hidden=256,128 --optimizer=adam --learning_rate=0.001 \
  --batch_size=64 --epochs=10 --log_every_steps=200 "$@"
python3 deploy/plot_training_curves.py "$out/metrics.jsonl" "$out/training_curves.svg"
echo "summary: $out/summary.json"
grep -E '"(test_accuracy|examples_per_sec|wall_seconds)"' "$out/summary.json"
