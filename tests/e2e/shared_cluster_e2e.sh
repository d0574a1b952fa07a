#!/usr/bin/env bash
# End-to-end test of kubetune in a shared GPU cluster: a real kube-apiserver with the real
# kube-scheduler (and kube-controller-manager's garbage collector) from $KUBECONFIG, two GPU Node
# objects of 8 nvidia.com/gpu each, and, when the cluster serves it, Kueue's own controller.
# No kubelet: tests/e2e/fake_kubelet.py plays it (bound pods run; one job runs the real trainer on
# this machine's CPU, so that its SIGTERM checkpoint and its resume are the trainer's own).
#   1. A gang bigger than the cluster (3 workers x 8 GPUs on 2 nodes): the scheduler binds two
#      pods and leaves the third Unschedulable. The job says so within 30 s (condition Scheduled,
#      `kubectl get` column, event, operator metrics); at runPolicy.schedulingTimeoutSeconds the
#      gang is deleted, freeing its 16 GPUs, and created again after the back-off.
#   2. Kueue, a ClusterQueue of 16 GPUs: a second job waits (Queued, Kueue's message) while the
#      first runs, then runs; a high-priority job preempts a low-priority one that runs the real
#      trainer: its workers stop through SIGTERM with a checkpoint, the quota is given back, and
#      re-admitted it resumes at the very step it stopped at (zero lost steps). The Workloads are
#      marked Finished when their jobs end.
#   3. kill -9 of the operator around a gang's release (CHAOS_RELEASE_KILLS, default 10) and during
#      a preemption (CHAOS_PREEMPT_KILLS, default 10): the state converges with each release and
#      eviction counted once, no restart counted, no pod or Workload twice (issue 50, part 4;
#      restarts_e2e.sh kills it through creates, gang restarts and deletes).
# Exits 77 (ctest: skipped) when no cluster with a scheduler is reachable; the Kueue part reports
# itself skipped when the cluster serves no Kueue.
#
# usage: shared_cluster_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT]
set -euo pipefail

operator_bin=${1:?usage: shared_cluster_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT]}
root=$(cd "${2:-$(dirname "$0")/../..}" && pwd)
ns=kubetune-shared-$$
opns=kubetune-system
python=${KUBETUNE_PYTHON:-python3}
trainer="$(dirname "$operator_bin")/kubetune-trainer"

if [[ -z "${KUBECONFIG:-}" ]] || ! command -v kubectl >/dev/null ||
  ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIPPED: no cluster reachable (set KUBECONFIG)"
  exit 77
fi
if ! kubectl get --raw /readyz >/dev/null 2>&1 || [[ ! -x "$trainer" ]]; then
  echo "SKIPPED: the cluster is not ready, or no kubetune-trainer next to the operator"
  exit 77
fi

work=$(mktemp -d)
pids=()
nodes=(e2e-gpu-a e2e-gpu-b)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # No kubelet confirms the deletion of a bound pod: remove them as one would.
  kubectl delete pods -n "$ns" --all --grace-period=0 --force >/dev/null 2>&1 || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  # The install without Helm (as operator_e2e.sh leaves it: the next helm install must not meet it).
  kubectl delete -f "$root/charts/kubetune/rbac/operator-rbac.yaml" --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete node "${nodes[@]}" --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete priorityclass training --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete clusterqueue e2e-gpus --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete resourceflavor e2e-h100 --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete workloadpriorityclass e2e-low e2e-high --ignore-not-found >/dev/null 2>&1 || true
  echo "logs: $work"
}
trap cleanup EXIT

