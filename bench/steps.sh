#!/usr/bin/env bash
# Steps of a benchmark run (bench/run.sh sources this): each runs with its
# stderr kept in a log of its own under $BENCH_LOGS, and a step that fails
# is reported (NAME=FAILED, the log's last lines) and the run goes on; a
# baseline that fails now and then is tried once more, and the retry is
# reported. bench_finish ends the run: non-zero when a step failed.
#
#   bench_step NAME COMMAND...     its stdout printed, and kept in $BENCH_OUT
#   bench_retry NAME COMMAND...    the same, tried a second time on failure
#   bench_ratio NAME EXPR A B      NAME=EXPR(A, B) printed, or NAME=FAILED when
#                                  A or B is missing (its step failed)
#   bench_finish

BENCH_LOGS=${BENCH_LOGS:-$(mktemp -d /tmp/fulcrum-bench-logs.XXXXXX)}
BENCH_FAILED=()
BENCH_OUT=""

# Runs COMMAND once; 0 when it succeeded.
bench_once() {  # NAME ATTEMPT COMMAND...
  local name=$1 attempt=$2
  shift 2
  BENCH_OUT=$("$@" 2> "$BENCH_LOGS/$name.$attempt.log")
}

bench_failed() {  # NAME ATTEMPT
  echo "$1=FAILED (its stderr: $BENCH_LOGS/$1.$2.log)"
  tail -5 "$BENCH_LOGS/$1.$2.log" | sed "s|^|  $1: |" >&2
  BENCH_FAILED+=("$1")
  BENCH_OUT=""
}

bench_step() {  # NAME COMMAND...
  local name=$1
  if bench_once "$name" 1 "${@:2}"; then
    [ -n "$BENCH_OUT" ] && echo "$BENCH_OUT"
    return 0
  fi
  bench_failed "$name" 1
  return 1
}

bench_retry() {  # NAME COMMAND...
  local name=$1
  if bench_once "$name" 1 "${@:2}"; then
    [ -n "$BENCH_OUT" ] && echo "$BENCH_OUT"
    return 0
  fi
  echo "${name}_retried=1 (the first try failed: $BENCH_LOGS/$name.1.log)"
  if bench_once "$name" 2 "${@:2}"; then
    [ -n "$BENCH_OUT" ] && echo "$BENCH_OUT"
    return 0
  fi
  bench_failed "$name" 2
  return 1
}

bench_ratio() {  # NAME FORMAT-EXPRESSION A B: the expression of a and b
  local name=$1 expr=$2 a=$3 b=$4
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "$name=FAILED (a figure it needs is missing)"
    BENCH_FAILED+=("$name")
    return 1
  fi
  python3 -c "a, b = float('$a'), float('$b'); print('$name=%.2f' % ($expr))"
}

bench_finish() {
  if ((${#BENCH_FAILED[@]} > 0)); then
    echo "bench: ${#BENCH_FAILED[@]} step(s) failed: ${BENCH_FAILED[*]}; logs in $BENCH_LOGS" >&2
    return 1
  fi
  echo "bench: every step ran; logs in $BENCH_LOGS" >&2
}
