#!/usr/bin/env bash
# End to end: examples/s training the Fashion-MNIST MLP (784-256-128-10,
# Adam 1e-3, batch 64 per worker) on this machine with
#   - Fulcrum, 2 parameter servers and 2 workers, async (deploy:local_cluster);
#   - Fulcrum, 2 parameter servers and 1 worker alone, async;
#   - Fulcrum, 2 parameter servers and 2 workers, async, with mutual TLS
#     (--tls: certificates made for the run, as a cluster across machines
#     runs) where the others run plaintext with tokens: what TLS costs;
#   - Fulcrum, 2 parameter servers and 2 workers, sync;
#   - Fulcrum, 2 parameter servers and 2 workers, async, every shard on both
#     servers (--replication=2): what replication costs when the copies
#     share this machine's cores;
#   - Fulcrum, 2 workers all-reducing, no servers (multi_worker_mirrored);
#   - TensorFlow's ParameterServerStrategy, 2 PS and 2 workers
#     (bench/tf_pss_bench.py, tensorflow-cpu from PyPI in its own venv);
#   - TensorFlow's MultiWorkerMirroredStrategy, 2 workers (bench/tf_mwms_bench.py).
# Prints name=value lines (medians of 3 runs; 1 with --quick), ending with
# e2e_vs_tensorflow, e2e_vs_one_worker, e2e_mwms_vs_sync_ps,
# e2e_mwms_vs_tensorflow, replication2_e2e_vs_unreplicated and
# e2e_tls_vs_plain.
#   bench/e2e_bench.sh [--quick]
#
# How each rate is counted: Fulcrum's is the chief's summary (its examples
# times the workers, over its wall time from first pull to last push,
# including one test-set evaluation); TensorFlow's counts the steps scheduled
# after a warm-up that traces the step on every worker, over their wall
# time, with no evaluation. Both favour TensorFlow slightly.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each configuration runs `runs` times, interleaved, and the medians are
# compared: on a shared machine single runs vary by a third.
steps=938  # one epoch of 60,000 examples in batches of 64
runs=3
[ "${1:-}" = "--quick" ] && { steps=300; runs=1; }

python=$(bench/tf_venv.sh)

bazel build -c opt //deploy:local_cluster //worker:worker //ps_server:ps_server 2>/dev/null
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fulcrum() {  # fulcrum NAME LAUNCHER_FLAGS...: "examples/s accuracy" from the chief's summary
  local name=$1 security=--insecure
  shift
  # Plaintext, as TensorFlow's runs are, but for the run named tls.
  [ "$name" = tls ] && security=--tls
  "$bin/deploy/local_cluster" "$security" "$@" \
    --summary_json="$work/summary-$name.json" \
    -- --model=mlp --hidden=256,128 --optimizer=adam --learning_rate=0.001 \
    --batch_size=64 --epochs=1 --log_every_steps=100000 > "$work/cluster-$name.log" 2>&1 ||
    { tail -20 "$work/cluster-$name.log" >&2; exit 1; }
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
print("%.1f %.4f" % (s["examples_per_sec"], s["test_accuracy"]))' "$work/summary-$name.json"
}

tensorflow() {  # "examples/s accuracy" of one ParameterServerStrategy run
  "$python" bench/tf_pss_bench.py --num_ps=2 --num_workers=2 --batch_size=64 \
    --steps="$steps" > "$work/tf.out" 2> "$work/tf.log" || { tail -20 "$work/tf.log" >&2; exit 1; }
  sed -n 's/^tf_pss_examples_per_sec=//p; s/^tf_pss_test_accuracy=//p' "$work/tf.out" | xargs
}

tf_mwms() {  # "examples/s accuracy" of one MultiWorkerMirroredStrategy run, 2 workers
  "$python" bench/tf_mwms_bench.py --num_workers=2 --batch_size=64 \
    --steps=$((steps / 2)) > "$work/tf-mwms.out" 2> "$work/tf-mwms.log" ||
    { tail -20 "$work/tf-mwms.log" >&2; exit 1; }
  sed -n 's/^tf_mwms_examples_per_sec=//p; s/^tf_mwms_test_accuracy=//p' "$work/tf-mwms.out" | xargs
}

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