# shellcheck source=e2e_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
condition() { jp ftj "$1" "{.status.conditions[?(@.type==\"$2\")].$3}"; }
condition_reason_is() { [[ "$(condition "$1" "$2" reason)" == "$3" ]]; }
workers() { kubectl get pods -n "$ns" -l "kubetune.io/job-name=$1,kubetune.io/role=worker" -o name; }
worker_count() { workers "$1" | wc -l; }
workers_are() { [[ "$(worker_count "$1")" -eq "$2" ]]; }
bound_count() {
  kubectl get pods -n "$ns" -l "kubetune.io/job-name=$1" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true
}
bound_are() { [[ "$(bound_count "$1")" -eq "$2" ]]; }
all_running() { [[ "$(jp pods "" '{.items[*].status.phase}')" != *Pending* ]]; }
metric() {  # metric NAME JOB: the operator's value of NAME for JOB
  curl -s "http://127.0.0.1:$metrics_port/metrics" | grep "^$1{" | grep "job=\"$2\"" | awk '{print $2}'
}
metric_is() { [[ "$(metric "$1" "$2")" == "$3" ]]; }
set_workers() {  # set_workers JOB PHASE CODE: what the kubelet reports when the trainer ends
  for pod in $(workers "$1"); do
    kubectl patch -n "$ns" "$pod" --subresource=status --type=merge -p "{\"status\":{\"phase\":\"$2\",\"containerStatuses\":[{\"name\":\"trainer\",\"ready\":false,\"restartCount\":0,\"image\":\"x\",\"imageID\":\"\",\"state\":{\"terminated\":{\"exitCode\":$3,\"reason\":\"Completed\"}}}]}}" >/dev/null
  done
}
# An example job, with a JSON merge patch applied (client side, nothing is sent). Its volumes are
# hostPath: this control plane binds no PersistentVolumeClaim.
example() {  # example FILE NAME PATCH
  kubectl patch --local -o yaml --type=merge -f "$1" -p "{\"metadata\":{\"name\":\"$2\"},\"spec\":{\"volumes\":[{\"name\":\"data\",\"mountPath\":\"/data\",\"hostPath\":{\"path\":\"/tmp\"}}]}}" |
    kubectl patch --local -o yaml --type=merge -f - -p "$3"
}

# The job that really trains: a tiny model made by the trainer, the shipped chat data.
"$trainer" init-model --config "$root/examples/default/model_config.json" \
  --tokenizer "$root/examples/default/tokenizer" --out "$work/model" >/dev/null 2>&1 ||
  fail "init-model"

echo "== two GPU nodes of 8 nvidia.com/gpu (tainted), the CRD, the RBAC, the operator"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for n in "${nodes[@]}"; do
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata:
  name: $n
  labels: {kubernetes.io/hostname: $n, nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.memory: "81559"}
YAML
  kubectl patch node "$n" --type=json -p '[{"op":"replace","path":"/spec/taints","value":[{"key":"nvidia.com/gpu","effect":"NoSchedule"}]}]' >/dev/null
  capacity='{"cpu":"96","memory":"1000Gi","nvidia.com/gpu":"8","pods":"110"}'
  kubectl patch node "$n" --subresource=status --type=merge -p "{\"status\":{\"capacity\":$capacity,\"allocatable\":$capacity,\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\",\"message\":\"e2e\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}" >/dev/null
done
kubectl create priorityclass training --value=1000 >/dev/null
kubectl apply -f "$root/charts/kubetune/crds/" -f "$root/charts/kubetune/rbac/" >/dev/null
kubectl wait --for condition=established --timeout=60s crd/finetunejobs.kubetune.io >/dev/null
kubectl create namespace "$ns" >/dev/null
kubectl config view --minify --raw >"$work/operator.kubeconfig"
token=$(kubectl create token kubetune-operator -n "$opns" --duration=2h)
KUBECONFIG="$work/operator.kubeconfig" kubectl config set-credentials kubetune-operator --token="$token" >/dev/null
KUBECONFIG="$work/operator.kubeconfig" kubectl config set-context --current --user=kubetune-operator >/dev/null
metrics_port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
op_pid=""
start_operator() {
  POD_NAMESPACE=$opns "$operator_bin" --kubeconfig "$work/operator.kubeconfig" --namespace "$ns" \
    --leader-elect=false --http-port "$metrics_port" --progress-seconds 2 >>"$work/operator.log" 2>&1 &
  op_pid=$!
  pids+=("$op_pid")
  eventually 30 curl -sf "http://127.0.0.1:$metrics_port/readyz" || fail "operator not ready: $(tail -5 "$work/operator.log")"
}
# kill -9 at a moment of the caller's choosing, and a new operator (no leader election: one at a time).
kill_and_restart_operator() {
  kill -9 "$op_pid" 2>/dev/null || true
  wait "$op_pid" 2>/dev/null || true
  start_operator
}
"$python" "$root/tests/e2e/fake_kubelet.py" "$ns" "$trainer" "$work" >"$work/kubelet.log" 2>&1 &
pids+=($!)
start_operator
ok "nodes Ready with 8 GPUs each; operator (its ServiceAccount) ready; the kubelet stand-in runs"

