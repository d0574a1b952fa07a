#!/usr/bin/env bash
# Restarts of everything around the operator, and of the operator itself, against a real API server
# ($KUBECONFIG, with kube-controller-manager's garbage collector; no kubelet: this script plays it
# through pods/status, as operator_e2e.sh does). Issue 50, parts 3 and 4.
#
#   1. Watches that expire: the operator is paused (SIGSTOP), the cluster's resourceVersion moves on,
#      the API server is restarted (which cuts its watches), jobs are created, deleted and their
#      workers fail, and etcd is compacted (the restart and etcd's URL from the environment,
#      below), so the operator's resourceVersions are gone (410).
#      Resumed, it lists again and acts on every change it missed, once: each new job gets its
#      gang, each deleted one leaves nothing, each failed gang restarts exactly once.
#   2. kill -9 of the operator at random moments, CHAOS_KILLS times (default 50): just after a job
#      is created, a worker fails (gang restart), a job is deleted. After each kill a new operator
#      starts; the state must converge with exactly one gang of the current attempt per live job,
#      no pod of an older attempt, nothing left of a deleted job, and status.restarts equal to the
#      failures this script caused (none counted twice, none lost).
#
# Environment: KUBETUNE_E2E_RESTART_APISERVER (a command that kills the API server, kill -9: a
# graceful stop sends its watchers a last bookmark, and no 410 follows, and starts it again,
# returning once it is ready) and KUBETUNE_E2E_ETCD (etcd's client URL, for the compaction through its JSON
# gateway); without them part 1 is skipped (said so). Exits 77 (ctest: skipped) without a cluster.
#
# usage: restarts_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT]
set -euo pipefail

operator_bin=${1:?usage: restarts_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT]}
root=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
ns=kubetune-restarts-$$
kills=${CHAOS_KILLS:-50}

if [[ -z "${KUBECONFIG:-}" ]] || ! command -v kubectl >/dev/null ||
  ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIPPED: no cluster reachable (set KUBECONFIG)"
  exit 77
fi

work=$(mktemp -d)
op_pid=""
cleanup() {
  [[ -n "$op_pid" ]] && kill -9 "$op_pid" 2>/dev/null
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  echo "operator logs: $work"
}
trap cleanup EXIT
# shellcheck source=e2e_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"

kubectl apply -f "$root/charts/kubetune/crds/" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/finetunejobs.kubetune.io >/dev/null
kubectl create namespace "$ns" >/dev/null

starts=0
start_operator() {
  starts=$((starts + 1))
  # One operator at a time, so no leader election: a killed leader's Lease would make the next one
  # wait for it to run out, which is leader election's test (operator_e2e.sh), not this one's.
  "$operator_bin" --namespace "$ns" --leader-elect 0 --workers 2 --http-port -1 \
    >"$work/operator-$starts.log" 2>&1 &
  op_pid=$!
}
kill_operator() {
  kill -9 "$op_pid" 2>/dev/null || true
  wait "$op_pid" 2>/dev/null || true
}

# What this script did, to hold the operator to: the live jobs and the failures caused in each.
declare -A failures=()
created_total=0 deleted_total=0 failed_total=0
new_job() {  # new_job NAME: two CPU workers, no preflight (nothing here runs a trainer)
  example "$root/examples/jobs/lora-single-gpu.yaml" "$1" \
    '{"spec":{"workers":{"replicas":2,"gpusPerWorker":0},"metrics":{"port":0},"runPolicy":{"preflight":false,"backoffLimit":1000}}}' |
    kubectl apply -n "$ns" -f - >/dev/null
  failures[$1]=0
  created_total=$((created_total + 1))
}
delete_job() {
  kubectl delete ftj -n "$ns" "$1" --wait=false >/dev/null
  unset "failures[$1]"
  deleted_total=$((deleted_total + 1))
}
# A worker of the job's current gang dies (the kubelet's report: exit code 137).
fail_worker() {  # fail_worker JOB: false when the job has no current gang yet
  local attempt pod
  attempt=$(jp ftj "$1" '{.status.restarts}')
  pod=$(kubectl get pods -n "$ns" -l "kubetune.io/job-name=$1,kubetune.io/attempt=${attempt:-0}" \
    -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null) || return 1
  [[ -n "$pod" ]] || return 1
  kubectl patch -n "$ns" pod "$pod" --subresource=status --type=merge -p \
    '{"status":{"phase":"Failed","containerStatuses":[{"name":"trainer","ready":false,"restartCount":0,"image":"x","imageID":"","state":{"terminated":{"exitCode":137,"reason":"Error"}}}]}}' \
    >/dev/null
  failures[$1]=$((failures[$1] + 1))
  failed_total=$((failed_total + 1))
}

