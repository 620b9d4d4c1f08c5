#!/usr/bin/env bash
# Builds the fulcrum Python package and packs it as a wheel for the system
# Python (Debian 12's python3) into dist/; prints the wheel's path.
#
#   bash scripts/build_wheel.sh
#   python3 -m venv /tmp/venv && /tmp/venv/bin/pip install dist/fulcrum-*.whl
#   /tmp/venv/bin/python -c "import fulcrum; print(fulcrum.__version__)"
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //python:site >&2
/usr/bin/python3 python/build_wheel.py --site "$(bazel info bazel-bin 2>/dev/null)/python/site" \
  --out dist