echo "== a gang bigger than the cluster is named at once and never holds GPUs in silence"
big=e2e-too-big
example "$root/examples/jobs/full-multinode.yaml" $big \
  '{"spec":{"workers":{"replicas":3},"metrics":{"port":0},"runPolicy":{"preflight":false,"schedulingTimeoutSeconds":20}}}' |
  kubectl apply -n "$ns" -f - >/dev/null
t0=$SECONDS
eventually 30 condition_reason_is $big Scheduled PartiallyScheduled ||
  fail "no PartiallyScheduled condition in 30 s: $(jp ftj $big '{.status}')"
msg=$(condition $big Scheduled message)
[[ "$msg" == *"Insufficient nvidia.com/gpu"* && "$msg" == *"hold 16 GPUs"* ]] || fail "message: $msg"
ok "Scheduled=False PartiallyScheduled after $((SECONDS - t0)) s: ${msg:0:150}..."
row=$(kubectl get ftj -n "$ns" $big --no-headers)
[[ "$row" == *PartiallyScheduled* ]] || fail "kubectl get ftj: $row"
ok "kubectl get ftj: $row"
eventually 10 has_event $big PartiallyScheduled || fail "no PartiallyScheduled event"
ok "event: $(kubectl get events -n "$ns" --field-selector "involvedObject.name=$big,reason=PartiallyScheduled" -o jsonpath='{.items[0].message}' | cut -c1-100)..."
eventually 10 metric_is kubetune_operator_job_idle_held_gpus $big 16 ||
  fail "idle_held_gpus: $(metric kubetune_operator_job_idle_held_gpus $big)"
metric_is kubetune_operator_job_unscheduled_workers $big 1 || fail "unscheduled_workers: $(metric kubetune_operator_job_unscheduled_workers $big)"
ok "operator metrics: unscheduled_workers 1, idle_held_gpus 16"
eventually 40 condition_reason_is $big Scheduled SchedulingTimeout || fail "not released: $(jp ftj $big '{.status}')"
eventually 15 bound_are $big 0 || fail "pods still bound after the release"
held=$((SECONDS - t0))
((held <= 20 + 15)) || fail "GPUs held $held s (limit 20 s + slack)"
has_event $big SchedulingTimeout || fail "no SchedulingTimeout event"
[[ "$(jp ftj $big '{.status.scheduling.releases}')" == 1 ]] || fail "releases: $(jp ftj $big '{.status.scheduling}')"
ok "at schedulingTimeoutSeconds=20 the gang was deleted: no GPU held after $held s; $(condition $big Scheduled message | cut -c1-120)..."
eventually 50 bound_are $big 2 || fail "the gang was not created again after the back-off: $(jp ftj $big '{.status.scheduling}')"
ok "after the back-off (30 s) the gang was created again: $(kubectl get ftj -n "$ns" $big --no-headers | tr -s ' ')"
kubectl delete ftj -n "$ns" $big --wait=true --timeout=60s >/dev/null
eventually 30 metric_is kubetune_operator_job_idle_held_gpus $big "" || fail "metric left after delete"