# Converged: every live job has its two pods, of its current attempt, which counts exactly the
# failures caused; nothing is left of a deleted job.
converged() {
  kubectl get pods -n "$ns" -o json >"$work/pods.json"
  kubectl get ftj -n "$ns" -o json >"$work/jobs.json"
  local expected=""
  for j in "${!failures[@]}"; do expected+="$j=${failures[$j]} "; done
  "$python" - "$work/pods.json" "$work/jobs.json" "$expected" <<'PY' >"$work/why" 2>&1
import json, sys
pods = json.load(open(sys.argv[1]))["items"]
jobs = {j["metadata"]["name"]: j for j in json.load(open(sys.argv[2]))["items"]}
expected = dict(e.split("=") for e in sys.argv[3].split())
problems = []
for name, want in expected.items():
    job = jobs.get(name)
    if job is None:
        problems.append(f"{name}: missing")
        continue
    restarts = job.get("status", {}).get("restarts", 0)
    if restarts != int(want):
        problems.append(f"{name}: status.restarts {restarts}, but {want} failures were caused")
    mine = [p for p in pods if p["metadata"]["labels"].get("kubetune.io/job-name") == name
            and p["metadata"]["labels"].get("kubetune.io/role") == "worker"]
    attempts = sorted(p["metadata"]["labels"]["kubetune.io/attempt"] for p in mine)
    if attempts != [str(restarts)] * 2:
        problems.append(f"{name}: pods of attempts {attempts}, expected two of {restarts}")
for p in pods:
    owner = p["metadata"]["labels"].get("kubetune.io/job-name")
    if owner not in expected and "deletionTimestamp" not in p["metadata"]:
        problems.append(f"pod {p['metadata']['name']}: its job {owner} was deleted")
for name in jobs:
    if name not in expected and "deletionTimestamp" not in jobs[name]["metadata"]:
        problems.append(f"job {name} should be gone")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
}
python=${KUBETUNE_PYTHON:-python3}

start_operator
echo "== part 1: watches that expire (410 Gone) and an API server restart"
for i in 1 2 3; do new_job "before-$i"; done
eventually 60 converged || fail "the first jobs did not start: $(cat "$work/why")"
if [[ -n "${KUBETUNE_E2E_RESTART_APISERVER:-}" && -n "${KUBETUNE_E2E_ETCD:-}" ]]; then
  kill -STOP "$op_pid"
  # Writes the operator does not watch (Secrets) move the cluster's resourceVersion on; then the
  # restart cuts the paused operator's watches at the resourceVersions they had read, and its new
  # watch cache starts after them: those versions are too old to watch from (410 Gone). Every
  # change to what the operator does watch comes after.
  for i in $(seq 1 40); do
    kubectl create secret generic -n "$ns" "noise-$i" --from-literal=n="$i" >/dev/null
  done
  bash -c "$KUBETUNE_E2E_RESTART_APISERVER" >"$work/restart.log" 2>&1 || fail "restarting the API server: $(tail -3 "$work/restart.log")"
  new_job while-paused
  delete_job before-1
  fail_worker before-2 || fail "no worker of before-2 to fail"
  revision=$(curl -sf -X POST "$KUBETUNE_E2E_ETCD/v3/kv/range" -d '{"key":"AA=="}' |
    "$python" -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
  curl -sf -X POST "$KUBETUNE_E2E_ETCD/v3/kv/compaction" -d "{\"revision\":\"$revision\",\"physical\":true}" >/dev/null ||
    fail "etcd did not compact"
  kill -CONT "$op_pid"
  eventually 90 converged || fail "after the restart: $(cat "$work/why")"
  grep -q "listing again" "$work/operator-$starts.log" ||
    fail "no 410 was seen (the test did not test it): $(grep -i informer "$work/operator-$starts.log" | tail -3)"
  ok "the API server restarted and etcd compacted at revision $revision while the operator was paused: it listed again (410 Gone), the new job has its gang, the deleted one left nothing, the failed gang restarted once"
else
  echo "  SKIPPED: set KUBETUNE_E2E_RESTART_APISERVER and KUBETUNE_E2E_ETCD to restart the API server"
fi

echo "== part 2: kill -9 of the operator at random moments, $kills times"
RANDOM=50  # the same moments each run
created=0 slowest=0
for k in $(seq 1 "$kills"); do
  case $((RANDOM % 4)) in
    0) created=$((created + 1)); new_job "chaos-$created" ;;
    1 | 2) # a gang restart (most of what the operator does under way)
      live=("${!failures[@]}")
      fail_worker "${live[RANDOM % ${#live[@]}]}" || true ;;
    3) live=("${!failures[@]}")
      if ((${#live[@]} > 2)); then delete_job "${live[RANDOM % ${#live[@]}]}"; else
        created=$((created + 1)); new_job "chaos-$created"; fi ;;
  esac
  sleep "0.$((RANDOM % 10))"
  kill_operator
  start_operator
  t0=$SECONDS
  eventually 90 converged || fail "kill $k: no convergence: $(cat "$work/why")"
  ((SECONDS - t0 > slowest)) && slowest=$((SECONDS - t0))
done
ok "$kills kills, after $created_total jobs created, $deleted_total deleted and $failed_total gang restarts caused: every time the jobs converged (slowest ${slowest} s) with one gang of the current attempt each, no pod of an older attempt or a deleted job, and status.restarts equal to the failures caused"
echo "PASSED: $passed checks"
