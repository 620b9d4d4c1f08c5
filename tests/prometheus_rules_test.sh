#!/usr/bin/env bash
# The alerting rules (deploy/prometheus/fulcrum-alerts.yml) are valid
# Prometheus rules, and each fires when its unit tests say it should
# (fulcrum-alerts.test.yml), by Debian's promtool; and the compose
# cluster's Prometheus configuration (compose.yml) is valid, with those
# rules where its container mounts them.
set -euo pipefail
command -v promtool > /dev/null ||
  { echo "no promtool: scripts/install_deps.sh installs Debian's prometheus" >&2; exit 1; }
cd deploy/prometheus
promtool check rules fulcrum-alerts.yml
promtool test rules fulcrum-alerts.test.yml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|/etc/prometheus/fulcrum-alerts.yml|$PWD/fulcrum-alerts.yml|" compose.yml > "$tmp/compose.yml"
grep -q "$PWD/fulcrum-alerts.yml" "$tmp/compose.yml" ||
  { echo "compose.yml no longer loads /etc/prometheus/fulcrum-alerts.yml" >&2; exit 1; }
promtool check config "$tmp/compose.yml"
