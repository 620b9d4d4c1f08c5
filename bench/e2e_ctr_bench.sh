#!/usr/bin/env bash
# End to end on the CTR model: examples/s and test AUC training
# --model=ctr (26 embedding tables of 16 floats over a vocabulary of
# 100,000 ids per field, an MLP of 64 and 32 over them and 13 numeric
# features; Adagrad 0.1 on the tables, Adam 0.002 on the MLP; batch 256
# per worker) on synthetic_ctr data, 2 parameter servers and 3 async
# workers, with
#   - Fulcrum (deploy:local_cluster),
#   - examples/torch_ctr.py through the same launcher on fulcrum.torch's
#     embedding bags: the C++ model's architecture (--interaction=cat
#     --bottom=: the numeric features and the fields' rows side by side
#     into the MLP of 64 and 32), and DLRM's (a bottom MLP of 64, the
#     pairwise dot products of its output and the rows, the same top), and
#   - TensorFlow's ParameterServerStrategy, the tables split over the
#     servers (bench/tf_pss_ctr_bench.py),
# each on the same number of examples (one pass over --examples). Each
# one's AUC is compared with the best its test split allows (the AUC of its
# true probabilities): the two draw from the same distribution, not the
# same examples. Fulcrum runs again with every table's ranges and every
# shard in two copies (--replication=2, the launcher's etcd), for what
# replication costs the table-heavy model.
# Prints name=value lines (medians of 3 runs; 1 with --quick), ending with
# e2e_ctr_vs_tensorflow (examples/s), the AUC gaps, and the PyTorch model's
# torch_ctr_vs_cpp_ctr and torch_ctr_vs_tensorflow (examples/s; the same
# architecture as the C++ model's), torch_dlrm_vs_cpp_ctr and
# replication2_ctr_e2e_vs_unreplicated.
#   bench/e2e_ctr_bench.sh [--quick]
#
# How each rate is counted, as in bench/e2e_bench.sh: Fulcrum's from the
# chief's summary (its examples times the workers, over its wall time from
# first pull to last push, with one test-set evaluation); TensorFlow's over
# the steps after a warm-up, with no evaluation. Both favour TensorFlow.
set -euo pipefail
cd "$(dirname "$0")/.."
examples=600000
runs=3
[ "${1:-}" = "--quick" ] && { examples=150000; runs=1; }

python=$(bench/tf_venv.sh)
bazel build -c opt //deploy:local_cluster //worker:worker //ps_server:ps_server //python:site \
  2>/dev/null
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fulcrum() {  # "examples/s auc best_auc" from the chief's summary; $@: the launcher's flags
  # Plaintext, as TensorFlow's runs are.
  "$bin/deploy/local_cluster" --insecure --num_ps=2 --num_workers=3 --mode=async "$@" \
    --summary_json="$work/summary.json" -- --model=ctr --dataset=synthetic_ctr \
    --ctr_vocabulary=100000 --ctr_train_examples="$examples" --ctr_test_examples=20000 \
    --hidden=64,32 --embedding_dim=16 --optimizer=adam --learning_rate=0.002 \
    --embedding_optimizer=adagrad --embedding_learning_rate=0.1 --batch_size=256 --epochs=1 \
    --log_every_steps=100000 > "$work/cluster.log" 2>&1 ||
    { tail -20 "$work/cluster.log" >&2; exit 1; }
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
print("%.1f %.4f %.4f" % (s["examples_per_sec"], s["test_auc"], s["ground_truth_auc"]))' \
    "$work/summary.json"
}

torch_ctr() {  # "examples/s auc best_auc": examples/torch_ctr.py on the same data; $@: its model
  "$bin/deploy/local_cluster" --insecure --num_ps=2 --num_workers=3 --mode=async \
    --worker_command="/usr/bin/python3 examples/torch_ctr.py" \
    --summary_json="$work/torch.json" -- "$@" --ctr_vocabulary=100000 \
    --ctr_train_examples="$examples" --ctr_test_examples=20000 --top=64,32 \
    --embedding_dim=16 --learning_rate=0.002 --embedding_optimizer=adagrad \
    --embedding_learning_rate=0.1 --batch_size=256 --epochs=1 --log_every_steps=100000 \
    > "$work/torch.log" 2>&1 || { tail -20 "$work/torch.log" >&2; exit 1; }
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
print("%.1f %.4f %.4f" % (s["examples_per_sec"], s["test_auc"], s["ground_truth_auc"]))' \
    "$work/torch.json"
}