echo "== kill -9 of the operator around the release, ${CHAOS_RELEASE_KILLS:=10} times"
# Each time a gang too big for the cluster is partly scheduled, with schedulingTimeoutSeconds=6,
# and the operator is killed between 3 and 9 s later: before, during or after the release. The
# new operator must release the gang once: no GPU held, status.scheduling.releases 1 (not 0, not
# 2), no restart counted (a release is not a failure), one pod per rank at most on the way.
RANDOM=7  # the same moments each run
released_once() {
  condition_reason_is "$1" Scheduled SchedulingTimeout && bound_are "$1" 0 &&
    [[ "$(jp ftj "$1" '{.status.scheduling.releases}')" == 1 && "$(jp ftj "$1" '{.status.restarts}')" == 0 ]]
}
at_most_one_pod_per_rank() {
  [[ -z "$(kubectl get pods -n "$ns" -l "kubetune.io/job-name=$1" -o jsonpath='{range .items[*]}{.metadata.labels.kubetune\.io/rank}{"\n"}{end}' | sort | uniq -d)" ]]
}
before=0 after=0
for k in $(seq 1 "$CHAOS_RELEASE_KILLS"); do
  job=chaos-release-$k
  example "$root/examples/jobs/full-multinode.yaml" "$job" \
    '{"spec":{"workers":{"replicas":3},"metrics":{"port":0},"runPolicy":{"preflight":false,"schedulingTimeoutSeconds":6}}}' |
    kubectl apply -n "$ns" -f - >/dev/null
  eventually 30 condition_reason_is "$job" Scheduled PartiallyScheduled || fail "kill $k: $job not partly scheduled: $(jp ftj "$job" '{.status}')"
  sleep "$((3 + RANDOM % 7)).$((RANDOM % 10))"
  # Where the kill fell: before the release was stored, or after.
  [[ "$(jp ftj "$job" '{.status.scheduling.releases}')" == 1 ]] && after=$((after + 1)) || before=$((before + 1))
  kill_and_restart_operator
  at_most_one_pod_per_rank "$job" || fail "kill $k: two pods of one rank"
  eventually 40 released_once "$job" || fail "kill $k: not released exactly once: $(jp ftj "$job" '{.status}')"
  kubectl delete ftj -n "$ns" "$job" --wait=true --timeout=60s >/dev/null
  eventually 30 workers_are "$job" 0 || fail "kill $k: pods of $job left after its delete"
done
ok "$CHAOS_RELEASE_KILLS kills around the release ($before before it was stored, $after after): each gang released once (releases 1, restarts 0), no GPU held, no pod twice"

if ! kubectl get --raw /apis/kueue.x-k8s.io/v1beta2 >/dev/null 2>&1 ||
  ! grep -q "Kueue's Workloads are served" "$work/operator.log"; then
  echo "  SKIPPED: Kueue is not served by this cluster (shared/recipes/kueue.md)"
  echo "PASS: $passed checks"
  exit 0
fi

echo "== Kueue: a ClusterQueue of 16 GPUs; two jobs compete, then a high priority preempts"
kubectl apply -f - >/dev/null <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: e2e-h100}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: e2e-gpus}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: e2e-h100
      resources:
      - {name: cpu, nominalQuota: 192}
      - {name: memory, nominalQuota: 2000Gi}
      - {name: nvidia.com/gpu, nominalQuota: 16}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: $ns}
spec: {clusterQueue: e2e-gpus}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-low}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-high}
value: 1000
YAML
# queued JOB PRIORITY REPLICAS [PATCH]: a job of REPLICAS x 8 GPUs in LocalQueue team-a.
queued() {
  example "$root/examples/jobs/queued-lora.yaml" "$1" \
    "{\"metadata\":{\"labels\":{\"kueue.x-k8s.io/queue-name\":\"team-a\",\"kueue.x-k8s.io/priority-class\":\"$2\"}},\"spec\":{\"workers\":{\"replicas\":$3},\"metrics\":{\"port\":0},\"runPolicy\":{\"preflight\":false}}}" |
    kubectl patch --local -o yaml --type=merge -f - -p "${4:-{\}}" | kubectl apply -n "$ns" -f - >/dev/null
}
workload_of() { jp ftj "$1" '{.status.queue.workload}'; }
workload_condition() { kubectl get workload -n "$ns" "$(workload_of "$1")" -o "jsonpath={.status.conditions[?(@.type==\"$2\")].$3}"; }
workload_finished() { [[ "$(workload_condition "$1" Finished status)" == True ]]; }

