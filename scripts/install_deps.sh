#!/usr/bin/env bash
# Installs the Debian packages Fulcrum builds and tests with, where missing.
# Run as root on Debian 12. Safe to run again: it installs nothing twice.
#
#   scripts/install_deps.sh            # building, testing, the demo
#   scripts/install_deps.sh --build    # building the daemons and the package only (the image)
set -euo pipefail

# What building the daemons and the Python package's extension needs.
PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms g++ python3
  libgrpc++-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev libspdlog-dev libfmt-dev libopenblas-dev zlib1g-dev prometheus-cpp-dev
  python3-dev pybind11-dev libdlpack-dev
)
build_only=false
case "${1:-}" in
  --build) build_only=true ;;
  '') ;;
  *) echo "install_deps.sh: unknown argument '$1' (only --build)" >&2; exit 2 ;;
esac
if ! $build_only; then
  # What the tests, the source checks and the demo add.
  PACKAGES+=(
    python3-venv clang-format clang clang-tidy libclang-rt-14-dev libgtest-dev libgmock-dev
    dataset-fashion-mnist iproute2 nftables docker.io docker-compose debootstrap openssl
    # The Python package's tests, examples and benchmark.
    python3-numpy python3-torch python3-pytest python3-threadpoolctl
    # The scripts' linter.
    shellcheck
    # The coordination service of replicated shards (tests start their own).
    etcd-server
    # The status pages' tests open them in a headless browser.
    chromium fonts-dejavu-core
    # promtool checks and unit-tests the alerting rules; fulcrumctl top runs in tmux.
    prometheus tmux
  )
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

$build_only && exit 0

# Debian's etcd-server starts a system-wide etcd where systemd runs; Fulcrum
# starts its own, on ports of its own, so that one is not wanted.
# Likewise Debian's prometheus: the tests want its promtool only.
for service in etcd prometheus; do
  if [ -d /run/systemd/system ] && systemctl is-enabled --quiet "$service" 2>/dev/null; then
    systemctl disable --now "$service"
  fi
done

# Tools from PyPI, in a virtual environment of their own: offline
# validation of the Kubernetes manifests against the API schemas
# (kubernetes-validate bundles them), the Python sources' linter and
# formatter (ruff), and the manual's site generator (mkdocs).
TOOLS_VENV=/opt/fulcrum-tools/venv
[ -x "$TOOLS_VENV/bin/pip" ] || python3 -m venv "$TOOLS_VENV"
for tool in kubernetes-validate==1.37.0 ruff==0.17.6 mkdocs==1.6.1; do
  if [ ! -x "$TOOLS_VENV/bin/${tool%%==*}" ]; then
    echo "installing ${tool%%==*} into $TOOLS_VENV"
    "$TOOLS_VENV/bin/pip" install -q "$tool"
  fi
done
# safetensors, which the export tests load with beside Debian's torch
# (python3-torch): into a directory of its own that python/tests/pytest.sh
# puts on the system Python's path.
TEST_SITE=/opt/fulcrum-tools/site
if [ ! -d "$TEST_SITE/safetensors" ]; then
  echo "installing safetensors into $TEST_SITE"
  "$TOOLS_VENV/bin/pip" install -q --target "$TEST_SITE" safetensors==0.8.0
fi
# TensorFlow (tensorflow-cpu from PyPI) in a virtual environment of its
# own, for fulcrum.tensorflow's tests and the TensorFlow baselines, with
# pytest beside it.
tf_python=$("$(dirname "$0")/../bench/tf_venv.sh")
"$tf_python" -c "import pytest" 2>/dev/null || "${tf_python%/python}/pip" install -q pytest==9.2.0