tensorflow() {  # "examples/s auc best_auc"
  "$python" bench/tf_pss_ctr_bench.py --num_ps=2 --num_workers=3 --batch_size=256 \
    --train_examples="$examples" --vocabulary=100000 > "$work/tf.out" 2> "$work/tf.log" ||
    { tail -20 "$work/tf.log" >&2; exit 1; }
  sed -n 's/^tf_ctr_examples_per_sec=//p; s/^tf_ctr_test_auc=//p; s/^tf_ctr_ground_truth_auc=//p' \
    "$work/tf.out" | xargs
}

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

ours=() replicated=() torch=() dlrm=() theirs=()
for run in $(seq "$runs"); do
  read -r rate auc best <<< "$(fulcrum)"
  ours+=("$rate")
  read -r replicated_rate replicated_auc _ <<< "$(fulcrum --replication=2)"
  replicated+=("$replicated_rate")
  read -r torch_rate torch_auc torch_best <<< "$(torch_ctr --interaction=cat --bottom=)"
  torch+=("$torch_rate")
  read -r dlrm_rate dlrm_auc _ <<< "$(torch_ctr --interaction=dot --bottom=64)"
  dlrm+=("$dlrm_rate")
  read -r tf_rate tf_auc tf_best <<< "$(tensorflow)"
  theirs+=("$tf_rate")
  echo "run $run of $runs: fulcrum $rate examples/s AUC $auc (best $best)," \
    "replicated $replicated_rate AUC $replicated_auc;" \
    "torch_ctr.py $torch_rate examples/s AUC $torch_auc, as DLRM $dlrm_rate AUC $dlrm_auc;" \
    "tensorflow $tf_rate examples/s AUC $tf_auc (best $tf_best)" >&2
done
ours_m=$(echo "${ours[@]}" | median)
replicated_m=$(echo "${replicated[@]}" | median)
torch_m=$(echo "${torch[@]}" | median)
dlrm_m=$(echo "${dlrm[@]}" | median)
theirs_m=$(echo "${theirs[@]}" | median)
echo "e2e_ctr_fulcrum_examples_per_sec=$ours_m"
echo "e2e_ctr_fulcrum_test_auc=$auc"
echo "e2e_ctr_fulcrum_ground_truth_auc=$best"
echo "e2e_ctr_tf_examples_per_sec=$theirs_m"
echo "e2e_ctr_tf_test_auc=$tf_auc"
echo "e2e_ctr_tf_ground_truth_auc=$tf_best"
python3 -c "print('e2e_ctr_fulcrum_auc_gap=%.4f' % ($best - $auc))"
python3 -c "print('e2e_ctr_tf_auc_gap=%.4f' % ($tf_best - $tf_auc))"
python3 -c "print('e2e_ctr_vs_tensorflow=%.2f' % ($ours_m / $theirs_m))"
echo "e2e_ctr_torch_examples_per_sec=$torch_m"
echo "e2e_ctr_torch_test_auc=$torch_auc"
python3 -c "print('e2e_ctr_torch_auc_gap=%.4f' % ($torch_best - $torch_auc))"
python3 -c "print('torch_ctr_vs_cpp_ctr=%.2f' % ($torch_m / $ours_m))"
python3 -c "print('torch_ctr_vs_tensorflow=%.2f' % ($torch_m / $theirs_m))"
echo "e2e_ctr_torch_dlrm_examples_per_sec=$dlrm_m"
echo "e2e_ctr_torch_dlrm_test_auc=$dlrm_auc"
python3 -c "print('torch_dlrm_vs_cpp_ctr=%.2f' % ($dlrm_m / $ours_m))"
echo "e2e_ctr_fulcrum_replication2_examples_per_sec=$replicated_m"
echo "e2e_ctr_fulcrum_replication2_test_auc=$replicated_auc"
python3 -c "print('replication2_ctr_e2e_vs_unreplicated=%.2f' % ($replicated_m / $ours_m))"
