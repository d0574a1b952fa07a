#!/usr/bin/env bash
# The operator under load on a real API server (issue 50, part 2): N FineTuneJobs (one CPU worker,
# no preflight) created at once, run to Succeeded (this script plays the kubelet), deleted at once.
# Prints what the issue asks for: time to converge after the last creation, the operator's memory
# and CPU, its API request rate (kubetune_operator_api_requests_total), reconcile latency p50/p99
# (from kubetune_operator_reconcile_duration_seconds), memory once every job has finished, and how
# long the garbage collector takes to remove every child after the delete. A measurement, not a
# test: nothing here passes or fails on a time.
#
# usage: KUBECONFIG=... bench/operator_scale.sh PATH/TO/kubetune-operator [N] [OPERATOR_FLAGS...]
set -euo pipefail

operator_bin=${1:?usage: operator_scale.sh PATH/TO/kubetune-operator [N] [OPERATOR_FLAGS...]}
n=${2:-3000}
shift $(($# >= 2 ? 2 : 1))
root=$(cd "$(dirname "$0")/.." && pwd)
ns=kubetune-scale-$$
port=$((20000 + RANDOM % 20000))
work=$(mktemp -d)
python=${KUBETUNE_PYTHON:-python3}
op_pid="" proxy_pid=""
cleanup() {
  for pid in $op_pid $proxy_pid; do kill "$pid" 2>/dev/null || true; done
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  echo "operator log: $work/operator.log"
}
trap cleanup EXIT

kubectl apply -f "$root/charts/kubetune/crds/" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/finetunejobs.kubetune.io >/dev/null
kubectl create namespace "$ns" >/dev/null
"$operator_bin" --namespace "$ns" --leader-elect 0 --http-port "$port" "$@" >"$work/operator.log" 2>&1 &
op_pid=$!

# The jobs, in files of 100: kubectl create sends one request per object, 8 of them at once.
"$python" - "$root/examples/jobs/lora-single-gpu.yaml" "$n" "$work" <<'PY'
import sys, yaml
base = yaml.safe_load(open(sys.argv[1]))
n, work = int(sys.argv[2]), sys.argv[3]
base["spec"]["workers"].update(replicas=1, gpusPerWorker=0)
base["spec"]["metrics"] = {"port": 0}
base["spec"].setdefault("runPolicy", {})["preflight"] = False
for chunk in range(0, n, 100):
    docs = []
    for i in range(chunk, min(n, chunk + 100)):
        base["metadata"] = {"name": f"scale-{i:05d}"}
        docs.append(yaml.safe_dump(base))
    open(f"{work}/jobs-{chunk // 100:03d}.yaml", "w").write("---\n".join(docs))
PY

cpu_of() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
cpu_seconds() { cpu_of "$op_pid"; }
# The API server's CPU too, when it runs on this machine: what bounds the time to converge here.
apiserver_pid=$(pgrep -x kube-apiserver | head -1 || true)
apiserver_cpu() { if [[ -n "$apiserver_pid" ]]; then cpu_of "$apiserver_pid"; else echo nan; fi; }
rss_mib() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$op_pid/status"; }
metrics() { curl -sf "http://127.0.0.1:$port/metrics"; }
# requests, p50 and p99 of the reconcile durations, from the operator's own metrics
summary() {
  metrics | "$python" -c '
import re, sys
text = sys.stdin.read()
requests = sum(float(v) for v in re.findall(r"^kubetune_operator_api_requests_total\{[^}]*\} (\S+)", text, re.M))
buckets = sorted((float("inf") if le == "+Inf" else float(le), float(v)) for le, v in re.findall(
    r"^kubetune_operator_reconcile_duration_seconds_bucket\{le=\"([^\"]+)\"\} (\S+)", text, re.M))
total = buckets[-1][1] if buckets else 0
def q(p):
    return next((le for le, c in buckets if c >= p * total), float("nan"))
print(f"{requests:.0f} {q(0.5)} {q(0.99)} {total:.0f}")'
}
count() { kubectl get "$1" -n "$ns" -l app.kubernetes.io/managed-by=kubetune-operator -o name 2>/dev/null | wc -l; }
phases_set() {
  kubectl get ftj -n "$ns" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c . || true
}

until metrics >/dev/null; do sleep 0.5; done
cpu0=$(cpu_seconds) api_cpu0=$(apiserver_cpu)
t0=$(date +%s.%N)
ls "$work"/jobs-*.yaml | xargs -P 8 -n 1 kubectl create -n "$ns" -o name -f >/dev/null
t_created=$(date +%s.%N)
until [[ "$(count pods)" -ge "$n" && "$(phases_set)" -ge "$n" ]]; do sleep 1; done
t_converged=$(date +%s.%N)
read -r requests p50 p99 reconciles <<<"$(summary)"
cpu1=$(cpu_seconds) api_cpu1=$(apiserver_cpu)
rss_running=$(rss_mib)
elapsed() { awk "BEGIN {printf \"%.0f\", $2 - $1}"; }
echo "(so far) created in $(elapsed "$t0" "$t_created") s; every job has its pod and a phase $(elapsed "$t_created" "$t_converged") s later; operator ${rss_running} MiB"

# Every worker ends well: the jobs are Succeeded, and what the operator keeps of them is what a
# cluster with thousands of finished jobs costs it.
# (through kubectl proxy, 16 requests at once: one kubectl process a pod would time kubectl)
proxy_port=$((port + 1))
kubectl proxy --port "$proxy_port" >/dev/null 2>&1 &
proxy_pid=$!
until curl -sf "http://127.0.0.1:$proxy_port/version" >/dev/null; do sleep 0.2; done
"$python" - "$proxy_port" "$ns" <<'PY'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
base = f"http://127.0.0.1:{sys.argv[1]}/api/v1/namespaces/{sys.argv[2]}/pods"
pods = [p["metadata"]["name"] for p in json.load(urllib.request.urlopen(base))["items"]]
body = json.dumps({"status": {"phase": "Succeeded", "containerStatuses": [{
    "name": "trainer", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}).encode()
def succeed(name):
    req = urllib.request.Request(f"{base}/{name}/status", data=body, method="PATCH",
                                 headers={"Content-Type": "application/merge-patch+json"})
    urllib.request.urlopen(req).read()
with ThreadPoolExecutor(16) as pool:
    list(pool.map(succeed, pods))
PY
kill "$proxy_pid"
proxy_pid=""
until [[ "$(kubectl get ftj -n "$ns" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c Succeeded || true)" -ge "$n" ]]; do sleep 1; done
t_succeeded=$(date +%s.%N)
rss_finished=$(rss_mib)
echo "(so far) every job Succeeded $(elapsed "$t_converged" "$t_succeeded") s later; operator ${rss_finished} MiB"

# KUBETUNE_SCALE_GC_ALONE=1: the operator is stopped first, so the delete measures the garbage
# collector's own pace (the baseline the delete with the operator running is held to).
if [[ "${KUBETUNE_SCALE_GC_ALONE:-0}" == 1 ]]; then
  kill "$op_pid"
  wait "$op_pid" 2>/dev/null || true
  op_pid=""
fi
t_delete=$(date +%s.%N)
kubectl delete ftj -n "$ns" --all --wait=false >/dev/null
until [[ "$(count pods) $(count configmaps) $(count services) $(kubectl get ftj -n "$ns" -o name | wc -l)" == "0 0 0 0" ]]; do sleep 2; done
t_gone=$(date +%s.%N)
rss_deleted=$(rss_mib 2>/dev/null || echo "(stopped)")
cpu2=$(cpu_seconds 2>/dev/null || echo "$cpu1")

"$python" - <<PY
n = $n
created, converged = $t_created - $t0, $t_converged - $t_created
print(f"jobs                               {n}")
print(f"created (8 kubectl at once)        {created:.0f} s")
print(f"every job has its pod and a phase  {converged:.0f} s after the last was created")
print(f"operator CPU until then            {$cpu1 - $cpu0:.0f} s (kube-apiserver: {float('$api_cpu1') - float('$api_cpu0'):.0f} s)")
print(f"API requests until then            {$requests:.0f} ({$requests / ($t_converged - $t0):.0f}/s, {$requests / n:.1f} per job)")
print(f"reconciles, p50 / p99              {$reconciles:.0f}, {float('$p50') * 1000:.0f} ms / {float('$p99') * 1000:.0f} ms (histogram bucket bounds)")
print(f"operator memory, jobs running      {$rss_running} MiB")
print(f"every job Succeeded after          {$t_succeeded - $t_converged:.0f} s; memory {$rss_finished} MiB")
print(f"deleted at once: nothing left after {$t_gone - $t_delete:.0f} s; memory {'$rss_deleted'} MiB")
print(f"operator CPU in all                {$cpu2 - $cpu0:.0f} s")
PY
