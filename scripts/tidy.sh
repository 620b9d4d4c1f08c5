#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy says which checks, and why) over Fulcrum's C++
# sources, two files at a time. Builds the generated headers it needs first.
# Exits 1 listing the findings, if any. With file arguments, checks those.
set -euo pipefail
cd "$(dirname "$0")/.."

bazel build //proto/... //client/api/... //client/grpc:grpc_ps_client >/dev/null 2>&1
bin=$(bazel info bazel-bin 2>/dev/null)
tools=$(bazel info output_base 2>/dev/null)/external/bazel_tools  # the runfiles library
flags=(-std=c++17 -I. "-I$bin" -isystem "$tools" "-I$bin/client/api/_virtual_includes/tensor"
       "-I$bin/client/api/_virtual_includes/ps_client"
       "-I$bin/client/grpc/_virtual_includes/grpc_ps_client" -I/usr/local/cuda/include
       -isystem /usr/include/python3.11
       -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)

if (($#)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc' | grep -v '^third_party/')
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
printf '%s\n' "${files[@]}" |
  xargs -P 2 -I{} sh -c 'clang-tidy --quiet "$0" -- "$@" 2>/dev/null || true' {} "${flags[@]}" |
  grep -E '^[^ ].*: (warning|error): ' | sort -u >"$out" || true
if [[ -s "$out" ]]; then
  cat "$out"
  echo "clang-tidy: $(wc -l <"$out") finding(s) in ${#files[@]} files"
  exit 1
fi
echo "clang-tidy: ${#files[@]} files clean"
