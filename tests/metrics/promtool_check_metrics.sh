#!/usr/bin/env bash
# ctest: lint the /metrics page of a real HttpEndpoint carrying every kubetune series with
# `promtool check metrics`. Exit 77 (ctest SKIP_RETURN_CODE) when promtool is not installed.
# Usage: promtool_check_metrics.sh <series_dump binary>
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool not found: SKIPPED"
  exit 77
fi
page=$(mktemp)
trap 'rm -f "$page"' EXIT
"$1" >"$page"
echo "$(grep -c '^# TYPE' "$page") families, $(grep -vc '^#' "$page") samples"
# promtool prints lint problems and exits non-zero on any of them.
promtool check metrics <"$page"
echo "promtool check metrics: OK"
