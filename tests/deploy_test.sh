#!/usr/bin/env bash
# The container entrypoint gives each daemon its cluster (TF_CONFIG, or the
# cluster flags from the environment as each platform provides it); the
# docker-compose files validate (Debian's
# docker-compose checks them without a Docker engine); the Kubernetes
# manifests validate against the API schemas, offline.
set -euo pipefail
root=${TEST_SRCDIR}/${TEST_WORKSPACE}
entrypoint=$root/deploy/docker/entrypoint.sh
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/deploy.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Stand-in daemons that print what they were started with.
for name in ps_server worker fulcrumctl python3; do
  # shellcheck disable=SC2016  # the stand-in expands $TF_CONFIG when it runs
  printf '#!/bin/sh\necho "%s $TF_CONFIG $*"\n' "$name" > "$tmp/$name"
  chmod +x "$tmp/$name"
done
run() {
  env -i PATH=/usr/bin:/bin FULCRUM_BIN_DIR="$tmp" FULCRUM_PYTHON="$tmp/python3" "$@" 2>/dev/null
}

out=$(run FULCRUM_PS_HOSTS=ps-0:2222,ps-1:2222 FULCRUM_WORKER_HOSTS=w-0:2222 \
  FULCRUM_TASK_INDEX=1 sh "$entrypoint" ps --mode=sync)
expected='ps_server  --ps_hosts=ps-0:2222,ps-1:2222 --worker_hosts=w-0:2222 --chief_host= --task_type=ps --task_index=1 --mode=sync'
[ "$out" = "$expected" ] || fail "explicit index: $out"

out=$(run FULCRUM_PS_HOSTS=p:1 FULCRUM_WORKER_HOSTS=a:1,b:1,c:1 FULCRUM_CHIEF_HOST=c:2 \
  JOB_COMPLETION_INDEX=2 sh "$entrypoint" worker)
case "$out" in
  *'--chief_host=c:2 --task_type=worker --task_index=2'*) ;;
  *) fail "Indexed Job index and chief: $out" ;;
esac

out=$(run FULCRUM_PS_HOSTS=p:1 FULCRUM_WORKER_HOSTS=w:1 HOSTNAME=fulcrum-ps-3 sh "$entrypoint" ps)
case "$out" in
  *'--task_type=ps --task_index=3'*) ;;
  *) fail "StatefulSet ordinal: $out" ;;
esac

out=$(run FULCRUM_WORKER_HOSTS=w-0:2222,w-1:2222 FULCRUM_CHIEF_HOST=c:2222 FULCRUM_TASK_INDEX=1 \
  sh "$entrypoint" worker --strategy=multi_worker_mirrored)
expected='worker  --ps_hosts= --worker_hosts=w-0:2222,w-1:2222 --chief_host=c:2222 --task_type=worker --task_index=1 --strategy=multi_worker_mirrored'
[ "$out" = "$expected" ] || fail "all-reduce, no servers: $out"

out=$(run TF_CONFIG='{"given": true}' sh "$entrypoint" chief --epochs=1)
[ "$out" = 'worker {"given": true} --epochs=1' ] || fail "TF_CONFIG passthrough: $out"

out=$(run sh "$entrypoint" fulcrumctl health --address=localhost:2222)
[ "$out" = "fulcrumctl  health --address=localhost:2222" ] || fail "fulcrumctl: $out"

# With FULCRUM_TLS_DIR, the role's certificate (or FULCRUM_TLS_ROLE's) comes first.
out=$(run TF_CONFIG='{}' FULCRUM_TLS_DIR=/certs sh "$entrypoint" chief --epochs=1)
[ "$out" = 'worker {} --tls_cert=/certs/chief.pem --tls_key=/certs/chief.key --tls_ca=/certs/ca.pem --epochs=1' ] ||
  fail "TLS files of the role: $out"
out=$(run FULCRUM_TLS_DIR=/certs FULCRUM_TLS_ROLE=ps sh "$entrypoint" fulcrumctl health --address=localhost:2222)
[ "$out" = 'fulcrumctl  --tls_cert=/certs/ps.pem --tls_key=/certs/ps.key --tls_ca=/certs/ca.pem health --address=localhost:2222' ] ||
  fail "a probe with the server's certificate: $out"

# A Python program as the chief or a worker: the program first, then the
# cluster and the role's TLS files as a worker daemon gets them.
out=$(run FULCRUM_PS_HOSTS=p:1 FULCRUM_WORKER_HOSTS=w:1 FULCRUM_CHIEF_HOST=c:1 FULCRUM_TLS_DIR=/certs \
  FULCRUM_TASK_INDEX=0 sh "$entrypoint" python-chief /x/numpy_linear.py --steps=5)