queued q-first e2e-low 2
eventually 30 condition_reason_is q-first Admitted Admitted || fail "q-first not admitted: $(jp ftj q-first '{.status}')"
eventually 30 bound_are q-first 2 || fail "q-first's pods not bound"
selector=$(jp pod q-first-worker-0 '{.spec.nodeSelector}')
[[ "$selector" == *NVIDIA-H100-80GB-HBM3* ]] || fail "no flavor node label on the pod: $selector"
ok "q-first: Workload $(workload_of q-first) admitted ($(jp ftj q-first '{.status.queue.flavors}')); pods carry the flavor's node label and toleration, bound by the scheduler"
eventually 30 phase_is q-first Running || fail "q-first not Running"
pods_ready() { [[ "$(workload_condition q-first PodsReady status)" == True ]]; }
eventually 30 pods_ready || fail "q-first's Workload has no PodsReady=True: $(kubectl get workload -n "$ns" "$(workload_of q-first)" -o jsonpath='{.status.conditions}')"
ok "q-first Running; its Workload says PodsReady=True ($(workload_condition q-first PodsReady reason)), what Kueue's waitForPodsReady waits for"

real_trainer="{\"spec\":{\"model\":{\"path\":\"$work/model\"},\"data\":{\"train\":\"$root/examples/default/train.jsonl\"},\"output\":{\"dir\":\"$work/q-second-out\"},\"training\":{\"epochs\":1000,\"microBatchSize\":1,\"globalBatchSize\":1},\"checkpoint\":{\"everySteps\":0},\"workers\":{\"annotations\":{\"kubetune.io/e2e-run-trainer\":\"true\"}},\"volumes\":[{\"name\":\"work\",\"mountPath\":\"$work\",\"hostPath\":{\"path\":\"$work\"}},{\"name\":\"examples\",\"mountPath\":\"$root/examples\",\"hostPath\":{\"path\":\"$root/examples\"}}]}}"
queued q-second e2e-low 1 "$real_trainer"
eventually 30 phase_is q-second Queued || fail "q-second not Queued: $(jp ftj q-second '{.status}')"
sleep 2
workers_are q-second 0 || fail "q-second has pods while queued"
msg=$(condition q-second Admitted message)
[[ "$msg" == *"insufficient"* || "$msg" == *"Insufficient"* ]] || echo "  (Kueue's message: $msg)"
ok "q-second waits with no pod: $(kubectl get ftj -n "$ns" q-second --no-headers | tr -s ' ')"
ok "  its Admitted condition: ${msg:0:160}"

set_workers q-first Succeeded 0
eventually 30 phase_is q-first Succeeded || fail "q-first not Succeeded"
eventually 30 workload_finished q-first || fail "q-first's Workload not Finished"
ok "q-first succeeded; its Workload is Finished ($(workload_condition q-first Finished reason))"
eventually 30 condition_reason_is q-second Admitted Admitted || fail "q-second not admitted after q-first: $(jp ftj q-second '{.status}')"
eventually 30 bound_are q-second 1 || fail "q-second's pod not bound"
first_log="$work/q-second-worker-0.1.log"
trainer_step() { grep -o 'step=[0-9]*' "$1" 2>/dev/null | tail -1 | cut -d= -f2; }
trained_some() { [[ "$(trainer_step "$first_log")" -ge 3 ]]; }
eventually 120 trained_some || fail "the trainer of q-second did not train: $(tail -5 "$first_log")"
ok "q-second admitted once q-first finished; its worker runs the real trainer (step $(trainer_step "$first_log"))"

