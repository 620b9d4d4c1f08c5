#!/usr/bin/env bash
# Runs every benchmark and prints its figures as name=value lines, each
# against a baseline measured in the same run:
#   1-2. data plane: dense push+pull throughput and small-message latency,
#        against raw TCP on loopback (iperf3, one stream) and a bare gRPC
#        bytes echo, and mutual TLS against plaintext (bench:dataplane_bench);
#   3-4. async scaling and sync step time with simulated compute
#        (bench:scaling_bench);
#   5.   end to end against TensorFlow's ParameterServerStrategy and against
#        one worker alone, and mutual TLS against plaintext,
#        e2e_tls_vs_plain (bench/e2e_bench.sh);
#   6.   all-reduce among 2-4 ranks on loopback (bench:allreduce_bench),
#        against iperf3 with 4 parallel streams (per stream: what each of 4
#        ranks sharing this machine can carry), and against TensorFlow's
#        collective all-reduce (bench/tf_mwms_bench.py) at 64 MiB, n = 4;
#   7.   embedding rows pulled and pushed per second, against a dense pull
#        and push of the same bytes, and a million rows' memory against
#        their raw floats (bench:sparse_bench);
#   8.   the CTR model end to end against TensorFlow's
#        ParameterServerStrategy on the same model, and examples/torch_ctr.py
#        (the same model, and DLRM's) against both: torch_ctr_vs_cpp_ctr,
#        torch_ctr_vs_tensorflow (bench/e2e_ctr_bench.sh);
#   8a.  a worker's peak memory and examples/s on 1x, 4x and 16x the same
#        Criteo-format file, held in memory and streamed (--stream_data):
#        stream_rss_16x_vs_1x, stream_vs_memory_examples_per_sec
#        (bench/stream_bench.sh);
#   8b.  Keras programs on fulcrum.tensorflow's strategies against
#        TensorFlow's own on the same models: keras_pss_vs_tensorflow,
#        keras_mwms_vs_tensorflow, keras_ctr_vs_tensorflow, and against the
#        C++ worker (bench/keras_bench.sh);
#   9.   the Python client against the C++ client on the same server, and
#        examples/torch_fashion_mnist.py against PyTorch's
#        DistributedDataParallel over Gloo (bench/python_bench.py);
#   10.  a server's and a client's peak resident memory during 64 MiB
#        push+pulls, against the state each holds (bench/memory_bench.py);
#   11.  exporting a 1 GiB model (fulcrumctl export, safetensors and npz),
#        against a copy of its checkpoint files, and its peak memory
#        against the model's size (bench/export_bench.py);
#   12.  the failover of a server lost for good (--replication=2 with
#        etcd) over fresh clusters, against the etcd lease that bounds
#        detection and the push's own time; and the catch-up of a server
#        restarted holding nothing (1 GiB of copies refilled), against raw
#        TCP on loopback, and a training worker's pushes meanwhile against
#        its pushes before; and what replication costs the data plane (64
#        MiB push+pull, 4 KiB pull) against --replication=1 in the same run
#        (bench:failover_bench), and the primaries' memory growth in the
#        catch-up against the bytes they sent.
#   13.  how cost grows with the work, drawn from the figures above into
#        cost-curves.svg in the logs directory (bench/plot_curves.py):
#        updates/s against async workers (3), push+pull time against the
#        model's size, 1 MiB to 1 GiB (1), a table's rows/s against its
#        size, 10^4 to 10^8 rows (7), and a worker's memory against its
#        data set's size (8a).
#   bench/run.sh [--quick]     (--quick: a few minutes)
#
# A step that fails (a baseline included) prints NAME=FAILED and the end of
# its stderr, and the run goes on with the next; each step's stderr is kept
# under the logs directory the run names (bench/steps.sh). A baseline that
# fails now and then (iperf3, TensorFlow's collective) is tried once more,
# and says so. The run exits 1 if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=bench/steps.sh
source bench/steps.sh
quick=""
[ "${1:-}" = "--quick" ] && quick="--quick"
echo "bench: each step's stderr goes to $BENCH_LOGS" >&2
# Users' workers get OpenBLAS's own choice of kernels for their CPU; a
# machine-wide pin (this project's machines set OPENBLAS_CORETYPE=Haswell on
# AVX-512 CPUs) is lifted for the run, and said so.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  echo "bench: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE unset for this run: OpenBLAS picks its kernels" >&2
  unset OPENBLAS_CORETYPE
fi
# Every figure is kept too, for the curves drawn at the end.
exec > >(tee "$BENCH_LOGS/results.txt")

command -v iperf3 >/dev/null || { apt-get update -q && apt-get install -y -q iperf3; } >&2
bazel build -c opt //bench:dataplane_bench //bench:scaling_bench //bench:allreduce_bench \
  //bench:sparse_bench //bench:client_bench //bench:failover_bench //ps_server //deploy:local_cluster //deploy:fulcrumctl \
  //python:site || { echo "bench: the build failed" >&2; exit 1; }
