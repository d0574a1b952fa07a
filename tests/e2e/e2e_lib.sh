# Helpers shared by the end-to-end scripts (sourced; they set `ns` before calling jp/has_event).

passed=0
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() {
  passed=$((passed + 1))
  echo "  ok: $*"
}
# eventually SECONDS COMMAND...: retries COMMAND every 0.5 s (every $EVENTUALLY_POLL s when set).
eventually() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep "${EVENTUALLY_POLL:-0.5}"
  done
}
jp() { kubectl get -n "$ns" "$1" "$2" -o "jsonpath=$3" 2>/dev/null; }
phase_is() { [[ "$(jp ftj "$1" '{.status.phase}')" == "$2" ]]; }
has_event() { kubectl get events -n "$ns" --field-selector "involvedObject.name=$1,reason=$2" -o name | grep -q .; }
# An example job, with a JSON merge patch applied (client side, nothing is sent).
example() {  # example FILE NAME PATCH
  kubectl patch --local -o yaml --type=merge -f "$1" -p "{\"metadata\":{\"name\":\"$2\"}}" |
    kubectl patch --local -o yaml --type=merge -f - -p "$3"
}
