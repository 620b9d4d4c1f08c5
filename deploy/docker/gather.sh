#!/usr/bin/env bash
# Gathers what the image carries from a Bazel output tree into OUT_DIR,
# laid out as the Dockerfile's runtime stage copies it: bin/ (ps_server,
# worker, fulcrumctl, stripped), python/fulcrum/ (the package, its
# extension stripped), examples/ (the Python examples) and cuda/, empty
# (the build stage adds CUDA's libraries where it has them). The Dockerfile's
# build stage runs it after its bazel build; tests/container_test.sh runs it
# on this checkout's own build.
#
#   deploy/docker/gather.sh BAZEL_BIN OUT_DIR      # from the source root
set -euo pipefail
if (($# != 2)); then
  echo "usage: deploy/docker/gather.sh BAZEL_BIN OUT_DIR" >&2
  exit 2
fi
bin=$1
out=$2
mkdir -p "$out/bin" "$out/python" "$out/examples" "$out/cuda"
cp "$bin/ps_server/ps_server" "$bin/worker/worker" "$bin/deploy/fulcrumctl" "$out/bin/"
cp -r "$bin/python/site/fulcrum" "$out/python/"
chmod -R u+w "$out/bin" "$out/python"
strip "$out"/bin/* "$out/python/fulcrum/_fulcrum.so"
cp examples/*.py "$out/examples/"