bin=$(bazel info -c opt bazel-bin 2>/dev/null)

work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
iperf3 -s -B 127.0.0.1 -p "$port" > "$BENCH_LOGS/iperf-server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do  # until the server listens (at most 5 s)
  ss -ltn "sport = :$port" | grep -q LISTEN && break
  sleep 0.05
done
# NAME=the MB/s iperf3 received over STREAMS streams in 3 s, per stream.
iperf() {  # NAME STREAMS
  timeout 60 iperf3 -c 127.0.0.1 -p "$port" -t 3 -P "$2" -J > "$work/iperf.json" || {
    cat "$work/iperf.json" "$BENCH_LOGS/iperf-server.log" >&2
    return 1
  }
  python3 -c 'import json, sys
print("%s=%.1f" % (sys.argv[2], json.load(open(sys.argv[1]))["end"]["sum_received"]
                   ["bits_per_second"] / 8e6 / int(sys.argv[3])))' "$work/iperf.json" "$1" "$2"
}
# The baseline is the best of three runs: it stands for the wire's limit,
# and other load on a shared machine only ever lowers it.
tcp_mbs=""
for run in 1 2 3; do
  bench_retry "tcp_loopback_run$run" iperf "tcp_loopback_1stream_run${run}_MBps" 1 || continue
  tcp_mbs=$(python3 -c "print(max(${tcp_mbs:-0}, ${BENCH_OUT#*=}))")
done
echo "tcp_loopback_1stream_MBps=${tcp_mbs:-FAILED}"

# Certificates for the mutual-TLS figures.
bench_certs=$work/certs
scripts/make_certs.sh "$bench_certs" --roles ps,worker > /dev/null
dataplane() { "$bin/bench/dataplane_bench" $quick --tls_dir="$bench_certs" | grep -v "created variable"; }
bench_step dataplane dataplane
# Push+pull moves each tensor out and back; iperf3 counts one direction.
best=$(sed -n 's/^dense_64MiB_pushpull_\(1ps\|1ps_4ch\|1ps_split\|4ps\)_MBps=//p' <<< "$BENCH_OUT" |
  sort -g | tail -1)
bench_ratio dense_64MiB_pushpull_vs_tcp "a / b" "$best" "$tcp_mbs"
bench_step scaling "$bin/bench/scaling_bench" $quick
bench_step e2e bench/e2e_bench.sh $quick

per_rank=""
bench_retry tcp_loopback_4streams iperf tcp_loopback_4streams_per_stream_MBps 4 &&
  per_rank=${BENCH_OUT#*=}
bench_step allreduce "$bin/bench/allreduce_bench" $quick
busbw=$(sed -n 's/^allreduce_64MiB_n4_busbw_MBps=//p' <<< "$BENCH_OUT")
p50_us=$(sed -n 's/^allreduce_64MiB_n4_p50_us=//p' <<< "$BENCH_OUT")
bench_ratio allreduce_64MiB_n4_busbw_vs_tcp "a / b" "$busbw" "$per_rank"
# TensorFlow's collective (MultiWorkerMirroredStrategy, RING) on the same
# size and ranks; bench/e2e_bench.sh installed it.
tf_collective() {
  "$(bench/tf_venv.sh)" bench/tf_mwms_bench.py --mode=allreduce --num_workers=4 \
    --bytes=$((64 << 20)) | grep '^tf_allreduce'
}
tf_ms=""
bench_retry tf_collective tf_collective && tf_ms=${BENCH_OUT#*=}
bench_ratio allreduce_vs_tf_collective "a * 1000 / b" "$tf_ms" "$p50_us"
sparse() { "$bin/bench/sparse_bench" $quick | grep -v "\] \[info\] "; }
bench_step sparse sparse
bench_step e2e_ctr bench/e2e_ctr_bench.sh $quick
bench_step stream bench/stream_bench.sh $quick
bench_step keras bench/keras_bench.sh $quick
bench_step python env PYTHONPATH="$bin/python/site" /usr/bin/python3 bench/python_bench.py \
  --bin_dir="$bin" $quick
bench_step memory /usr/bin/python3 bench/memory_bench.py --bin_dir="$bin"
bench_step export /usr/bin/python3 bench/export_bench.py --bin_dir="$bin"
bench_step failover "$bin/bench/failover_bench" --ps_server="$bin/ps_server/ps_server" \
  --rounds="$([ -n "$quick" ] && echo 3 || echo 10)" \
  --catch_up_mib="$([ -n "$quick" ] && echo 192 || echo 1536)" \
  --cost_rounds="$([ -n "$quick" ] && echo 3 || echo 10)"
bench_ratio catch_up_vs_tcp "a / b" "$(sed -n 's/^catch_up_MBps=//p' <<< "$BENCH_OUT")" "$tcp_mbs"
bench_step curves python3 bench/plot_curves.py "$BENCH_LOGS/results.txt" \
  "$BENCH_LOGS/cost-curves.svg"
bench_finish
