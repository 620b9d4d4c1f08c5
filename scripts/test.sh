#!/usr/bin/env bash
# Runs Fulcrum's whole test suite: installs what is missing, builds, runs
# every test with Bazel, runs the server-facing tests again under
# AddressSanitizer and UndefinedBehaviorSanitizer (--config=asan), runs the
# fuzzers (scripts/fuzz.sh) for a few seconds each, checks the
# sources' format and clang-tidy, lints the shell scripts (shellcheck), the
# Bazel files (scripts/check_build_files.py) and the Python sources (ruff's
# linter and formatter), builds the Docker image and runs the
# compose cluster (tests/container_test.sh; skipped where no Docker engine
# can run), and ends with the line "N passed, M failed", where N and M count
# test cases (each gtest case, each shell test, each source or container
# check; a test run under the sanitizers counts again).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

scripts/install_deps.sh || { echo "0 passed, 1 failed"; exit 1; }

# Each phase's minutes, in CI's log: where the suite's time goes.
phase_start=$SECONDS
phase_done() {
  echo "test.sh: $1 took $(((SECONDS - phase_start) / 60)) min $(((SECONDS - phase_start) % 60)) s"
  phase_start=$SECONDS
}

# The tests whose code a peer's bytes reach: parsers, the server, its
# checkpoints, the client and its transports, real servers under attack.
SANITIZED=(//common/... //ps_server/... //client/... //worker/collective/... //worker/strategy/...
           //fuzz/... //worker/data/...
           //tests:checkpoint_test //tests:ps_cluster_test //tests:fulcrumctl_test)

log=$(mktemp)
asan_log=$(mktemp)
trap 'rm -f "$log" "$asan_log"' EXIT
bazel test --keep_going //... 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
phase_done "the build and the tests"
bazel test --config=asan --keep_going "${SANITIZED[@]}" 2>&1 | tee "$asan_log"
asan_rc=${PIPESTATUS[0]}
asan_testlogs=$(bazel info --config=asan bazel-testlogs 2>/dev/null)
phase_done "the sanitizers' build and tests"
# The fuzzers, a few seconds each (their own lines, one per target).
scripts/fuzz.sh 2>&1 | tee -a "$log"
phase_done "the fuzzers"

# Source checks, each counted as one test case.
check() {
  local name=$1
  shift
  if "$@"; then echo "//checks:$name PASSED"; else echo "//checks:$name FAILED"; fi | tee -a "$log"
}
ruff=/opt/fulcrum-tools/venv/bin/ruff
check format scripts/format.sh --check
check clang_tidy scripts/tidy.sh
check shellcheck sh -c "git ls-files '*.sh' | xargs shellcheck"
check build_files scripts/check_build_files.py
check header_guards scripts/check_header_guards.sh
check python_lint sh -c "git ls-files '*.py' | xargs $ruff check -q"
check python_format sh -c "git ls-files '*.py' | xargs $ruff format --check -q"
check docs scripts/build_docs.sh
phase_done "the source checks"
# The image and the compose cluster (its own lines; SKIPPED counts neither way).
tests/container_test.sh 2>&1 | tee -a "$log"
phase_done "the image and the compose runs"
bazel shutdown  # no server left behind

python3 scripts/summarize_tests.py "$log" "$testlogs" "$asan_log" "$asan_testlogs"
summary_rc=$?
# 4: tests ran and none failed, but some targets are not tests (none here).
for rc in "$bazel_rc" "$asan_rc"; do
  if ((rc != 0 && rc != 4)); then exit 1; fi
done
exit $summary_rc
