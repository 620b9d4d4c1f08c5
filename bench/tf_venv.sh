#!/usr/bin/env bash
# Prints the Python of the TensorFlow baselines' virtual environment,
# installing tensorflow-cpu from PyPI into it the first time.
set -euo pipefail
venv=/opt/fulcrum-tools/tf-venv
if ! "$venv/bin/python" -c 'import tensorflow' 2>/dev/null; then
  echo "installing tensorflow-cpu into $venv (once)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$(dirname "$0")/../python/requirements-tensorflow.txt" >&2
fi
echo "$venv/bin/python"
