#!/usr/bin/env bash
# The alerting rules (deploy/prometheus/fulcrum-alerts.yml) are valid
# Prometheus rules, and each fires when its unit tests say it should
# (fulcrum-alerts.test.yml), by Debian's promtool.
set -euo pipefail
command -v promtool > /dev/null ||
  { echo "no promtool: scripts/install_deps.sh installs Debian's prometheus" >&2; exit 1; }
cd deploy/prometheus
promtool check rules fulcrum-alerts.yml
promtool test rules fulcrum-alerts.test.yml
