#!/usr/bin/env bash
# Gathers a self-contained GPU check into one folder (default gpu-bundle/,
# git-ignored, under 64 MiB): the worker, the parameter server, the local
# launcher and //worker/cuda:cuda_device_test built with CUDA here; every
# shared library they load (glibc and its loader too, so an older OS runs
# them; the CUDA runtime is linked in, and cuBLAS and NCCL are loaded at run
# time from the GPU machine's CUDA); the Fashion-MNIST files; and run.sh, which on the
# GPU machine runs the CUDA tests (also under CUDA_LAUNCH_BLOCKING=1 and
# compute-sanitizer), then 2-epoch trainings with --device=cuda against the
# same with --device=cpu, and prints their accuracy and examples/s.
#
#   scripts/gpu_bundle.sh [DIR]        # needs the CUDA toolkit (nvcc) here
#   DIR/run.sh [--cpu-only]            # there; --cpu-only: no GPU needed
#
# The GPU machine needs only a CUDA driver and CUDA's cuBLAS and NCCL of the
# major version built with (libcublas.so.13, libnccl.so.2 for CUDA 13).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bundle}
data=${FULCRUM_DATA_DIR:-/usr/share/datasets/fashion-mnist}
limit=$((64 * 1024 * 1024))

if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "gpu_bundle: no CUDA toolkit (nvcc) here: the bundle would have no CUDA backend" >&2
  exit 1
fi
targets=(//ps_server:ps_server //worker:worker //deploy:local_cluster //worker/cuda:cuda_device_test)
echo "gpu_bundle: building ${targets[*]}"
bazel build "${targets[@]}" >&2
bin=$(bazel info bazel-bin 2>/dev/null)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/libexec" "$stage/lib" "$stage/bin" "$stage/data"

# Each binary runs through the bundled loader with the bundled libraries
# first, then CUDA's (FULCRUM_CUDA_LIBS, set by run.sh), then the system's.
wrap() {  # NAME PATH_UNDER_BIN
  local name=$1 path=$2 up
  up=$(dirname "$path" | sed 's|^\.$||; s|[^/][^/]*|..|g')  # bin/a/b/x: ../..; bin/x: nothing
  mkdir -p "$stage/bin/$(dirname "$path")"
  cat > "$stage/bin/$path" <<EOF
#!/bin/sh
root=\$(cd "\$(dirname "\$0")/$up/.." && pwd)
exec "\$root/lib/ld-linux-x86-64.so.2" --library-path "\$root/lib:\${FULCRUM_CUDA_LIBS:-}" \\
  "\$root/libexec/$name" "\$@"
EOF
  chmod +x "$stage/bin/$path"
}
for pair in ps_server/ps_server:ps_server worker/worker:worker deploy/local_cluster:local_cluster \
            worker/cuda/cuda_device_test:cuda_device_test; do
  src=${pair%%:*}
  name=${pair##*:}
  cp "$bin/$src" "$stage/libexec/$name"
  chmod u+w "$stage/libexec/$name"
  strip "$stage/libexec/$name"
  ldd "$bin/$src" | awk '$3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }'
done | sort -u > "$stage/libs.txt"
wrap ps_server ps_server/ps_server
wrap worker worker/worker
wrap local_cluster deploy/local_cluster
wrap cuda_device_test cuda_device_test

while read -r lib; do
  cp -L "$lib" "$stage/lib/$(basename "$lib")"
  chmod u+w "$stage/lib/$(basename "$lib")"
  strip --strip-unneeded "$stage/lib/$(basename "$lib")" 2>/dev/null || true
done < "$stage/libs.txt"
[ -f "$stage/lib/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$stage/lib/"
rm "$stage/libs.txt"
cp "$data"/*-ubyte.gz "$stage/data/"

rm -rf "$out"
mkdir -p "$out"
# gzip, not xz: a bare debian:12 has no xz.
tar -C "$stage" -c bin libexec lib | gzip -9 > "$out/payload.tar.gz"
cp "$stage"/data/*.gz "$out/"
cp scripts/gpu_bundle_run.sh "$out/run.sh"
chmod +x "$out/run.sh"
size=$(du -sb "$out" | cut -f1)
echo "gpu_bundle: $out: $(numfmt --to=iec "$size") ($(find "$stage/lib" -mindepth 1 -maxdepth 1 | wc -l) libraries," \
  "$(du -sb "$stage/lib" | cut -f1 | numfmt --to=iec) unpacked)"
if ((size > limit)); then
  echo "gpu_bundle: $out is over 64 MiB: it will not travel" >&2
  exit 1
fi
