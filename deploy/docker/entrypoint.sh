#!/bin/sh
# fulcrum-entrypoint ROLE [FLAGS...]: runs a Fulcrum daemon in a container.
# fulcrum-entrypoint python-chief|python-worker PROGRAM [FLAGS...]: runs a
# Python training program (PROGRAM.py, with the fulcrum package) as the
# chief or a worker, given the cluster and TLS flags as a worker daemon is
# (programs built on fulcrum.cli take them: the image's examples under
# /usr/local/share/fulcrum/examples do).
#
#   ROLE  ps | worker | chief | fulcrumctl
#
# TF_CONFIG is used as given. Without it, the daemon's cluster flags are
# given from
#   FULCRUM_PS_HOSTS      comma-separated host:port of the parameter servers
#                         (none with the all-reduce strategies)
#   FULCRUM_WORKER_HOSTS  comma-separated host:port of the workers
#   FULCRUM_CHIEF_HOST    host:port of the chief, if any
# and the task index: FULCRUM_TASK_INDEX, else JOB_COMPLETION_INDEX (a
# Kubernetes Indexed Job), else the ordinal ending the host name (a
# StatefulSet pod "ps-1"), else 0. FLAGS go to the daemon.
#
# FULCRUM_TLS_DIR: a directory of scripts/make_certs.sh's files (a
# mounted volume or Kubernetes Secret); the role's certificate and key
# (ps.pem, chief.pem, worker.pem, fulcrumctl.pem and their .key; another
# role's with FULCRUM_TLS_ROLE, as a server's health probe uses the
# server's own) and ca.pem go to the daemon as --tls_cert, --tls_key and
# --tls_ca. Without it, FLAGS must choose: the --tls_* flags, or --insecure.
# A Python program also gets the TLS files, its task type and its index
# as FULCRUM_TLS_CERT, FULCRUM_TLS_KEY, FULCRUM_TLS_CA, FULCRUM_TASK_TYPE and
# FULCRUM_TASK_INDEX, which fulcrum.connect() reads with FULCRUM_PS_HOSTS
# and the others: a program that parses no flags finds the cluster.
set -eu

bin_dir=${FULCRUM_BIN_DIR:-/usr/local/bin}
role=${1:-}
[ $# -gt 0 ] && shift
task_type=$role
program=""
case "$role" in
  python-chief | python-worker)
    task_type=${role#python-}
    if [ $# -eq 0 ]; then
      echo "fulcrum-entrypoint: $role needs the Python program to run" >&2
      exit 2
    fi
    program=$1
    shift
    ;;
esac

if [ -n "${FULCRUM_TLS_DIR:-}" ]; then
  cert=${FULCRUM_TLS_ROLE:-$task_type}
  set -- "--tls_cert=$FULCRUM_TLS_DIR/$cert.pem" "--tls_key=$FULCRUM_TLS_DIR/$cert.key" \
    "--tls_ca=$FULCRUM_TLS_DIR/ca.pem" "$@"
  # A Python program that parses no flags (fulcrum.connect(),
  # fulcrum.tensorflow) reads them from its environment.
  export FULCRUM_TLS_CERT="$FULCRUM_TLS_DIR/$cert.pem" FULCRUM_TLS_KEY="$FULCRUM_TLS_DIR/$cert.key"
  export FULCRUM_TLS_CA="$FULCRUM_TLS_DIR/ca.pem"
fi

case "$role" in
  ps) binary="$bin_dir/ps_server" ;;
  worker | chief) binary="$bin_dir/worker" ;;
  python-chief | python-worker) binary=${FULCRUM_PYTHON:-python3} ;;
  fulcrumctl) exec "$bin_dir/fulcrumctl" "$@" ;;
  *)
    echo "fulcrum-entrypoint: role '$role' is not one of ps, worker, chief, python-chief," \
      "python-worker, fulcrumctl" >&2
    exit 2
    ;;
esac

if [ -z "${TF_CONFIG:-}" ]; then
  index=${FULCRUM_TASK_INDEX:-${JOB_COMPLETION_INDEX:-}}
  if [ -z "$index" ]; then
    # shellcheck disable=SC3028  # Docker and Kubernetes set HOSTNAME
    host=${HOSTNAME:-$(uname -n)}
    ordinal=${host##*-}
    case "$ordinal" in
      '' | *[!0-9]*) index=0 ;;
      *) index=$ordinal ;;
    esac
  fi
  if [ -z "${FULCRUM_PS_HOSTS:-}${FULCRUM_WORKER_HOSTS:-}${FULCRUM_CHIEF_HOST:-}" ]; then
    echo "fulcrum-entrypoint: set TF_CONFIG, or FULCRUM_PS_HOSTS and FULCRUM_WORKER_HOSTS" \
      "(the all-reduce strategies: FULCRUM_WORKER_HOSTS alone)" >&2
    exit 2
  fi
  # The daemon builds its cluster spec from its cluster flags
  # (common/cluster_flags.h) as from TF_CONFIG.
  set -- "--ps_hosts=${FULCRUM_PS_HOSTS:-}" "--worker_hosts=${FULCRUM_WORKER_HOSTS:-}" \
    "--chief_host=${FULCRUM_CHIEF_HOST:-}" "--task_type=$task_type" "--task_index=$index" "$@"
  export FULCRUM_TASK_TYPE="$task_type" FULCRUM_TASK_INDEX="$index"
  echo "fulcrum-entrypoint: $role $program with $*" >&2
else
  echo "fulcrum-entrypoint: $role $program with TF_CONFIG=$TF_CONFIG" >&2
fi
if [ -n "$program" ]; then
  exec "$binary" "$program" "$@"
fi
exec "$binary" "$@"
