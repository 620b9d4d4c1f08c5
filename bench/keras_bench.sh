#!/usr/bin/env bash
# Keras programs on Fulcrum against TensorFlow's own strategies, on this
# machine, in one run:
#   - examples/keras_fit.py (the Fashion-MNIST MLP 784-256-128-10, Adam 1e-3,
#     batch 64 per worker, one epoch) under fulcrum.tensorflow's
#     ParameterServerStrategy, 2 servers and 2 async workers, through the
#     launcher;
#   - the same model with TensorFlow's ParameterServerStrategy and
#     ClusterCoordinator (bench/tf_pss_bench.py), 2 servers and 2 workers;
#   - the same job on Fulcrum's C++ worker: what the Keras program costs;
#   - keras_fit.py under fulcrum.tensorflow's MultiWorkerMirroredStrategy,
#     2 workers and no servers, against TensorFlow's
#     MultiWorkerMirroredStrategy (bench/tf_mwms_bench.py) on the same model;
#   - examples/keras_ctr.py (26 fields in one fulcrum.tensorflow.Embedding
#     table, MLP 64-32, batch 256) against TensorFlow's parameter-server CTR
#     baseline (bench/tf_pss_ctr_bench.py), 2 servers and 3 async workers
#     on the same synthetic_ctr data.
# Prints name=value lines (medians of 3 runs; 1 with --quick), ending with
# keras_pss_vs_tensorflow, keras_pss_vs_cpp_worker, keras_mwms_vs_tensorflow
# and keras_ctr_vs_tensorflow.
#   bench/keras_bench.sh [--quick]
#
# Rates: the Keras programs' are the chief's (fulcrum.tensorflow.Throughput:
# its batches after the first 10, which trace the step, times the workers,
# over their wall time); TensorFlow's count the steps scheduled after a
# warm-up, over their wall time; the C++ worker's is its whole run's.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
ctr_examples=600000
[ "${1:-}" = "--quick" ] && { runs=1; ctr_examples=150000; }

python=$(bench/tf_venv.sh)
bazel build -c opt //deploy:local_cluster //worker:worker //ps_server:ps_server //python:site \
  2>/dev/null
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# summary FILE KEY...: the chief's summary's values, space-separated.
summary() {
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
print(" ".join("%.4f" % s[k] for k in sys.argv[2:]))' "$@"
}

# launch NAME LAUNCHER_FLAGS... -- WORKER_FLAGS...: a plaintext launcher
# run (as TensorFlow's are) writing $work/NAME.json.
launch() {
  local name=$1
  shift
  "$bin/deploy/local_cluster" --insecure --summary_json="$work/$name.json" "$@" \
    > "$work/$name.log" 2>&1 || { tail -20 "$work/$name.log" >&2; exit 1; }
}

keras_fit() {
  launch keras --num_ps=2 --num_workers=2 --mode=async \
    --worker_command="$python examples/keras_fit.py" -- --epochs=1
  summary "$work/keras.json" examples_per_sec test_accuracy
}

keras_mwms() {
  launch keras-mwms --num_ps=0 --num_workers=2 --strategy=multi_worker_mirrored \
    --worker_command="$python examples/keras_fit.py" -- --epochs=1
  summary "$work/keras-mwms.json" examples_per_sec test_accuracy
}

tf_mwms() {
  "$python" bench/tf_mwms_bench.py --num_workers=2 --batch_size=64 --steps=468 \
    > "$work/tf-mwms.out" 2> "$work/tf-mwms.log" || { tail -20 "$work/tf-mwms.log" >&2; exit 1; }
  sed -n 's/^tf_mwms_examples_per_sec=//p; s/^tf_mwms_test_accuracy=//p' "$work/tf-mwms.out" | xargs
}

cpp_worker() {
  launch cpp --num_ps=2 --num_workers=2 --mode=async -- --model=mlp --hidden=256,128 \
    --optimizer=adam --learning_rate=0.001 --batch_size=64 --epochs=1 --log_every_steps=100000
  summary "$work/cpp.json" examples_per_sec test_accuracy
}

tf_pss() {
  "$python" bench/tf_pss_bench.py --num_ps=2 --num_workers=2 --batch_size=64 --steps=938 \
    > "$work/tf.out" 2> "$work/tf.log" || { tail -20 "$work/tf.log" >&2; exit 1; }
  sed -n 's/^tf_pss_examples_per_sec=//p; s/^tf_pss_test_accuracy=//p' "$work/tf.out" | xargs
}

