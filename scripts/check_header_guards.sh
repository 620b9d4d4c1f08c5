#!/usr/bin/env bash
# Checks that every header's include guard is its path: common/rpc/x.h is
# guarded by FULCRUM_COMMON_RPC_X_H_. Lists the headers that are not.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
bad=0
while read -r header; do
  expected="FULCRUM_$(tr 'a-z/.-' 'A-Z___' <<<"${header%.h}")_H_"
  guard=$(sed -n 's/^#ifndef \([A-Z0-9_]*\)$/\1/p' "$header" | head -n 1)
  if [[ $guard != "$expected" ]]; then
    echo "$header: guard ${guard:-none}, expected $expected"
    bad=$((bad + 1))
  fi
done < <(git ls-files '*.h' | grep -v '^third_party/')
((bad == 0)) || exit 1
echo "header guards: every header's is its path"
