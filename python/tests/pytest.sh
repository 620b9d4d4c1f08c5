#!/usr/bin/env bash
# Runs pytest files of the Python package under Bazel, with the system
# Python (whose python3-torch and python3-numpy the tests use), the package
# from the runfiles and the daemons beside it. Cases go to Bazel's test.xml,
# so scripts/summarize_tests.py counts each one.
#
#   pytest.sh [--python=PATH] FILE...     (paths relative to the workspace)
#
# --python: another interpreter with pytest (the TensorFlow tests run with
# the virtual environment bench/tf_venv.sh makes).
set -euo pipefail
python=/usr/bin/python3
if [[ "${1:-}" == --python=* ]]; then
  python=${1#--python=}
  shift
fi
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
# safetensors, for the export tests (scripts/install_deps.sh installs it).
export PYTHONPATH="$root/python/site:$root/bench:/opt/fulcrum-tools/site"
export FULCRUM_BIN_DIR="$root"
export FULCRUM_SOURCE_DIR="$root"
files=()
for f in "$@"; do files+=("$root/$f"); done
cd "${TEST_TMPDIR}"
exec "$python" -m pytest -q -p no:cacheprovider --junitxml="${XML_OUTPUT_FILE}" \
  -o junit_family=xunit1 "${files[@]}"
