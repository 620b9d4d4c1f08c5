#!/bin/sh
# Fulcrum's GPU check, the run.sh of a bundle made by scripts/gpu_bundle.sh.
# Needs only a POSIX shell, tar and gzip, a CUDA driver and CUDA's own
# libraries; everything else is in the bundle.
#
#   ./run.sh              # CUDA tests, then 2-epoch trainings: cuda against cpu
#   ./run.sh --cpu-only   # the CPU training alone (proves the bundle runs anywhere)
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

# CUDA's libraries, wherever this machine keeps them.
cuda_libs=""
for dir in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do
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

  # The CUDA tests: plain, with every launch synchronous, and under
  # compute-sanitizer's memcheck where it is installed.
  test_bin="$work/bin/cuda_device_test"
  if "$test_bin" > "$logs/cuda_device_test.log" 2>&1; then
    say "cuda_device_test: passed"
  else
    say "cuda_device_test: FAILED (see cuda_device_test.log)"
    tail -30 "$logs/cuda_device_test.log"
    failures=$((failures + 1))
  fi
  if CUDA_LAUNCH_BLOCKING=1 "$test_bin" > "$logs/cuda_device_test_blocking.log" 2>&1; then
    say "cuda_device_test with CUDA_LAUNCH_BLOCKING=1: passed"
  else
    say "cuda_device_test with CUDA_LAUNCH_BLOCKING=1: FAILED"
    failures=$((failures + 1))
  fi
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [ -n "$sanitizer" ]; then
    if "$sanitizer" --target-processes all --error-exitcode 3 "$test_bin" \
        > "$logs/compute_sanitizer.log" 2>&1; then
      say "compute-sanitizer memcheck: clean ($(grep -o 'ERROR SUMMARY: [0-9]* errors' "$logs/compute_sanitizer.log" | tail -1))"
    else
      say "compute-sanitizer memcheck: FAILED (see compute_sanitizer.log)"
      tail -30 "$logs/compute_sanitizer.log"
      failures=$((failures + 1))
    fi
  else
    say "compute-sanitizer: not installed here, not run"
  fi
fi

# A 2-epoch sync training through the launcher: 2 servers and WORKERS
# workers of REPLICAS local replicas each, on DEVICE.
field() { grep -o "\"$1\": *[0-9.e+-]*" "$2" | head -1 | sed 's/.*: *//'; }
train() {  # NAME DEVICE WORKERS REPLICAS
  name=$1
  # Plaintext: the device machine may lack openssl to make certificates.
  if "$work/bin/deploy/local_cluster" --insecure --bin_dir="$work/bin" --num_ps=2 --num_workers="$3" \
      --mode=sync --summary_json="$logs/$name.json" -- --data_dir="$work/data" --epochs=2 \
      --device="$2" --local_replicas="$4" > "$logs/$name.log" 2>&1; then
    accuracy=$(field test_accuracy "$logs/$name.json")
    rate=$(field examples_per_sec "$logs/$name.json")
    say "$(printf '%-34s accuracy %-8s examples/s %s' "$name" "$accuracy" "$rate")"
    eval "rate_$name=\${rate%.*}"
  else
    say "$name: FAILED (see $name.log)"
    tail -30 "$logs/$name.log"
    failures=$((failures + 1))
  fi
}
train cpu_2_workers cpu 2 1
if ! $cpu_only; then
  train cuda_2_workers cuda 2 1
  if [ "$gpus" -ge 2 ]; then
    train cuda_1_worker_all_gpus cuda 1 "$gpus"
  else
    say "the NCCL path (one worker, a replica per GPU) needs 2 GPUs; this machine has $gpus"
  fi
  if [ -n "${rate_cpu_2_workers:-}" ] && [ -n "${rate_cuda_2_workers:-}" ]; then
    say "cuda/cpu examples/s: $(awk "BEGIN { printf \"%.2f\", ${rate_cuda_2_workers} / ${rate_cpu_2_workers} }" 2>/dev/null || echo "$rate_cuda_2_workers / $rate_cpu_2_workers")"
  fi
fi
say "logs in $logs; $failures failure(s)"
[ "$failures" -eq 0 ]
