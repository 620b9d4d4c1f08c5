#!/usr/bin/env bash
# Builds the manual (docs/, mkdocs.yml) as a site, strictly: a link to a
# page or an anchor that does not exist fails it. (mkdocs's -q would drop
# the warnings that fail a strict build, so its output is filtered here.)
#
#   scripts/build_docs.sh [OUT_DIR]    # default: a temporary directory
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:-}
if [[ -z $out ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
if ! log=$(/opt/fulcrum-tools/venv/bin/mkdocs build --strict -d "$out" 2>&1); then
  grep -v '^INFO' <<<"$log"
  echo "docs: the build failed"
  exit 1
fi
echo "docs: built in $out"