queued q-urgent e2e-high 2
eventually 30 has_event q-second WorkloadEvicted || fail "q-second not evicted: $(jp ftj q-second '{.status}')"
ok "q-urgent (priority 1000) preempted q-second: $(kubectl get events -n "$ns" --field-selector involvedObject.name=q-second,reason=WorkloadEvicted -o jsonpath='{.items[0].message}' | cut -c1-200)..."
eventually 60 workers_are q-second 0 || fail "q-second's worker not stopped"
stopped=$(grep -o 'stopping at step=[0-9]*' "$first_log" | cut -d= -f2)
[[ -n "$stopped" ]] || fail "the trainer did not stop through its SIGTERM checkpoint: $(tail -5 "$first_log")"
ok "q-second's trainer got SIGTERM and wrote its checkpoint at step $stopped"
eventually 30 condition_reason_is q-urgent Admitted Admitted || fail "q-urgent not admitted: $(jp ftj q-urgent '{.status}')"
eventually 30 bound_are q-urgent 2 || fail "q-urgent's pods not bound"
phase_is q-second Queued || fail "q-second is $(jp ftj q-second '{.status.phase}'), not Queued"
[[ "$(jp ftj q-second '{.status.queue.evictions}')" == 1 && "$(jp ftj q-second '{.status.restarts}')" == 0 ]] ||
  fail "q-second evictions/restarts: $(jp ftj q-second '{.status}')"
ok "the quota went back: q-urgent admitted and bound; q-second Queued (evictions 1, restarts 0: not a failure)"
set_workers q-urgent Succeeded 0
eventually 30 phase_is q-urgent Succeeded || fail "q-urgent not Succeeded"
eventually 30 condition_reason_is q-second Admitted Admitted || fail "q-second not admitted again: $(jp ftj q-second '{.status}')"
second_log="$work/q-second-worker-0.2.log"
resumed_line() { grep -o 'resuming from .* at step=[0-9]*' "$second_log"; }
eventually 120 resumed_line || fail "the second run did not resume: $(tail -5 "$second_log")"
resumed=$(resumed_line | grep -o 'step=[0-9]*' | cut -d= -f2)
[[ "$resumed" == "$stopped" ]] || fail "stopped at step $stopped, resumed at step $resumed"
ok "re-admitted after q-urgent, q-second resumed at step $resumed, the step it stopped at: 0 steps lost"

echo "== an administrator's deactivation of a Workload stands"
wl=$(workload_of q-second)
kubectl patch workload -n "$ns" "$wl" --type=merge \
  -p '{"metadata":{"labels":{"team.example.com/owner":"admin"}},"spec":{"active":false}}' >/dev/null
eventually 30 condition_reason_is q-second Admitted Deactivated ||
  fail "q-second not Deactivated: $(jp ftj q-second '{.status}')"
eventually 60 workers_are q-second 0 || fail "q-second's worker not stopped after the deactivation"
eventually 10 has_event q-second Deactivated || fail "no Deactivated event"
sleep 3
[[ "$(kubectl get workload -n "$ns" "$wl" -o jsonpath='{.spec.active}')" == false ]] ||
  fail "the operator reactivated the Workload the administrator deactivated"
[[ "$(kubectl get workload -n "$ns" "$wl" -o jsonpath='{.metadata.labels.team\.example\.com/owner}')" == admin ]] ||
  fail "the administrator's label is gone"
phase_is q-second Queued || fail "q-second is $(jp ftj q-second '{.status.phase}'), not Queued"
ok "Kueue evicted the deactivated Workload ($(workload_condition q-second Evicted reason)); the gang stopped, spec.active and the administrator's label stay: $(kubectl get ftj -n "$ns" q-second --no-headers | tr -s ' ')"
kubectl patch workload -n "$ns" "$wl" --type=merge -p '{"spec":{"active":true}}' >/dev/null
eventually 60 condition_reason_is q-second Admitted Admitted ||
  fail "q-second not admitted again after the reactivation: $(jp ftj q-second '{.status}')"
eventually 30 bound_are q-second 1 || fail "q-second's pod not bound after the reactivation"
ok "reactivated by the administrator, q-second is admitted again and its gang placed"
kubectl delete ftj -n "$ns" q-first q-second q-urgent --wait=true --timeout=60s >/dev/null
[[ -z "$(kubectl get workloads -n "$ns" -o name)" ]] || fail "Workloads left: $(kubectl get workloads -n "$ns" -o name)"
ok "deleting the jobs deleted their Workloads"

