#!/bin/sh
# Fulcrum's GPU check, the run.sh of a bundle made by scripts/gpu_bundle.sh.
# Needs only a POSIX shell, tar and gzip, a CUDA driver and CUDA's own
# libraries; everything else is in the bundle.
#
#   ./run.sh              # CUDA tests, trainings on cuda against cpu, memcheck
#   ./run.sh --cpu-only   # the CPU training, and that the CUDA tests' binary
#                         # starts (proves the bundle runs anywhere)
#
# Logs and summaries go to $OUT when set (the device tool brings it back),
# else to a folder it names. Exits 1 when a test or a run failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cpu_only=false
[ "${1:-}" = --cpu-only ] && cpu_only=true
work=$(mktemp -d "${TMPDIR:-/tmp}/fulcrum-gpu.XXXXXX")
logs=${OUT:-$work/logs}
mkdir -p "$logs" "$work/data"
tar -xzf "$here/payload.tar.gz" -C "$work" || { echo "run.sh: cannot unpack the payload" >&2; exit 1; }
cp "$here"/*-ubyte.gz "$work/data/"
failures=0
say() { echo "run.sh: $*" | tee -a "$logs/report.txt"; }
# bounded SECONDS COMMAND...: the command, stopped after SECONDS where the
# system has timeout(1).
bounded() {
  secs=$1
  shift
  if command -v timeout >/dev/null; then timeout "$secs" "$@"; else "$@"; fi
}
# step NAME COMMAND...: runs the command, its output to $logs/NAME.log; when
# it fails, says so, shows the log's end and counts a failure. Its status.
step() {
  name=$1
  shift
  "$@" > "$logs/$name.log" 2>&1 && return 0
  say "$name: FAILED (see $name.log)"
  tail -30 "$logs/$name.log"
  failures=$((failures + 1))
  return 1
}

# CUDA's libraries, wherever this machine keeps them: the toolkit's first,
# then those of pip's nvidia-* wheels (where images often keep NCCL).
cuda_libs=""
for dir in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' ') \
           /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
           /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib; do
  [ -d "$dir" ] && cuda_libs="$cuda_libs${cuda_libs:+:}$dir"
done
export FULCRUM_CUDA_LIBS="$cuda_libs"

gpus=0
if ! $cpu_only; then
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L | tee -a "$logs/report.txt"
    gpus=$(nvidia-smi -L | grep -c '^GPU')
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$logs/report.txt"
  fi
  say "CUDA libraries from: ${cuda_libs:-the default paths of the system}; $gpus GPU(s)"

  # The CUDA tests: plain, and with every launch synchronous (and, last of
  # all, under compute-sanitizer's memcheck where it is installed).
  test_bin="$work/bin/cuda_device_test"
  step cuda_device_test bounded 300 "$test_bin" && say "cuda_device_test: passed"
  step cuda_device_test_blocking bounded 300 env CUDA_LAUNCH_BLOCKING=1 "$test_bin" &&
    say "cuda_device_test with CUDA_LAUNCH_BLOCKING=1: passed"
fi

# A training through the launcher: WORKERS workers of REPLICAS local
# replicas each, on DEVICE, 2 epochs unless the worker flags that follow say
# otherwise; the cluster is $cluster's (2 servers, sync, unless set).
field() { grep -o "\"$1\": *[0-9.e+-]*" "$2" | head -1 | sed 's/.*: *//'; }
train() {  # NAME DEVICE WORKERS REPLICAS [WORKER_FLAG...]
  name=$1 device=$2 workers=$3 replicas=$4
  shift 4
  # Plaintext: the device machine may lack openssl to make certificates.
  # shellcheck disable=SC2086 # $cluster is a list of flags
  step "$name" bounded 600 "$work/bin/deploy/local_cluster" --insecure --bin_dir="$work/bin" \
      ${cluster:---num_ps=2 --mode=sync} --num_workers="$workers" --summary_json="$logs/$name.json" -- \
      --data_dir="$work/data" --epochs=2 --device="$device" --local_replicas="$replicas" "$@" || return 0
  accuracy=$(field test_accuracy "$logs/$name.json")
  rate=$(field examples_per_sec "$logs/$name.json")
  say "$(printf '%-34s accuracy %-8s examples/s %s' "$name" "$accuracy" "$rate")"
  eval "rate_$name=\${rate%.*}"
}
ratio() {  # CPU_RUN CUDA_RUN
  eval "cpu=\${rate_$1:-} cuda=\${rate_$2:-}"
  [ -n "$cpu" ] && [ -n "$cuda" ] &&
    say "$2/$1 examples/s: $(awk "BEGIN { printf \"%.2f\", $cuda / $cpu }")"
}
train cpu_2_workers cpu 2 1
if $cpu_only; then
  # No GPU to run the CUDA tests on: that their binary starts is checked.
  step cuda_device_test_list "$work/bin/cuda_device_test" --gtest_list_tests &&
    say "cuda_device_test: starts, $(grep -c '^  ' "$logs/cuda_device_test_list.log") tests (they need a GPU)"
else
  train cuda_2_workers cuda 2 1
  if [ "$gpus" -ge 2 ]; then
    train cuda_1_worker_all_gpus cuda 1 "$gpus"
  else
    say "the NCCL path (one worker, a replica per GPU) needs 2 GPUs; this machine has $gpus"
  fi
  ratio cpu_2_workers cuda_2_workers
  # All-reduce between 2 workers, no servers, on the device the worker picks
  # itself (--device=auto), which on a GPU machine must be CUDA.
  cluster="--num_ps=0 --strategy=multi_worker_mirrored"
  train allreduce_auto_2_workers auto 2 1
  cluster=""
  if [ -f "$logs/allreduce_auto_2_workers.log" ] && \
      ! grep -q "device: CUDA" "$logs/allreduce_auto_2_workers.log"; then
    say "allreduce_auto_2_workers: --device=auto did not pick CUDA on a GPU machine"
    failures=$((failures + 1))
  fi
  # A model where the matrix products, not the wire, take the time: 2,048
  # wide hidden layers, 1,024 examples a step, one epoch.
  train wide_cpu_1_worker cpu 1 1 --hidden=2048,2048 --batch_size=1024 --epochs=1
  train wide_cuda_1_worker cuda 1 1 --hidden=2048,2048 --batch_size=1024 --epochs=1
  ratio wide_cpu_1_worker wide_cuda_1_worker
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$sanitizer" ]; then
    step compute_sanitizer bounded 180 "$sanitizer" --target-processes all --error-exitcode 3 "$test_bin" &&
      say "compute-sanitizer memcheck: clean ($(grep -o 'ERROR SUMMARY: [0-9]* errors' "$logs/compute_sanitizer.log" | tail -1))"
  else
    say "compute-sanitizer: not installed here, not run"
  fi
fi
say "logs in $logs; $failures failure(s)"
[ "$failures" -eq 0 ]
