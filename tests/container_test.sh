#!/usr/bin/env bash
# The shipped image and compose cluster, really run: builds
# deploy/docker/Dockerfile (by default its runtime stage over this
# checkout's Bazel build; below), checks that every binary in it finds its shared
# libraries and that it runs as non-root, brings up deploy/docker-compose.yml
# with Prometheus (deploy/docker-compose.monitoring.yml), finds the job's
# step rate in Prometheus' HTTP API, kills a worker and waits for
# FulcrumWorkerDead to fire there, starts the worker again,
# kills a parameter server mid-training and starts it again, and checks that
# it restored the checkpoint, that every container exits 0 and the chief's
# test accuracy (one run serves both: a clean run checks nothing more, and
# took 2 more minutes); then with replicated shards
# (deploy/docker-compose.replicated.yml: three servers, etcd), one server
# killed for good and the job completing without it; then the same cluster with
# Python workers (deploy/docker-compose.python.yml: the image's package and
# examples/numpy_linear.py); then with TensorFlow programs
# (deploy/docker/Dockerfile.tensorflow's image and
# deploy/docker-compose.tensorflow.yml: examples/keras_fit.py, which parses
# no flags); then the all-reduce variant
# (deploy/docker-compose.all-reduce.yml: no servers) the same way. Last, it makes the GPU bundle
# (scripts/gpu_bundle.sh) and runs its CPU part in a bare debian:12
# container as a non-root user: the bundle needs nothing the image has not.
#
#   tests/container_test.sh        # as root, from anywhere; scripts/test.sh runs it
#
# Starts a Docker engine when none runs (and stops it at the end), and makes
# the base image from Debian's packages when it is missing. Prints one line
# per check, "//checks:container_<name> PASSED|FAILED|SKIPPED": where no
# engine can run, every check is SKIPPED, never PASSED. Exits 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

CHECKS=(image ldd prometheus kill_and_start compose_replicated compose_python compose_tensorflow
  compose_all_reduce gpu_bundle_cpu)
# The bars sit below what single runs measure (0.875-0.889 clean, 0.879-0.885
# with a server killed: sync steps sum gradients in arrival order, so runs
# differ in the third decimal) and above what a worker training alone
# while the others start gives (0.856).
ACCURACY=${FULCRUM_CONTAINER_ACCURACY:-0.868}           # all-reduce, a worker killed
KILL_ACCURACY=${FULCRUM_CONTAINER_KILL_ACCURACY:-0.865} # with a server killed
# keras_fit.py's 2 epochs (0.860 measured).
TF_ACCURACY=${FULCRUM_CONTAINER_TF_ACCURACY:-0.8}
JOB_TIMEOUT=${FULCRUM_CONTAINER_JOB_TIMEOUT:-1200}     # seconds per compose run
project=fulcrumtest
compose=(docker-compose -f deploy/docker-compose.yml -p "$project")
failures=0
declare -A result

report() {  # NAME PASSED|FAILED|SKIPPED [why]
  result[$1]=$2
  echo "//checks:container_$1 $2${3:+ ($3)}"
  [ "$2" = FAILED ] && failures=$((failures + 1))
  return 0
}
skip_rest() {
  for name in "${CHECKS[@]}"; do [ -n "${result[$name]:-}" ] || report "$name" SKIPPED "$1"; done
}
log() { echo "container_test: $*" >&2; }
# Whether container $1's log has a line matching $2. (Not `docker logs |
# grep -q`: grep's early exit breaks the pipe, and pipefail then says no.)
logged() { grep -c -- "$2" <(docker logs "$1" 2>&1) >/dev/null; }

# The clusters' certificates (the compose files mount $FULCRUM_CERTS), for
# the image's user.
FULCRUM_CERTS=$(mktemp -d /var/tmp/fulcrum-certs.XXXXXX)
export FULCRUM_CERTS
scripts/make_certs.sh "$FULCRUM_CERTS" --owner 10001 \
  --hosts ps-0,ps-1,ps-2,chief,worker-0,worker-1,etcd > /dev/null

started_engine=""
cleanup() {
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  rm -rf "$FULCRUM_CERTS"
  if [ -n "$started_engine" ]; then
    log "stopping the Docker engine it started"
    kill "$started_engine" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$started_engine" 2>/dev/null || break; sleep 0.1; done
  fi
}
trap cleanup EXIT