keras_ctr() {
  launch keras-ctr --num_ps=2 --num_workers=3 --mode=async \
    --worker_command="$python examples/keras_ctr.py" -- --epochs=1 --vocabulary=100000 \
    --train_examples="$ctr_examples" --test_examples=20000 --admit_after=0
  summary "$work/keras-ctr.json" examples_per_sec test_auc ground_truth_auc
}

tf_ctr() {
  "$python" bench/tf_pss_ctr_bench.py --num_ps=2 --num_workers=3 --batch_size=256 \
    --train_examples="$ctr_examples" --vocabulary=100000 > "$work/tf-ctr.out" \
    2> "$work/tf-ctr.log" || { tail -20 "$work/tf-ctr.log" >&2; exit 1; }
  sed -n 's/^tf_ctr_examples_per_sec=//p; s/^tf_ctr_test_auc=//p; s/^tf_ctr_ground_truth_auc=//p' \
    "$work/tf-ctr.out" | xargs
}

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

keras=() cpp=() tf=() kmw=() tmw=() kctr=() tctr=()
for run in $(seq "$runs"); do
  read -r rate keras_acc <<< "$(keras_fit)"; keras+=("$rate")
  read -r rate cpp_acc <<< "$(cpp_worker)"; cpp+=("$rate")
  read -r rate tf_acc <<< "$(tf_pss)"; tf+=("$rate")
  read -r rate kmw_acc <<< "$(keras_mwms)"; kmw+=("$rate")
  read -r rate tmw_acc <<< "$(tf_mwms)"; tmw+=("$rate")
  read -r rate kctr_auc kctr_best <<< "$(keras_ctr)"; kctr+=("$rate")
  read -r rate tctr_auc tctr_best <<< "$(tf_ctr)"; tctr+=("$rate")
  echo "run $run of $runs: keras_fit.py ${keras[-1]} examples/s, C++ worker ${cpp[-1]}," \
    "TensorFlow PSS ${tf[-1]}; all-reduce ${kmw[-1]}, TensorFlow MWMS ${tmw[-1]};" \
    "keras_ctr.py ${kctr[-1]}, TensorFlow ${tctr[-1]}" >&2
done
keras_m=$(echo "${keras[@]}" | median)
cpp_m=$(echo "${cpp[@]}" | median)
tf_m=$(echo "${tf[@]}" | median)
kmw_m=$(echo "${kmw[@]}" | median)
tmw_m=$(echo "${tmw[@]}" | median)
kctr_m=$(echo "${kctr[@]}" | median)
tctr_m=$(echo "${tctr[@]}" | median)
echo "keras_pss_examples_per_sec=$keras_m"
echo "keras_pss_test_accuracy=$keras_acc"
echo "keras_cpp_worker_examples_per_sec=$cpp_m"
echo "keras_cpp_worker_test_accuracy=$cpp_acc"
echo "keras_tf_pss_examples_per_sec=$tf_m"
echo "keras_tf_pss_test_accuracy=$tf_acc"
echo "keras_mwms_examples_per_sec=$kmw_m"
echo "keras_mwms_test_accuracy=$kmw_acc"
echo "keras_tf_mwms_examples_per_sec=$tmw_m"
echo "keras_tf_mwms_test_accuracy=$tmw_acc"
echo "keras_ctr_examples_per_sec=$kctr_m"
echo "keras_ctr_test_auc=$kctr_auc"
echo "keras_ctr_ground_truth_auc=$kctr_best"
echo "keras_tf_ctr_examples_per_sec=$tctr_m"
echo "keras_tf_ctr_test_auc=$tctr_auc"
echo "keras_tf_ctr_ground_truth_auc=$tctr_best"
python3 -c "print('keras_pss_vs_tensorflow=%.2f' % ($keras_m / $tf_m))"
python3 -c "print('keras_pss_vs_cpp_worker=%.2f' % ($keras_m / $cpp_m))"
python3 -c "print('keras_mwms_vs_tensorflow=%.2f' % ($kmw_m / $tmw_m))"
python3 -c "print('keras_ctr_vs_tensorflow=%.2f' % ($kctr_m / $tctr_m))"
