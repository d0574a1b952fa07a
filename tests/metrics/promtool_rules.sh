#!/usr/bin/env bash
# ctest: validate the alert rules (`promtool check rules`) and run their unit tests
# (`promtool test rules`). Exit 77 (ctest SKIP_RETURN_CODE) when promtool is not installed.
# Usage: promtool_rules.sh check <rules.yaml> | test <rules.test.yaml>
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  echo "promtool not found: SKIPPED"
  exit 77
fi
case "$1" in
  check) promtool check rules "$2" ;;
  test) promtool test rules "$2" ;;
  *) echo "usage: $0 check|test <file>" >&2; exit 2 ;;
esac