two=() tls=() one=() sync=() replicated=() mwms=() tf=() tf_ar=()
for run in $(seq "$runs"); do
  out=$(fulcrum two --num_ps=2 --num_workers=2 --mode=async); read -r rate two_acc <<< "$out"
  two+=("$rate")
  out=$(fulcrum tls --num_ps=2 --num_workers=2 --mode=async); read -r rate tls_acc <<< "$out"
  tls+=("$rate")
  out=$(fulcrum one --num_ps=2 --num_workers=1 --mode=async); read -r rate one_acc <<< "$out"
  one+=("$rate")
  out=$(fulcrum sync --num_ps=2 --num_workers=2 --mode=sync); read -r rate sync_acc <<< "$out"
  sync+=("$rate")
  out=$(fulcrum replicated --num_ps=2 --num_workers=2 --mode=async --replication=2)
  read -r rate replicated_acc <<< "$out"
  replicated+=("$rate")
  out=$(fulcrum mwms --num_ps=0 --num_workers=2 --strategy=multi_worker_mirrored)
  read -r rate mwms_acc <<< "$out"
  mwms+=("$rate")
  out=$(tensorflow); read -r rate tf_acc <<< "$out"; tf+=("$rate")
  out=$(tf_mwms); read -r rate tf_ar_acc <<< "$out"; tf_ar+=("$rate")
  echo "run $run of $runs: fulcrum async 2 workers ${two[-1]} (TLS ${tls[-1]}), 1 worker ${one[-1]}," \
    "sync ${sync[-1]}, replicated ${replicated[-1]}, all-reduce ${mwms[-1]};" \
    "tensorflow PSS ${tf[-1]}," \
    "MWMS ${tf_ar[-1]} examples/s" >&2
done
two_m=$(echo "${two[@]}" | median)
tls_m=$(echo "${tls[@]}" | median)
one_m=$(echo "${one[@]}" | median)
sync_m=$(echo "${sync[@]}" | median)
replicated_m=$(echo "${replicated[@]}" | median)
mwms_m=$(echo "${mwms[@]}" | median)
tf_m=$(echo "${tf[@]}" | median)
tf_ar_m=$(echo "${tf_ar[@]}" | median)
echo "e2e_fulcrum_2ps_2workers_examples_per_sec=$two_m"
echo "e2e_fulcrum_2ps_2workers_test_accuracy=$two_acc"
echo "e2e_fulcrum_2ps_2workers_tls_examples_per_sec=$tls_m"
echo "e2e_fulcrum_2ps_2workers_tls_test_accuracy=$tls_acc"
echo "e2e_fulcrum_2ps_1worker_examples_per_sec=$one_m"
echo "e2e_fulcrum_2ps_1worker_test_accuracy=$one_acc"
echo "e2e_fulcrum_2ps_2workers_sync_examples_per_sec=$sync_m"
echo "e2e_fulcrum_2ps_2workers_sync_test_accuracy=$sync_acc"
echo "e2e_fulcrum_2ps_2workers_replication2_examples_per_sec=$replicated_m"
echo "e2e_fulcrum_2ps_2workers_replication2_test_accuracy=$replicated_acc"
echo "e2e_fulcrum_mwms_2workers_examples_per_sec=$mwms_m"
echo "e2e_fulcrum_mwms_2workers_test_accuracy=$mwms_acc"
echo "tf_pss_examples_per_sec=$tf_m"
echo "tf_pss_test_accuracy=$tf_acc"
echo "tf_mwms_examples_per_sec=$tf_ar_m"
echo "tf_mwms_test_accuracy=$tf_ar_acc"
sed -n 's/^tf_version=/tf_version=/p' "$work/tf.out"
python3 -c "print('e2e_vs_tensorflow=%.2f' % ($two_m / $tf_m))"
python3 -c "print('e2e_vs_one_worker=%.2f' % ($two_m / $one_m))"
python3 -c "print('e2e_mwms_vs_sync_ps=%.2f' % ($mwms_m / $sync_m))"
python3 -c "print('e2e_mwms_vs_tensorflow=%.2f' % ($mwms_m / $tf_ar_m))"
python3 -c "print('replication2_e2e_vs_unreplicated=%.2f' % ($replicated_m / $two_m))"
python3 -c "print('e2e_tls_vs_plain=%.2f' % ($tls_m / $two_m))"
