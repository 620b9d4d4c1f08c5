#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy says which checks, and why) over Fulcrum's C++
# sources, two files at a time. Builds the generated headers it needs first.
# Exits 1 listing the findings, if any, clang-tidy's own errors (a file it
# cannot compile) among them. With file arguments, checks those. Files found
# clean before, and unchanged with every header they include, are skipped
# (a cache under ~/.cache/fulcrum-tidy; FULCRUM_TIDY_CACHE moves it).
set -euo pipefail
cd "$(dirname "$0")/.."

bazel build //proto/... //client/api/... //client/grpc:grpc_ps_client //client:job_checkpoints //client:live_export \
  >/dev/null 2>&1
bin=$(bazel info bazel-bin 2>/dev/null)
tools=$(bazel info output_base 2>/dev/null)/external/bazel_tools  # the runfiles library
flags=(-std=c++17 -I. "-I$bin" -isystem "$tools" "-I$bin/client/api/_virtual_includes/tensor"
       "-I$bin/client/api/_virtual_includes/ps_client"
       "-I$bin/client/grpc/_virtual_includes/grpc_ps_client"
       "-I$bin/client/_virtual_includes/job_checkpoints"
       "-I$bin/client/_virtual_includes/live_export" -I/usr/local/cuda/include
       -isystem /usr/include/python3.11
       -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)

if (($#)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc' | grep -v '^third_party/')
fi
# A file found clean is remembered under the hash of what clang-tidy saw:
# the file preprocessed with its comments (NOLINTs count) and every header
# it includes, the build's paths replaced by names, the checks, and
# clang-tidy's version. Unchanged files are not checked again; findings are
# never remembered.
cache=${FULCRUM_TIDY_CACHE:-$HOME/.cache/fulcrum-tidy}
mkdir -p "$cache"
find "$cache" -type f -mtime +30 -delete
export cache bin tools

# One file's findings; clang-tidy's own failure (a file it cannot compile,
# a crash) is one too, never hidden.
tidy_one() {
  local file=$1 output rc findings key
  shift
  key=$({
    clang-tidy --version
    cat .clang-tidy
    clang++ -E -P -C "$file" "$@" 2>&1 | sed -e "s#$bin#BIN#g" -e "s#$tools#TOOLS#g"
  } | sha256sum | cut -d' ' -f1)
  [[ -e $cache/$key ]] && return
  output=$(clang-tidy --quiet "$file" -- "$@" 2>&1)
  rc=$?
  findings=$(grep -E '^[^ ].*: (warning|error): ' <<<"$output")
  if [[ -n $findings ]]; then
    echo "$findings"
  elif ((rc != 0)); then
    echo "$file: error: clang-tidy failed with status $rc: $(tail -n 3 <<<"$output" | tr '\n' ' ')"
  else
    touch "$cache/$key"
  fi
}
export -f tidy_one
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2016  # bash -c expands its own arguments
printf '%s\n' "${files[@]}" |
  xargs -P 2 -I{} bash -c 'tidy_one "$@"' _ {} "${flags[@]}" | sort -u >"$out"
if [[ -s "$out" ]]; then
  cat "$out"
  echo "clang-tidy: $(wc -l <"$out") finding(s) in ${#files[@]} files"
  exit 1
fi
echo "clang-tidy: ${#files[@]} files clean"
