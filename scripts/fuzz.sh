#!/usr/bin/env bash
# Runs Fulcrum's fuzzers (fuzz/, built with --config=asan: AddressSanitizer,
# UndefinedBehaviorSanitizer and libFuzzer's coverage), each for a bounded
# time from its seed corpus and its regressions, and prints one line per
# target: "//checks:fuzz_<target> PASSED" or "... FAILED" (for
# scripts/test.sh's count). An input that crashes a target is kept as
# fuzz/regressions/<target>/crash-<sha1> and printed in base64: fix the
# bug, commit the file, and the target's test runs it from then on.
#
#   scripts/fuzz.sh                   # every target, 8 seconds each
#   scripts/fuzz.sh --seconds 600 ps_server
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

seconds=8
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(sed -n 's/^ *":\(.*\)_fuzzer",$/\1/p' fuzz/BUILD.bazel)
fi

if ! bazel build --config=asan //fuzz:fuzzers >/dev/null 2>&1; then
  bazel build --config=asan //fuzz:fuzzers 2>&1 | tail -20
  for target in "${targets[@]}"; do echo "//checks:fuzz_$target FAILED"; done
  exit 1
fi
bin=$(bazel info --config=asan bazel-bin 2>/dev/null)

failed=0
for target in "${targets[@]}"; do
  work=$(mktemp -d)
  mkdir -p "fuzz/regressions/$target"
  before=$(ls "fuzz/regressions/$target")
  corpora=()
  for dir in "$bin/fuzz/corpus/$target" "fuzz/corpus/$target" "fuzz/regressions/$target"; do
    [[ -d "$dir" ]] && corpora+=("$dir")
  done
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    timeout $((seconds + 120)) "$bin/fuzz/${target}_fuzzer" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="fuzz/regressions/$target/" "$work" "${corpora[@]}" >"$work.log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log")
  cov=$(grep -o 'cov: [0-9]*' "$work.log" | tail -1)
  if ((rc == 0)); then
    echo "fuzz.sh: $target: ${runs:-0} inputs in ${seconds}s, ${cov:-cov: ?}, clean"
    echo "//checks:fuzz_$target PASSED"
  else
    failed=1
    grep -v '^#\|^INFO\|^stat::' "$work.log" | tail -40
    for crash in $(comm -13 <(echo "$before") <(ls "fuzz/regressions/$target")); do
      echo "fuzz.sh: $target: kept fuzz/regressions/$target/$crash; its bytes in base64:"
      base64 -w 100 "fuzz/regressions/$target/$crash"
    done
    echo "//checks:fuzz_$target FAILED"
  fi
  rm -rf "$work" "$work.log"
done
exit $failed
