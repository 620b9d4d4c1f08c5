#!/usr/bin/env bash
# bench/run.sh never dies silently: its steps (bench/steps.sh) report a
# failure (NAME=FAILED and the end of its stderr, kept in a log) and the
# run goes on; a flaky baseline is retried and says so; a ratio whose
# figure is missing fails by name; and the run's end is non-zero then.
set -uo pipefail
BENCH_LOGS=$(mktemp -d)
trap 'rm -rf "$BENCH_LOGS"' EXIT
# shellcheck source=bench/steps.sh
source bench/steps.sh
fail() { echo "FAILED: $*" >&2; exit 1; }

out=$(bench_step good echo "good_MBps=12.5") || fail "a step that succeeds failed"
[ "$out" = "good_MBps=12.5" ] || fail "a step's output: '$out'"
bench_finish 2>/dev/null || fail "a run whose steps all ran failed"

broken() { echo "half a line"; echo "the baseline broke: no route" >&2; return 3; }
out=$(bench_step baseline broken 2>"$BENCH_LOGS/run.err"; echo "after=1")
grep -q "^baseline=FAILED (its stderr: $BENCH_LOGS/baseline.1.log)" <<< "$out" ||
  fail "no baseline=FAILED line: '$out'"
grep -q "^after=1" <<< "$out" || fail "the run did not go on"
grep -q "the baseline broke: no route" "$BENCH_LOGS/run.err" || fail "its stderr was not shown"
grep -q "the baseline broke: no route" "$BENCH_LOGS/baseline.1.log" || fail "its stderr was not kept"

tries=$BENCH_LOGS/tries
flaky() { echo x >> "$tries"; [ "$(wc -l < "$tries")" -ge 2 ] && echo "flaky_ms=3.0"; }
bench_retry flaky flaky > "$BENCH_LOGS/flaky.out" || fail "a baseline that passes its retry failed"
grep -q "^flaky_retried=1" "$BENCH_LOGS/flaky.out" || fail "the retry was not reported"
grep -q "^flaky_ms=3.0" "$BENCH_LOGS/flaky.out" || fail "the retry's figure was not printed"
[ "$BENCH_OUT" = "flaky_ms=3.0" ] || fail "BENCH_OUT after the retry: '$BENCH_OUT'"

[ "$(bench_ratio r "a / b" 6 3)" = "r=2.00" ] || fail "a ratio"
bench_step lost broken > /dev/null 2>&1
[ "$(bench_ratio lost_vs_tcp "a / b" "" 3)" = "lost_vs_tcp=FAILED (a figure it needs is missing)" ] ||
  fail "a ratio of a missing figure"
bench_ratio lost_vs_tcp "a / b" "" 3 > /dev/null
if bench_finish 2> "$BENCH_LOGS/finish.err"; then fail "a run with failed steps ended 0"; fi
grep -q "2 step(s) failed: lost lost_vs_tcp" "$BENCH_LOGS/finish.err" ||
  fail "the end does not name them: $(cat "$BENCH_LOGS/finish.err")"
echo "bench steps: failures reported, the run goes on, retries said, the end non-zero"