# An engine: the running one, else one started here.
if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null; then
    skip_rest "no Docker engine: dockerd is not installed (apt-get install docker.io)"
    exit 0
  fi
  log "starting a Docker engine (dockerd --storage-driver=vfs)"
  dockerd --storage-driver=vfs >/var/tmp/fulcrum-dockerd.log 2>&1 &
  started_engine=$!
  for _ in $(seq 300); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$started_engine" 2>/dev/null || break
    sleep 0.1  # polls the engine's socket until it answers
  done
  if ! docker info >/dev/null 2>&1; then
    started_engine=""
    skip_rest "no Docker engine could start here: $(tail -1 /var/tmp/fulcrum-dockerd.log)"
    exit 0
  fi
fi

# The image.
if ! scripts/docker_base_image.sh >&2; then
  report image FAILED "could not make the base image debian:12"
  skip_rest "no image"
  exit 1
fi
# By default the Dockerfile's runtime stage is built over this checkout's
# binaries, as Bazel here has built them for the tests, in place of its
# build stage, which compiles them again (11 minutes on 2 cores):
# everything the image carries and does is the same, bar the compiler's -c
# opt and, where this machine has the CUDA toolkit, a worker built with its
# CUDA backend (which finds no GPU in the container, says so and trains on
# the CPU, as the build stage's worker does). FULCRUM_IMAGE_FROM_SOURCE=1
# builds the whole Dockerfile, as a user does.
runtime_context() {  # DIR: a build context of the runtime stage over this build's outputs
  local ctx=$1 out
  if ! out=$(bazel build //ps_server:ps_server //worker:worker //deploy:fulcrumctl //python:site 2>&1)
  then
    tail -20 <<< "$out" >&2
    return 1
  fi
  deploy/docker/gather.sh "$(bazel info bazel-bin 2>/dev/null)" "$ctx/out" || return 1
  mkdir -p "$ctx/deploy/docker"
  cp deploy/docker/entrypoint.sh "$ctx/deploy/docker/"
  { echo "FROM scratch AS build"
    echo "COPY out/ /out/"
    sed -n '/^FROM .* AS runtime$/,$p' deploy/docker/Dockerfile
  } > "$ctx/Dockerfile"
}
build_image() {
  if [ "${FULCRUM_IMAGE_FROM_SOURCE:-0}" = 1 ]; then
    log "building the image from the sources (deploy/docker/Dockerfile)"
    docker build --network host -q -f deploy/docker/Dockerfile -t fulcrum:latest . >&2
    return
  fi
  log "building the image: deploy/docker/Dockerfile's runtime stage over this checkout's build"
  local context rc
  context=$(mktemp -d /var/tmp/fulcrum-image.XXXXXX)
  runtime_context "$context" && docker build --network host -q -t fulcrum:latest "$context" >&2
  rc=$?
  rm -rf "$context"
  return $rc
}
build_start=$(date +%s)
if ! build_image; then
  report image FAILED "docker build failed"
  skip_rest "no image"
  exit 1
fi
# Earlier runs' untagged images (their build stages, 1.5 GB each, copied
# whole by the vfs driver) are removed, or repeated runs fill the disk; this
# build's stage stays, and with it the layers the next build reuses.
docker image prune -f --filter "until=$(($(date +%s) - build_start + 1))s" >/dev/null
size=$(docker image inspect -f '{{.Size}}' fulcrum:latest)
user=$(docker image inspect -f '{{.Config.User}}' fulcrum:latest)
log "image fulcrum:latest: $(numfmt --to=iec "$size") ($size bytes), user '$user'," \
  "built in $(($(date +%s) - build_start)) s"
if [ -z "$user" ] || [ "$user" = root ] || [ "$user" = 0 ]; then
  report image FAILED "the image runs as root"
else
  report image PASSED
fi

missing=$(docker run --rm --entrypoint /bin/sh fulcrum:latest -c \
  'for b in /usr/local/bin/ps_server /usr/local/bin/worker /usr/local/bin/fulcrumctl \
            /usr/local/lib/fulcrum/python/fulcrum/_fulcrum.so; do
     ldd "$b" | sed -n "s|^|$b: |; /not found/p"
   done; id -u' 2>&1)
ran=$?
uid=$(printf '%s\n' "$missing" | tail -1)
missing=$(printf '%s\n' "$missing" | sed '$d')
if ((ran != 0)); then
  report ldd FAILED "the image's shell does not run as its user: $uid"
elif [ -n "$missing" ]; then
  report ldd FAILED "$(echo "$missing" | tr '\n' ';')"
elif [ "$uid" = 0 ]; then
  report ldd FAILED "the container runs as uid 0"
else
  report ldd PASSED
fi

# A compose run: its containers, once the chief exits. Prints the chief's
# test accuracy; fails naming any container that did not exit 0.
container_ids() { "${compose[@]}" ps -q 2>/dev/null; }
summary_accuracy() {  # empty for a run that writes no summary (the Python run's)
  docker run --rm --entrypoint /bin/cat -v "${project}_checkpoints:/checkpoints" fulcrum:latest \
    /checkpoints/summary.json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["test_accuracy"])' 2>/dev/null
}
# Containers the run's judgement leaves out (ids, space-separated): one
# killed for good, a service that never exits.
unjudged=""
judged_ids() {
  local id
  for id in $(container_ids); do
    [[ " $unjudged " == *" $id "* ]] || echo "$id"
  done
}
wait_job() {  # waits for every judged container to exit; 0 when all exited 0
  local deadline=$(($(date +%s) + JOB_TIMEOUT)) id bad=0
  for id in $(judged_ids); do
    local left=$((deadline - $(date +%s)))
    if ((left <= 0)) || ! timeout "$left" docker wait "$id" >/dev/null; then
      log "$(docker inspect -f '{{.Name}}' "$id") still running after ${JOB_TIMEOUT}s"
      bad=1
    fi
  done
  for id in $(judged_ids); do
    local name code
    name=$(docker inspect -f '{{.Name}}' "$id")
    code=$(docker inspect -f '{{.State.ExitCode}}' "$id")
    log "$name exited with status $code"
    if [ "$code" != 0 ]; then
      docker logs --tail 20 "$id" 2>&1 | sed "s|^|  $name: |" >&2
      bad=1
    fi
  done
  return $bad
}
up() {
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1
  "${compose[@]}" up -d >&2
}
at_least() { python3 -c "import sys; sys.exit(0 if float('$1') >= float('$2') else 1)" 2>/dev/null; }

# Once container WATCHED logs TEXT, kills container VICTIM (of compose
# service SERVICE); 0 if it did, 1 if WATCHED stopped or JOB_TIMEOUT passed
# first.
kill_when() {  # WATCHED TEXT SERVICE VICTIM
  local deadline=$(($(date +%s) + JOB_TIMEOUT))
  while (($(date +%s) < deadline)); do
    if logged "$1" "$2"; then
      docker kill "$4" >/dev/null || return 1
      log "killed $3 once its run logged '$2'"
      return 0
    fi
    [ "$(docker inspect -f '{{.State.Running}}' "$1")" = true ] || return 1
    sleep 1  # polls the log for TEXT
  done
  return 1
}
# As kill_when, then starts the service again.
kill_and_start() {  # WATCHED TEXT SERVICE VICTIM
  kill_when "$@" && "${compose[@]}" start "$3" >&2
}

# Waits for the run (started at $start) to end, then reports check NAME:
# every container exited 0, CHECK (a function, if given) printed no reason
# to fail, and the chief's test accuracy is at least BAR.
judge() {  # NAME BAR [CHECK]
  local name=$1 bar=$2 check=${3:-} accuracy why_not=""
  if ! wait_job; then
    "${compose[@]}" logs --tail 30 >&2 2>&1
    report "$name" FAILED "a container did not exit 0"
    return
  fi
  accuracy=$(summary_accuracy)
  log "$name run: test accuracy ${accuracy:-none} in $(($(date +%s) - start)) s"
  [ -n "$check" ] && why_not=$("$check")
  if [ -n "$why_not" ]; then
    report "$name" FAILED "$why_not"
  elif at_least "${accuracy:-0}" "$bar"; then
    report "$name" PASSED
  else
    report "$name" FAILED "test accuracy ${accuracy:-none} < $bar"
  fi
}

served_tls() {
  logged "$("${compose[@]}" ps -q ps-0)" "(mutual TLS)" || echo "ps-0 did not serve mutual TLS"
}

# Prometheus' HTTP API, on the loopback port Docker picked for it.
prometheus_address() { "${compose[@]}" port prometheus 9090 2>/dev/null; }
prom_query() {  # EXPR: prints the value of its first series; nothing for none
  python3 - "$(prometheus_address)" "$1" <<'EOF'
import json, sys, urllib.parse, urllib.request
address, expr = sys.argv[1:]
url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
try:
    with urllib.request.urlopen(url, timeout=5) as answer:
        series = json.load(answer)["data"]["result"]
except (OSError, ValueError, KeyError):
    sys.exit(0)  # not up yet
if series:
    print(series[0]["value"][1])
EOF
}
await_query() {  # EXPR SECONDS: 0 once EXPR has a series with a value > 0
  local deadline=$(($(date +%s) + $2)) value
  while (($(date +%s) < deadline)); do
    value=$(prom_query "$1")
    [ -n "$value" ] && at_least "$value" 1e-9 && return 0
    sleep 1  # polls Prometheus until its scrapes and rules have run
  done
  return 1
}
# The prometheus check, in the running job: the step rate is in Prometheus,
# and FulcrumWorkerDead fires once worker-1, killed, outlives its lease
# (--lease_timeout_ms, 10 s); then worker-1 is started again to finish the
# job with the others.
watch_prometheus() {
  local rate='sum(rate(fulcrum_worker_steps_total[15s]))'
  local alert='ALERTS{alertname="FulcrumWorkerDead",alertstate="firing"}'
  if ! await_query "$rate" 120; then
    docker logs --tail 20 "$("${compose[@]}" ps -q prometheus)" >&2 2>&1
    report prometheus FAILED "no step rate in Prometheus at $(prometheus_address) ($rate)"
    return
  fi
  log "Prometheus: the job steps $(prom_query "$rate") times a second;" \
    "$(prom_query 'count(up{job="fulcrum"} == 1)') daemons scraped"
  if ! docker kill "$worker1" >/dev/null; then
    report prometheus FAILED "could not kill worker-1"
    return
  fi
  local killed_at
  killed_at=$(date +%s)
  if await_query "$alert" 90; then
    log "Prometheus: FulcrumWorkerDead fired $(($(date +%s) - killed_at)) s after worker-1 was killed"
    report prometheus PASSED
  else
    report prometheus FAILED "FulcrumWorkerDead did not fire within 90 s of worker-1's death"
  fi
  "${compose[@]}" start worker-1 >&2
}

log "compose run: 2 servers, a chief and 2 workers (deploy/docker-compose.yml), mutual TLS,"
log "and Prometheus (deploy/docker-compose.monitoring.yml); worker-1 killed once the step"
log "rate shows, started again once FulcrumWorkerDead fires; ps-1 killed after the first"
log "checkpoint, then started again"
compose=(docker-compose -f deploy/docker-compose.yml -f deploy/docker-compose.monitoring.yml
  -p "$project")
export FULCRUM_PROMETHEUS_PORT=""  # a loopback port of Docker's choosing
start=$(date +%s)
killed=""
if ! docker build --network host -q -f deploy/docker/Dockerfile.prometheus \
     -t fulcrum-prometheus:latest deploy >&2; then
  report prometheus FAILED "docker build -f deploy/docker/Dockerfile.prometheus failed"
  compose=(docker-compose -f deploy/docker-compose.yml -p "$project")
fi
if up; then
  chief=$("${compose[@]}" ps -q chief)
  ps1=$("${compose[@]}" ps -q ps-1)
  worker1=$("${compose[@]}" ps -q worker-1)
  if [ -z "${result[prometheus]:-}" ]; then
    unjudged=$("${compose[@]}" ps -q prometheus)  # it runs until the cluster is taken down
    watch_prometheus
  fi
  kill_and_start "$chief" "checkpoint .* complete" ps-1 "$ps1" && killed=yes
elif [ -z "${result[prometheus]:-}" ]; then
  report prometheus FAILED "docker-compose up failed"
fi
ps1_restored() {
  logged "$ps1" "restoring from checkpoint" ||
    echo "ps-1 did not restore from the checkpoint"
  served_tls
}
if [ -n "$killed" ]; then
  judge kill_and_start "$KILL_ACCURACY" ps1_restored
else
  "${compose[@]}" logs --tail 30 >&2 2>&1
  report kill_and_start FAILED "the chief wrote no checkpoint to kill ps-1 after"
fi
unjudged=""

# A run of the compose cluster with the override file OVERRIDE, judged:
# check NAME, at least BAR, CHECK (as judge's).
run_with() {  # NAME OVERRIDE BAR CHECK
  compose=(docker-compose -f deploy/docker-compose.yml -f "$2" -p "$project")
  start=$(date +%s)
  if up; then
    judge "$1" "$3" "$4"
  else
    report "$1" FAILED "docker-compose up failed"
  fi
}

log "replicated run: 3 servers, each shard on 2 of them, and etcd"
log "(deploy/docker-compose.replicated.yml); ps-1 killed for good in the chief's second epoch"
compose=(docker-compose -f deploy/docker-compose.yml -f deploy/docker-compose.replicated.yml
  -p "$project")
start=$(date +%s)
killed=""
if up; then
  chief=$("${compose[@]}" ps -q chief)
  ps1=$("${compose[@]}" ps -q ps-1)
  unjudged="$ps1 $("${compose[@]}" ps -q etcd)"
  kill_when "$chief" "epoch 2/" ps-1 "$ps1" && killed=yes
fi
ps1_failed_over() {
  logged "$("${compose[@]}" ps -q ps-0)" "the primary now" ||
    logged "$("${compose[@]}" ps -q ps-2)" "the primary now" ||
    echo "no server took over a shard of ps-1's"
}
if [ -n "$killed" ]; then
  judge compose_replicated "$KILL_ACCURACY" ps1_failed_over
else
  "${compose[@]}" logs --tail 30 >&2 2>&1
  report compose_replicated FAILED "the chief never reached its second epoch to kill ps-1 in"
fi
unjudged=""

log "Python run: the same cluster, its chief and workers examples/numpy_linear.py"
log "(deploy/docker-compose.python.yml), sync, mutual TLS"
python_learned() {
  logged "$("${compose[@]}" ps -q chief)" "final max weight error" ||
    echo "the Python chief did not finish training"
  served_tls
}
# No accuracy: each program exits 0 only within its tolerance.
run_with compose_python deploy/docker-compose.python.yml 0 python_learned

log "TensorFlow run: the same cluster, its chief and workers examples/keras_fit.py in the image"
log "deploy/docker/Dockerfile.tensorflow builds (deploy/docker-compose.tensorflow.yml), sync, mutual TLS"
build_start=$(date +%s)
if docker build --network host -q -f deploy/docker/Dockerfile.tensorflow \
     -t fulcrum-tensorflow:latest . >&2; then
  # The previous build's image, untagged now, goes (as above).
  docker image prune -f --filter "until=$(($(date +%s) - build_start + 1))s" >/dev/null
  log "image fulcrum-tensorflow:latest:" \
    "$(numfmt --to=iec "$(docker image inspect -f '{{.Size}}' fulcrum-tensorflow:latest)")," \
    "built in $(($(date +%s) - build_start)) s"
  tensorflow_finished() {
    logged "$("${compose[@]}" ps -q chief)" "Eval accuracy" ||
      echo "the TensorFlow chief did not evaluate the trained model"
    logged "$("${compose[@]}" ps -q ps-0)" "job done" || echo "ps-0 was not told the job was done"
    served_tls
  }
  run_with compose_tensorflow deploy/docker-compose.tensorflow.yml "$TF_ACCURACY" \
    tensorflow_finished
else
  report compose_tensorflow FAILED "docker build -f deploy/docker/Dockerfile.tensorflow failed"
fi

log "all-reduce run: a chief and 2 workers, no servers (deploy/docker-compose.all-reduce.yml);"
log "worker-1 killed once it trains, then started again: it rejoins the running group"
compose=(docker-compose -f deploy/docker-compose.all-reduce.yml -p "$project")
start=$(date +%s)
killed=""
if up; then
  worker1=$("${compose[@]}" ps -q worker-1)
  kill_and_start "$worker1" "epoch 2/" worker-1 "$worker1" && killed=yes
fi
worker1_rejoined() {
  logged "$worker1" "joined at step" || echo "worker-1 did not rejoin the group"
}
if [ -n "$killed" ]; then
  judge compose_all_reduce "$ACCURACY" worker1_rejoined
else
  "${compose[@]}" logs --tail 30 >&2 2>&1
  report compose_all_reduce FAILED "worker-1 never reached its second epoch to be killed in"
fi

# The GPU bundle's CPU run, in the bare base image.
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  report gpu_bundle_cpu SKIPPED "no CUDA toolkit here to build the bundle with"
else
  bundle=$(mktemp -d /var/tmp/fulcrum-bundle.XXXXXX)
  if ! scripts/gpu_bundle.sh "$bundle/gpu-bundle" >"$bundle/make.log" 2>&1; then
    tail -20 "$bundle/make.log" >&2
    report gpu_bundle_cpu FAILED "scripts/gpu_bundle.sh failed"
  elif out=$(docker run --rm --network none --user 10001 -v "$bundle/gpu-bundle:/bundle:ro" \
               -e OUT=/tmp/out debian:12 /bundle/run.sh --cpu-only 2>&1); then
    log "$(grep 'run.sh: cpu_2_workers\|run.sh: cuda_device_test' <<< "$out")"
    report gpu_bundle_cpu PASSED
  else
    tail -20 <<< "$out" >&2
    report gpu_bundle_cpu FAILED "run.sh --cpu-only failed in a bare debian:12"
  fi
  rm -rf "$bundle"
fi

((failures == 0))
