#!/usr/bin/env bash
# Formats Fulcrum's C++ and CUDA sources with clang-format (.clang-format:
# Google style, 100 columns). With --check, changes nothing and exits 1
# listing the files that are not formatted.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' | grep -v '^third_party/')
if [[ "${1:-}" != "--check" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
unformatted=()
for file in "${files[@]}"; do
  clang-format --dry-run --Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
done
if ((${#unformatted[@]})); then
  echo "not formatted (run scripts/format.sh): ${unformatted[*]}"
  exit 1
fi
echo "format: ${#files[@]} files formatted"
