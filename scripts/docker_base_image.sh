#!/usr/bin/env bash
# Makes the base images debian:12 and debian:12-slim from Debian's packages,
# for Docker engines that reach no image registry (air-gapped sites, and the
# machines this project is built on). Does nothing when both exist as this
# script made them (label fulcrum.base = $VERSION below).
#
#   scripts/docker_base_image.sh            # needs root and a running engine
#
# The root file system is debootstrap's minbase bookworm with this machine's
# apt sources, CA certificates and pip config copied in, so apt and pip inside
# an image build trust the same network this machine does.
set -euo pipefail
VERSION=2  # raise it when the root file system below changes

label() { docker image inspect -f '{{index .Config.Labels "fulcrum.base"}}' "$1" 2>/dev/null; }
if [ "$(label debian:12)" = "$VERSION" ] && [ "$(label debian:12-slim)" = "$VERSION" ]; then
  echo "docker_base_image: debian:12 and debian:12-slim already exist"
  exit 0
fi
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
}

rootfs=$(mktemp -d /var/tmp/fulcrum-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
echo "docker_base_image: debootstrap minbase bookworm from $mirror (a few minutes)"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$rootfs.log" 2>&1 || {
  tail -20 "$rootfs.log" >&2
  exit 1
}
rm -f "$rootfs.log"

# Trust what this machine trusts.
if [ -d /etc/apt/sources.list.d ] && ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  cp /etc/apt/sources.list.d/*.sources "$rootfs/etc/apt/sources.list.d/"
  rm -f "$rootfs/etc/apt/sources.list"
fi
mkdir -p "$rootfs/usr/local/share/ca-certificates" "$rootfs/etc/ssl/certs"
cp -a /usr/local/share/ca-certificates/. "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$rootfs/etc/pip.conf"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
chmod 755 "$rootfs"  # mktemp made it 0700: "/" must be open to non-root users

# An imported image has no environment: give it the PATH and command the
# registry's debian:12 has.
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' --change "LABEL fulcrum.base=$VERSION" - debian:12 >/dev/null
docker tag debian:12 debian:12-slim
echo "docker_base_image: made debian:12 and debian:12-slim" \
  "($(docker image inspect -f '{{.Size}}' debian:12 | numfmt --to=iec))"