echo "== kill -9 of the operator during a preemption, ${CHAOS_PREEMPT_KILLS:=10} times"
# Each time a low-priority gang holds the whole quota and runs; a high-priority job arrives and
# Kueue evicts the low one; the operator is killed as Kueue evicts, as the operator stops the
# evicted gang, or as Kueue admits the new one. Converged: the high job runs its gang, the low
# one is Queued with no pod, evicted once (evictions 1: the eviction neither lost nor counted
# twice), neither counted as restarted, one Workload each.
# soon COMMAND...: eventually, polling every 50 ms, for 30 s.
soon() { EVENTUALLY_POLL=0.05 eventually 30 "$@"; }
jp_is() { [[ "$(jp "$1" "$2" "$3")" == "$4" ]]; }
workload_condition_is() { [[ "$(workload_condition "$1" "$2" status)" == "$3" ]]; }
one_workload() { [[ "$(kubectl get workloads -n "$ns" -l "kubetune.io/job-name=$1" -o name | wc -l)" -eq 1 ]]; }
preempted_once() {  # preempted_once LOW HIGH
  bound_are "$2" 2 && phase_is "$2" Running && workers_are "$1" 0 && phase_is "$1" Queued &&
    [[ "$(jp ftj "$1" '{.status.queue.evictions}')" == 1 && "$(jp ftj "$1" '{.status.restarts}')" == 0 ]] &&
    [[ "$(jp ftj "$2" '{.status.queue.evictions}')" == "" && "$(jp ftj "$2" '{.status.restarts}')" == 0 ]] &&
    one_workload "$1" && one_workload "$2"
}
before=0 during=0 after=0
for k in $(seq 1 "$CHAOS_PREEMPT_KILLS"); do
  low=chaos-low-$k high=chaos-high-$k
  queued "$low" e2e-low 2
  eventually 30 phase_is "$low" Running || fail "kill $k: $low not running: $(jp ftj "$low" '{.status}')"
  queued "$high" e2e-high 2
  # Kills aimed in turn at three moments (the whole preemption takes about a second here): Kueue
  # has evicted the low Workload, the operator has stored the eviction, Kueue has admitted the
  # high one.
  case $((k % 3)) in
    1) soon workload_condition_is "$low" Evicted True || fail "kill $k: Kueue did not evict $low" ;;
    2) soon jp_is ftj "$low" '{.status.queue.evictions}' 1 || fail "kill $k: no eviction of $low stored" ;;
    0) soon workload_condition_is "$high" QuotaReserved True || fail "kill $k: $high not admitted" ;;
  esac
  # Where the kill fell: before the eviction was stored, while the gang stopped, or after.
  if [[ "$(jp ftj "$low" '{.status.queue.evictions}')" != 1 ]]; then before=$((before + 1))
  elif [[ "$(worker_count "$low")" -gt 0 ]]; then during=$((during + 1)); else after=$((after + 1)); fi
  kill_and_restart_operator
  at_most_one_pod_per_rank "$low" && at_most_one_pod_per_rank "$high" || fail "kill $k: two pods of one rank"
  eventually 60 preempted_once "$low" "$high" ||
    fail "kill $k: no convergence: $low $(jp ftj "$low" '{.status}') $high $(jp ftj "$high" '{.status}')"
  kubectl delete ftj -n "$ns" "$low" "$high" --wait=true --timeout=60s >/dev/null
  eventually 30 workers_are "$low" 0 && eventually 30 workers_are "$high" 0 || fail "kill $k: pods left after the delete"
done
ok "$CHAOS_PREEMPT_KILLS kills during a preemption ($before before the eviction was stored, $during while the gang stopped, $after after the gang was gone): each time the high job ran its gang, the low one was Queued with no pod, evicted once, no restart counted, one Workload each"

echo "PASS: $passed checks"
