#!/usr/bin/env bash
# Runs Fulcrum's whole test suite: installs what is missing, builds, runs
# every test with Bazel, checks the sources, and ends with the line
# "N passed, M failed", where N and M count test cases (each gtest case, each
# shell test, each source check).
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test --keep_going //... 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
bazel shutdown

# Source checks, each counted as one test case.
check() {
  local name=$1
  shift
  if "$@"; then echo "//checks:$name PASSED"; else echo "//checks:$name FAILED"; fi | tee -a "$log"
}
check format scripts/format.sh --check

python3 scripts/summarize_tests.py "$log" "$testlogs"
summary_rc=$?
# 4: tests ran and none failed, but some targets are not tests (none here).
if ((bazel_rc != 0 && bazel_rc != 4)); then exit 1; fi
exit $summary_rc