expected='python3  /x/numpy_linear.py --ps_hosts=p:1 --worker_hosts=w:1 --chief_host=c:1 --task_type=chief --task_index=0 --tls_cert=/certs/chief.pem --tls_key=/certs/chief.key --tls_ca=/certs/ca.pem --steps=5'
[ "$out" = "$expected" ] || fail "python chief: $out"
out=$(run TF_CONFIG='{}' sh "$entrypoint" python-worker /x/p.py)
[ "$out" = 'python3 {} /x/p.py' ] || fail "python worker with TF_CONFIG: $out"
if run TF_CONFIG='{}' sh "$entrypoint" python-worker >/dev/null; then
  fail "a python role without its program accepted"
fi

if run FULCRUM_PS_HOSTS=p:1 sh "$entrypoint" evaluator-x >/dev/null; then fail "bad role accepted"; fi
if run sh "$entrypoint" ps >/dev/null; then fail "no cluster accepted"; fi

# docker-compose validation, and a broken file to show it can fail.
compose=$root/deploy/docker-compose.yml
docker-compose -f "$compose" config -q || fail "docker-compose.yml does not validate"
docker-compose -f "$compose" -f "$root/deploy/docker-compose.gpu.yml" config -q ||
  fail "docker-compose.gpu.yml does not validate"
docker-compose -f "$compose" -f "$root/deploy/docker-compose.python.yml" config -q ||
  fail "docker-compose.python.yml does not validate"
docker-compose -f "$compose" -f "$root/deploy/docker-compose.tensorflow.yml" config -q ||
  fail "docker-compose.tensorflow.yml does not validate"
docker-compose -f "$compose" -f "$root/deploy/docker-compose.replicated.yml" config -q ||
  fail "docker-compose.replicated.yml does not validate"
docker-compose -f "$compose" -f "$root/deploy/docker-compose.monitoring.yml" config -q ||
  fail "docker-compose.monitoring.yml does not validate"
docker-compose -f "$root/deploy/docker-compose.all-reduce.yml" config -q ||
  fail "docker-compose.all-reduce.yml does not validate"
sed 's/condition: service_healthy/condition: whenever/' "$compose" > "$tmp/broken.yml"
if docker-compose -f "$tmp/broken.yml" config -q 2>/dev/null; then
  fail "a broken compose file validated"
fi

# Every Kubernetes manifest validates against the API schemas (offline),
# kustomization.yaml lists them all, and a broken one fails.
validate=/opt/fulcrum-tools/venv/bin/kubernetes-validate
k8s=$root/deploy/k8s
for dir in "$k8s/base" "$k8s/all-reduce" "$k8s/replicated"; do  # the base, and the variants
  manifests=()
  for path in "$dir"/*.yaml; do
    [ "${path##*/}" = kustomization.yaml ] || manifests+=("${path##*/}")
  done
  (cd "$dir" && "$validate" --strict --quiet "${manifests[@]}") ||
    fail "a Kubernetes manifest in $dir does not validate"
  for manifest in "${manifests[@]}"; do
    grep -q -- "- $manifest\$" "$dir/kustomization.yaml" ||
      fail "$dir/kustomization.yaml misses $manifest"
  done
done
# Every daemon serves its metrics and page on the port the scrape
# annotations and the PodMonitor (a CRD: not in the API schemas) name.
for job in "$k8s"/base/*-job.yaml "$k8s"/all-reduce/*-job.yaml; do
  for expected in '"--metrics_port=9100"' 'prometheus.io/scrape: "true"' \
    'prometheus.io/port: "9100"' 'name: metrics' 'containerPort: 9100'; do
    grep -q -- "$expected" "$job" || fail "${job#"$k8s"/} lacks $expected"
  done
done
monitor=$k8s/monitoring/podmonitor.yaml
for expected in 'kind: PodMonitor' 'app.kubernetes.io/name: fulcrum' '- port: metrics'; do
  grep -q -- "$expected" "$monitor" || fail "podmonitor.yaml lacks $expected"
done
sed 's/completions: 2/completions: two/' "$k8s/base/worker-job.yaml" > "$tmp/broken-job.yaml"
if "$validate" --strict --quiet "$tmp/broken-job.yaml" >/dev/null 2>&1; then
  fail "a broken manifest validated"
fi

# Each kustomization builds (kustomize, in kubectl, where it is installed:
# Debian 12 packages no kubectl), and the replicated variant runs three
# servers with two copies of each shard, coordinated by its etcd over TLS.
if command -v kubectl > /dev/null; then
  cp -rL "$k8s" "$tmp/k8s"  # kustomize does not follow the runfiles' links
  for dir in "" /all-reduce /replicated; do
    kubectl kustomize "$tmp/k8s$dir" > "$tmp/built.yaml" || fail "kustomize cannot build k8s$dir"
  done
  for expected in 'completions: 3' '--replication=2' '--etcd=fulcrum-etcd:2379' \
    'fulcrum-ps-2.fulcrum-ps:2222' '--client-cert-auth' 'secretName: fulcrum-tls-etcd'; do
    grep -q -- "$expected" "$tmp/built.yaml" || fail "the replicated variant lacks $expected"
  done
else
  echo "kubectl not installed: the kustomize builds were not checked"
fi

if ((failures)); then exit 1; fi
echo "deploy checks passed"
