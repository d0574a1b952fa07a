#!/usr/bin/env bash
# End-to-end test of kubetune against a real cluster ($KUBECONFIG; a kube-apiserver with etcd and
# kube-controller-manager's garbage collector is enough: without a kubelet, this script plays it by
# writing pod status through pods/status). It follows the README:
#   - installs the CRD and the RBAC "without Helm", and the chart through Helm's own library
#     (chart_e2e.py, when helm-python-sdk is installed), with and without the Prometheus
#     Operator's CRDs;
#   - the API server accepts the examples and rejects each broken one with its "# server:" message;
#   - runs kubetune-operator as its ServiceAccount (least-privilege RBAC), two replicas with leader
#     election, and drives a job through creation, a killed worker (gang restart), an edit refused
#     while running, suspend + edit + resume, success, a pod the server refuses, an orphaned pod
#     of the same name, deletion with zero leftovers, and SIGTERM with the Lease released;
#   - the preflight pod: with the real trainer's reports (kubetune-trainer next to the operator), a
#     bad line 9731 and a job too big for the GPU memory of its nodes' labels fail the job, named in
#     `kubectl describe`, without a worker pod ever created.
#   - hf:// and s3:// sources against olah and moto on 127.0.0.1 (when installed): the real
#     kubetune-fetch runs each pod's fetch container with that container's own arguments; its
#     progress shows in status, the revisions it resolved pin the workers, a second job and a
#     restarted gang read the cache, and a model that cannot be fetched fails the job.
# Exits 77 (ctest: skipped) when no cluster is reachable.
#
# usage: operator_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT] [NAMESPACE]
set -euo pipefail

operator_bin=${1:?usage: operator_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT] [NAMESPACE]}
root=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
ns=${3:-kubetune-e2e-$$}
opns=kubetune-system  # the README's namespace for the operator
python=${KUBETUNE_PYTHON:-python3}

if [[ -z "${KUBECONFIG:-}" ]] || ! command -v kubectl >/dev/null ||
  ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIPPED: no cluster reachable (set KUBECONFIG)"
  exit 77
fi

work=$(mktemp -d)
op_pids=()
cleanup() {
  for p in "${op_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -n "${SOURCES_PID:-}" ]] && kill "$SOURCES_PID" 2>/dev/null  # olah and moto, if still up
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  # The objects of the install without Helm (its namespace stays: deleting it takes a while, and
  # the next run's helm install would meet it terminating).
  kubectl delete -f "$root/charts/kubetune/rbac/operator-rbac.yaml" --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete lease -n "$opns" kubetune-operator --ignore-not-found >/dev/null 2>&1 || true
  kubectl delete node e2e-gpu-node --ignore-not-found >/dev/null 2>&1 || true
  echo "operator logs: $work"
}
trap cleanup EXIT

# shellcheck source=e2e_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
# Worker pods (the preflight pod, which stays after it ended, is not one).
pod_count() { kubectl get pods -n "$ns" -l "kubetune.io/job-name=$1,kubetune.io/role!=preflight" -o name | wc -l; }
pods_are() { [[ "$(pod_count "$1")" -eq "$2" ]]; }
created_reason_is() {  # created_reason_is JOB REASON: the reason of the job's Created condition
  [[ "$(jp ftj "$1" '{.status.conditions[?(@.type=="Created")].reason}')" == "$2" ]]
}
restarts_are() { [[ "$(jp ftj "$1" '{.status.restarts}')" == "$2" ]]; }
gang_has() {  # gang_has JOB ATTEMPT N: N pods of that attempt
  [[ "$(kubectl get pods -n "$ns" -l "kubetune.io/job-name=$1,kubetune.io/attempt=$2" -o name | wc -l)" -eq "$3" ]]
}
owner_uid_is() { [[ "$(jp pod "$1" '{.metadata.ownerReferences[0].uid}')" == "$2" ]]; }
leftovers() {
  kubectl get pods,configmaps,services -n "$ns" -l app.kubernetes.io/managed-by=kubetune-operator -o name
}
no_leftovers() { [[ -z "$(leftovers)" ]]; }
# The kubelet's part: a pod's phase (and the trainer's exit code when it ended).
set_pod() {
  local pod=$1 phase=$2 code=${3:-}
  local status="{\"phase\":\"$phase\",\"podIP\":\"\"}"
  if [[ -n "$code" ]]; then
    status="{\"phase\":\"$phase\",\"containerStatuses\":[{\"name\":\"trainer\",\"ready\":false,\"restartCount\":0,\"image\":\"x\",\"imageID\":\"\",\"state\":{\"terminated\":{\"exitCode\":$code,\"reason\":\"Error\"}}}]}"
  fi
  kubectl patch pod -n "$ns" "$pod" --subresource=status --type=merge -p "{\"status\":$status}" >/dev/null
}
# The preflight pod's end: the trainer's exit code and its report (the termination message).
end_preflight() {  # end_preflight JOB CODE REPORT_FILE
  local patch
  patch=$("$python" -c '
import json, sys
code = int(sys.argv[1])
print(json.dumps({"status": {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
    {"name": "trainer", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
     "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                              "message": open(sys.argv[2]).read()}}}]}}))' "$2" "$3")
  kubectl patch pod -n "$ns" "$1-preflight" --subresource=status --type=merge -p "$patch" >/dev/null
}
preflight_pod_exists() { kubectl get pod -n "$ns" "$1-preflight" -o name; }
preflight_pending() { [[ "$(jp pod "$1-preflight" '{.status.phase}')" == Pending ]]; }
set_gang() {  # set_gang JOB N PHASE [CODE]
  for ((i = 0; i < $2; i++)); do set_pod "$1-worker-$i" "$3" "${4:-}"; done
}

echo "== the Helm chart, through Helm's library (the README's helm install)"
if "$python" -c "import helm_python" 2>/dev/null; then
  "$python" "$root/tests/e2e/chart_e2e.py" "$root" || fail "chart"
  ok "chart installed and uninstalled with and without the Prometheus Operator's CRDs"
else
  echo "  SKIPPED: helm-python-sdk is not installed for $python"
fi

echo "== the README's install without Helm: CRD, namespace, RBAC"
kubectl apply -f "$root/charts/kubetune/crds/" -f "$root/charts/kubetune/rbac/"
kubectl wait --for condition=established --timeout=60s crd/finetunejobs.kubetune.io >/dev/null
ok "CRD established (the API server accepted its CEL rules' cost)"
kubectl create namespace "$ns" >/dev/null

echo "== the API server validates the examples (schema, defaults, CEL)"
for f in "$root"/examples/jobs/*.yaml; do
  kubectl create -n "$ns" --dry-run=server -f "$f" -o name >/dev/null || fail "$f rejected"
done
ok "every example is accepted"
for f in "$root"/examples/jobs/invalid/*.yaml; do
  want=$(sed -n 's/^# server: //p' "$f")
  [[ -n "$want" ]] || fail "$f has no '# server:' line"
  if out=$(kubectl create -n "$ns" --dry-run=server --validate=strict -f "$f" 2>&1); then
    fail "$f accepted"
  fi
  [[ "$out" == *"$want"* ]] || fail "$f: the server said: $out; expected: $want"
done
ok "every broken example is rejected by the server with its message"

echo "== the operator, as its ServiceAccount, two replicas"
kubectl config view --minify --raw >"$work/operator.kubeconfig"
token=$(kubectl create token kubetune-operator -n "$opns" --duration=2h)
KUBECONFIG="$work/operator.kubeconfig" kubectl config set-credentials kubetune-operator \
  --token="$token" >/dev/null
KUBECONFIG="$work/operator.kubeconfig" kubectl config set-context --current \
  --user=kubetune-operator >/dev/null
start_operator() {  # start_operator NAME
  POD_NAMESPACE=$opns "$operator_bin" --kubeconfig "$work/operator.kubeconfig" --workers 2 \
    --progress-seconds 2 --http-port 0 >"$work/$1.log" 2>&1 &
  op_pids+=($!)
}
lease_holder() { kubectl get lease -n "$opns" kubetune-operator -o 'jsonpath={.spec.holderIdentity}'; }
lease_held() { [[ -n "$(lease_holder)" ]]; }
lease_not_held_by() { [[ "$(lease_holder)" != "$1" ]]; }
start_operator op-a
eventually 30 lease_held || fail "no leader (log: $work/op-a.log)"
leader_a=$(lease_holder)
start_operator op-b
ok "op-a leads ($leader_a); op-b stands by"
first=$(head -1 "$work/op-a.log")
[[ "$first" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z\ info\ +operator:\ .*\ http\ 127\.0\.0\.1: ]] ||
  fail "operator log line without timestamp/level, or not on 127.0.0.1 by default: $first"
ok "log lines have a timestamp and a level; the endpoint listens on 127.0.0.1 unless told"

# The trainer's own preflight reports, on a tiny model and the shipped data: the pods of this
# script have no kubelet, so the reports are made here and written into the pods' status.
trainer="$(dirname "$operator_bin")/kubetune-trainer"
if [[ -x "$trainer" ]]; then
  "$trainer" init-model --config "$root/examples/default/model_config.json" \
    --tokenizer "$root/examples/default/tokenizer" --out "$work/model" >/dev/null 2>&1
  "$python" - "$root/examples/default/train.jsonl" "$work" <<'PY'
import json, sys
good = open(sys.argv[1]).read().splitlines()
lines = [good[i % len(good)] for i in range(10000)]
open(sys.argv[2] + "/good.jsonl", "w").write("\n".join(lines) + "\n")
lines[9730] = '{"messages": "not a list"}'
open(sys.argv[2] + "/bad.jsonl", "w").write("\n".join(lines) + "\n")
for name in ("good", "bad"):
    config = {"model": {"path": sys.argv[2] + "/model"}, "method": {"type": "lora"},
              "data": {"train": sys.argv[2] + "/" + name + ".jsonl", "format": "messages"},
              "output": {"dir": sys.argv[2] + "/out"}}
    json.dump(config, open(sys.argv[2] + "/" + name + ".json", "w"))
PY
  preflight_report() {  # preflight_report CONFIG OUT [ARGS...]: the trainer's termination message
    local config=$1 out=$2
    shift 2
    "$trainer" preflight --config "$config" --termination-log "$out" "$@" >/dev/null 2>&1 || true
  }
  preflight_report "$work/good.json" "$work/ok.report" --world-size 2
  preflight_report "$work/bad.json" "$work/bad.report" --world-size 2
else
  echo "  (no kubetune-trainer next to the operator: the preflight reports are written by hand)"
  echo '{"verdict":"OK","message":""}' >"$work/ok.report"
  trainer=""
fi

echo "== a job runs, loses a worker, restarts as a gang"
job=e2e-lora
example "$root/examples/jobs/lora-single-gpu.yaml" $job \
  '{"spec":{"workers":{"replicas":2,"gpusPerWorker":0},"metrics":{"port":0}}}' |
  kubectl apply -n "$ns" -f - >/dev/null
eventually 30 preflight_pod_exists $job || fail "no preflight pod: $(jp ftj $job '{.status}')"
pods_are $job 0 || fail "a worker pod before the preflight ended"
end_preflight $job 0 "$work/ok.report"
eventually 30 pods_are $job 2 || fail "no worker pods after the preflight"
[[ "$(jp ftj $job '{.status.preflight.verdict}')" == OK ]] || fail "status.preflight: $(jp ftj $job '{.status.preflight}')"
ok "the preflight pod ran first; with its OK report in status.preflight, the workers were created"
uid=$(jp ftj $job '{.metadata.uid}')
for obj in "configmap/$job-config" "service/$job" "pod/$job-worker-0" "pod/$job-worker-1"; do
  [[ "$(kubectl get -n "$ns" "$obj" -o 'jsonpath={.metadata.ownerReferences[0].uid}')" == "$uid" ]] ||
    fail "$obj is not owned by the job"
done
ok "ConfigMap, headless Service and 2 pods, each owned by the job's UID"
set_gang $job 2 Running
eventually 30 phase_is $job Running || fail "not Running: $(jp ftj $job '{.status}')"
ok "Running"
if out=$(kubectl patch ftj -n "$ns" $job --type=merge -p '{"spec":{"training":{"learningRate":0.001}}}' 2>&1); then
  fail "a running job's learningRate was changed"
fi
[[ "$out" == *"only spec.runPolicy can change while a job runs"* ]] || fail "edit refused with: $out"
ok "editing a running job's spec is refused by the server: ${out:0:90}..."
set_pod $job-worker-1 Failed 137
eventually 30 restarts_are $job 1 || fail "no gang restart: $(jp ftj $job '{.status}')"
eventually 30 gang_has $job 1 2 || fail "no new gang"
ok "worker 1 exited 137: the whole gang was restarted (attempt 1)"

echo "== suspend, edit, resume: the new gang runs the new spec"
kubectl patch ftj -n "$ns" $job --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
eventually 30 phase_is $job Suspended || fail "not Suspended"
eventually 30 pods_are $job 0 || fail "pods left while suspended"
kubectl patch ftj -n "$ns" $job --type=merge -p \
  '{"spec":{"workers":{"replicas":3},"training":{"learningRate":0.0005},"runPolicy":{"suspend":false}}}' >/dev/null
# A new spec is checked again (3 workers now) before its gang starts.
eventually 30 preflight_pending $job || fail "no preflight pod for the edited spec"
end_preflight $job 0 "$work/ok.report"
eventually 30 pods_are $job 3 || fail "no 3-pod gang after resume"
for i in 0 1 2; do
  nnodes=$(kubectl get pod -n "$ns" $job-worker-$i -o 'jsonpath={.spec.containers[0].env[?(@.name=="NNODES")].value}')
  [[ "$nnodes" == 3 ]] || fail "worker $i has NNODES=$nnodes"
done
grep -q '"learningRate": 0.0005' <(jp configmap $job-config '{.data.config\.json}') ||
  fail "the ConfigMap still has the old learningRate"
ok "3 pods with NNODES=3; the ConfigMap has learningRate 0.0005"
set_gang $job 3 Running
eventually 30 phase_is $job Running || fail "not Running after resume"
set_gang $job 3 Succeeded 0
eventually 30 phase_is $job Succeeded || fail "not Succeeded: $(jp ftj $job '{.status}')"
ok "Succeeded"

echo "== a pod the server refuses is shown in status and events"
bad=e2e-bad-priority
example "$root/examples/jobs/lora-single-gpu.yaml" $bad \
  '{"spec":{"workers":{"gpusPerWorker":0,"priorityClassName":"no-such-class"},"metrics":{"port":0},"runPolicy":{"preflight":false}}}' |
  kubectl apply -n "$ns" -f - >/dev/null
eventually 30 created_reason_is $bad FailedCreate ||
  fail "no FailedCreate condition: $(jp ftj $bad '{.status}')"
msg=$(kubectl get ftj -n "$ns" $bad -o 'jsonpath={.status.conditions[?(@.type=="Created")].message}')
[[ "$msg" == *"no PriorityClass with name no-such-class"* ]] || fail "condition message: $msg"
eventually 10 has_event $bad FailedCreate || fail "no FailedCreate event"
ok "Created=False FailedCreate: ${msg:0:100}..."

echo "== children are found by owner UID: an orphaned pod of the same name is not adopted"
orph=e2e-orphan
example "$root/examples/jobs/lora-single-gpu.yaml" $orph \
  '{"spec":{"workers":{"gpusPerWorker":0},"metrics":{"port":0},"runPolicy":{"preflight":false}}}' >"$work/orphan.yaml"
kubectl apply -n "$ns" -f "$work/orphan.yaml" >/dev/null
eventually 30 pods_are $orph 1 || fail "no pod"
kubectl delete ftj -n "$ns" $orph --cascade=orphan >/dev/null
kubectl apply -n "$ns" -f "$work/orphan.yaml" >/dev/null
eventually 30 created_reason_is $orph NameConflict ||
  fail "no NameConflict: $(jp ftj $orph '{.status}')"
[[ "$(jp ftj $orph '{.status.phase}')" != Succeeded ]] || fail "Succeeded without a pod of its own"
ok "the new job reports NameConflict instead of taking the old pod"
kubectl delete pod -n "$ns" $orph-worker-0 --wait=true >/dev/null
new_uid=$(jp ftj $orph '{.metadata.uid}')
eventually 60 owner_uid_is $orph-worker-0 "$new_uid" ||
  fail "the job did not create its own pod after the orphan went"
ok "once the orphan is deleted, the job creates its own pod"

echo "== the preflight stops a bad line and a job too big before any GPU pod"
# fails_in_preflight JOB REPORT REASON TEXT: the trainer's report (exit 2) fails the job with
# REASON, `kubectl describe` shows TEXT, and no worker pod was ever created.
fails_in_preflight() {
  end_preflight "$1" 2 "$2"
  eventually 30 phase_is "$1" Failed || fail "not Failed: $(jp ftj "$1" '{.status}')"
  local described
  described=$(kubectl describe ftj -n "$ns" "$1")
  [[ "$described" == *"$3"* && "$described" == *"$4"* ]] ||
    fail "kubectl describe shows no $3 / $4: $described"
  pods_are "$1" 0 || fail "a worker pod was created"
}
if [[ -n "$trainer" ]]; then
  badline=e2e-badline
  example "$root/examples/jobs/lora-single-gpu.yaml" $badline '{"spec":{"workers":{"replicas":2}}}' |
    kubectl apply -n "$ns" -f - >/dev/null
  eventually 30 preflight_pod_exists $badline || fail "no preflight pod"
  [[ -z "$(jp pod $badline-preflight '{.spec.containers[0].resources.limits.nvidia\.com/gpu}')" ]] ||
    fail "the preflight pod asks for a GPU"
  fails_in_preflight $badline "$work/bad.report" DatasetInvalid "bad.jsonl:9731: "
  ok "bad line 9731: Failed (DatasetInvalid), the line named in kubectl describe, no worker pod"

  # GPU feature discovery's label on a node (1 MiB: nothing fits), read by the operator through its
  # RBAC; the trainer gets it as --gpu-memory-gib.
  kubectl apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: e2e-gpu-node
  labels: {kubetune.io/e2e-pool: tiny, nvidia.com/gpu.memory: "1"}
YAML
  big=e2e-toobig
  example "$root/examples/jobs/lora-single-gpu.yaml" $big \
    '{"spec":{"workers":{"nodeSelector":{"kubetune.io/e2e-pool":"tiny"}}}}' |
    kubectl apply -n "$ns" -f - >/dev/null
  eventually 30 preflight_pod_exists $big || fail "no preflight pod"
  gib=$(jp pod $big-preflight '{.spec.containers[0].command}' |
    "$python" -c 'import json,sys; c=json.load(sys.stdin); print(c[c.index("--gpu-memory-gib")+1])') ||
    fail "no --gpu-memory-gib from the node label: $(jp pod $big-preflight '{.spec.containers[0].command}')"
  preflight_report "$work/good.json" "$work/big.report" --world-size 1 --gpu-memory-gib "$gib"
  fails_in_preflight $big "$work/big.report" DoesNotFit "more than the GPU's 0.0 GiB"
  ok "a node labelled nvidia.com/gpu.memory=1 gave --gpu-memory-gib $gib: Failed (DoesNotFit), no worker pod"
else
  echo "  SKIPPED: no kubetune-trainer next to the operator"
  badline="" big=""
fi

echo "== hf:// and s3:// sources: fetched before any GPU pod, progress in status, pinned, cached"
if "$python" -c "import olah, moto, boto3, huggingface_hub" 2>/dev/null; then
  coproc SOURCES { KUBETUNE_SOURCE_DIR="$root" "$python" "$root/tests/e2e/source_servers.py" 2>"$work/source-servers.log"; }
  read -r endpoints <&"${SOURCES[0]}" || fail "olah and moto did not start: $(tail -5 "$work/source-servers.log")"
  hf_url=$("$python" -c 'import json,sys; print(json.loads(sys.argv[1])["hf"])' "$endpoints")
  s3_url=$("$python" -c 'import json,sys; print(json.loads(sys.argv[1])["s3"])' "$endpoints")
  # The kubelet's part for a fetch container: its own arguments, run here, with its volumes as
  # folders of $work (one cache for the whole "cluster", as a ReadWriteMany claim would be).
  run_fetch() {  # run_fetch POD [ENV=VALUE...]: exit code of the pod's fetch container, run here
    local pod=$1
    shift
    mapfile -t args < <(kubectl get pod -n "$ns" "$pod" -o json | "$python" -c '
import json, sys
for a in json.load(sys.stdin)["spec"]["initContainers"][0]["args"]:
    print(a)')
    args=("${args[@]//\/kubetune\/cache/$work/source-cache}")
    args=("${args[@]//\/kubetune\/sources/$work/links-$pod}")
    args=("${args[@]//\/dev\/termination-log/$work/$pod.results}")
    env PYTHONPATH="$root/fetch" HF_ENDPOINT="$hf_url" AWS_ENDPOINT_URL="$s3_url" \
      AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \
      KUBETUNE_FETCH_FIRST_RETRY_SECONDS=0.05 "$@" \
      "$python" -m kubetune_fetch "${args[@]}" >/dev/null 2>"$work/$pod.fetch.log"
  }
  # fetch_state POD running | CODE | no-secret:NAME: the fetch container's state in the pod's status
  # (no-secret: waiting, as the kubelet reports a missing Secret it takes its environment from).
  fetch_state() {
    "$python" - "$@" "$work/$1.results" "$work/$1.fetch.log" <<'PY' >"$work/fetch-status.json"
import json, os, sys
pod, state, results, log = sys.argv[1:5]
if state == "running":
    status = {"phase": "Pending", "podIP": "127.0.0.1", "initContainerStatuses": [
        {"name": "fetch", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"running": {"startedAt": "2026-11-26T00:00:00Z"}}}]}
elif state.startswith("no-secret:"):
    status = {"phase": "Pending", "initContainerStatuses": [
        {"name": "fetch", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"waiting": {"reason": "CreateContainerConfigError",
                               "message": f'secret "{state.split(":", 1)[1]}" not found'}}}]}
else:
    code = int(state)
    message = open(results).read()  # kubetune-fetch --results: the report, or the error alone
    status = {"podIP": "127.0.0.1", "initContainerStatuses": [
        {"name": "fetch", "ready": code == 0, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"terminated": {"exitCode": code, "message": message,
                                  "reason": "Completed" if code == 0 else "Error"}}}]}
    if code != 0:
        status["phase"] = "Failed"
print(json.dumps({"status": status}))
PY
    kubectl patch pod -n "$ns" "$1" --subresource=status --type=merge -p "$(cat "$work/fetch-status.json")" >/dev/null
  }
  # fails_unavailable JOB TEXT WHAT: JOB Failed (SourceUnavailable) with TEXT in its message ($msg),
  # and no worker pod was ever created for it (WHAT: why none should be).
  fails_unavailable() {
    eventually 30 phase_is "$1" Failed || fail "$1 did not fail: $(jp ftj "$1" '{.status}')"
    msg=$(jp ftj "$1" '{.status.conditions[?(@.type=="Failed")].message}')
    [[ "$(jp ftj "$1" '{.status.conditions[?(@.type=="Failed")].reason}')" == SourceUnavailable &&
      "$msg" == *"$2"* ]] || fail "Failed condition: $msg"
    pods_are "$1" 0 || fail "worker pods for a job whose $3"
  }
  sourced_job() {  # sourced_job NAME MODEL TRAIN [CREDENTIALS_SECRET]
    local secret=""
    [[ -n "${4:-}" ]] && secret=",\"credentialsSecret\":\"$4\""
    example "$root/examples/jobs/lora-single-gpu.yaml" "$1" \
      "{\"spec\":{\"model\":{\"path\":\"$2\"},\"data\":{\"train\":\"$3\"},\"workers\":{\"replicas\":2,\"gpusPerWorker\":0},\"metrics\":{\"port\":0},\"sources\":{\"hfEndpoint\":\"$hf_url\",\"s3Endpoint\":\"$s3_url\",\"cacheClaim\":\"kubetune-cache\"$secret}}}" |
      kubectl apply -n "$ns" -f - >/dev/null
  }
  sjob=e2e-sourced
  sourced_job $sjob hf://kubetune/tiny-llama s3://kubetune-data/chat/big/train.jsonl
  eventually 30 preflight_pod_exists $sjob || fail "no preflight pod: $(jp ftj $sjob '{.status}')"
  [[ "$(jp pod $sjob-preflight '{.spec.initContainers[0].name}')" == fetch ]] || fail "no fetch container"
  [[ "$(jp configmap $sjob-config '{.data.config\.json}')" == *'"path": "/kubetune/sources/model"'* ]] ||
    fail "the trainer's config does not read the fetched model"
  fetch_state $sjob-preflight running
  run_fetch $sjob-preflight KUBETUNE_FETCH_TEST_BYTES_PER_SECOND=$((8 << 20)) &
  fetch_pid=$!
  fetching() {
    local b t
    b=$(jp ftj $sjob '{.status.preflight.fetch.bytes}')
    t=$(jp ftj $sjob '{.status.preflight.fetch.totalBytes}')
    [[ -n "$b" && -n "$t" && "$b" -gt 0 && "$b" -lt "$t" ]]
  }
  eventually 30 fetching || fail "no fetch progress in status: $(jp ftj $sjob '{.status.preflight}')"
  pods_are $sjob 0 || fail "a worker pod while the sources are fetched"
  ok "while the preflight pod fetches, status shows it: $(jp ftj $sjob '{.status.preflight.fetch.summary}'); no worker pod"
  wait $fetch_pid || fail "the fetch failed: $(tail -3 "$work/$sjob-preflight.fetch.log")"
  fetch_state $sjob-preflight 0
  end_preflight $sjob 0 "$work/ok.report"
  eventually 30 pods_are $sjob 2 || fail "no worker pods after the fetch and preflight"
  commit=$(jp ftj $sjob '{.status.sources[0].revision}')
  [[ ${#commit} -eq 40 ]] || fail "status.sources: $(jp ftj $sjob '{.status.sources}')"
  [[ "$(jp pod $sjob-worker-0 '{.spec.initContainers[0].args}')" == *"hf://kubetune/tiny-llama=$commit"* ]] ||
    fail "the workers are not pinned to $commit: $(jp pod $sjob-worker-0 '{.spec.initContainers[0].args}')"
  has_event $sjob SourcesFetched || fail "no SourcesFetched event"
  ok "status.sources holds the revisions (hf://kubetune/tiny-llama at ${commit:0:12}); every worker's fetch is pinned to them"
  run_fetch $sjob-worker-0 HF_ENDPOINT=http://127.0.0.1:9 || fail "a pinned worker fetch failed: $(tail -3 "$work/$sjob-worker-0.fetch.log")"
  grep -q '"cached": true' "$work/$sjob-worker-0.results" || fail "worker 0 downloaded again"
  grep -q "nothing to download" "$work/$sjob-worker-0.fetch.log" || fail "no cache hit logged"
  set_pod $sjob-worker-1 Failed 137
  eventually 30 gang_has $sjob 1 2 || fail "no new gang after worker 1 died"
  run_fetch $sjob-worker-0 HF_ENDPOINT=http://127.0.0.1:9 || fail "the new gang's fetch failed"
  grep -q '"cached": true' "$work/$sjob-worker-0.results" || fail "the new gang downloaded again"
  ok "a worker's fetch, and the restarted gang's, read the cache with the Hub unreachable"
  sjob2=e2e-sourced-again
  sourced_job $sjob2 hf://kubetune/tiny-llama s3://kubetune-data/chat/big/train.jsonl
  eventually 30 preflight_pod_exists $sjob2 || fail "no preflight pod for $sjob2"
  run_fetch $sjob2-preflight || fail "the second job's fetch failed"
  fetch_state $sjob2-preflight 0
  end_preflight $sjob2 0 "$work/ok.report"
  eventually 30 pods_are $sjob2 2 || fail "no worker pods for $sjob2"
  [[ "$(jp ftj $sjob2 '{.status.sources[*].cached}')" == "true true" ]] ||
    fail "the second job downloaded again: $(jp ftj $sjob2 '{.status.sources}')"
  ok "a second job on the same sources downloaded nothing (status.sources cached: true)"
  sjob3=e2e-no-such-model
  sourced_job $sjob3 hf://kubetune/no-such-model s3://kubetune-data/chat/v1/train.jsonl
  eventually 30 preflight_pod_exists $sjob3 || fail "no preflight pod for $sjob3"
  code=0
  run_fetch $sjob3-preflight || code=$?
  [[ $code -eq 2 ]] || fail "a missing repository should exit 2, got $code"
  fetch_state $sjob3-preflight 2
  fails_unavailable $sjob3 kubetune/no-such-model "model cannot be fetched"
  ok "a model that cannot be fetched fails the job (SourceUnavailable) before any worker: ${msg:0:110}..."
  # A credentialsSecret that does not exist: the kubelet cannot start the fetch container and
  # reports CreateContainerConfigError with its message (played here, as every pod state is); the
  # job fails at once naming the Secret, and no worker is created.
  sjob4=e2e-no-such-secret
  sourced_job $sjob4 hf://kubetune/tiny-llama s3://kubetune-data/chat/v1/train.jsonl no-such-secret
  eventually 30 preflight_pod_exists $sjob4 || fail "no preflight pod for $sjob4"
  [[ "$(jp pod $sjob4-preflight '{.spec.initContainers[0].envFrom[0].secretRef.name}')" == no-such-secret ]] ||
    fail "the fetch container does not take the Secret"
  ! kubectl get secret -n "$ns" no-such-secret >/dev/null 2>&1 || fail "the Secret exists"
  fetch_state $sjob4-preflight no-secret:no-such-secret
  fails_unavailable $sjob4 'secret "no-such-secret" not found' "Secret is missing"
  ok "a missing credentialsSecret fails the job (SourceUnavailable) before any worker: ${msg:0:120}..."
  kubectl delete ftj -n "$ns" $sjob $sjob2 $sjob3 $sjob4 >/dev/null

  echo "== an s3:// output.dir: rank 0's publish container uploads it; status.outputs names it"
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$python" -c 'import boto3, sys
boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1").create_bucket(Bucket="kubetune-out")' "$s3_url"
  s3_job() {  # s3_job NAME OUTPUT_DIR [REPLICAS [CHECKPOINT_DIR]]
    local replicas=${3:-2} checkpoint=""
    [[ -n "${4:-}" ]] && checkpoint=",\"checkpoint\":{\"dir\":\"$4\"}"
    example "$root/examples/jobs/lora-single-gpu.yaml" "$1" \
      "{\"spec\":{\"output\":{\"dir\":\"$2\",\"saveMerged\":true}$checkpoint,\"workers\":{\"replicas\":$replicas,\"gpusPerWorker\":0},\"metrics\":{\"port\":0},\"sources\":{\"s3Endpoint\":\"$s3_url\"}}}" |
      kubectl apply -n "$ns" -f - >/dev/null
    eventually 30 preflight_pod_exists "$1" || fail "no preflight pod for $1"
    end_preflight "$1" 0 "$work/ok.report"
    eventually 30 pods_are "$1" "$replicas" || fail "no worker pods for $1: $(jp ftj "$1" '{.status}')"
  }
  # The kubelet's part for the publish container: its own arguments, run here, on a folder of
  # $work standing in for the trainer's output (with the mark the trainer writes last); then the
  # pod's end as the kubelet reports it, the publish container's termination message included.
  run_publish() {  # run_publish POD: the exit code of the pod's publish container, run here
    local pod=$1 out="$work/output-$1"
    mkdir -p "$out/merged" "$out/checkpoints"
    echo '{"r": 8}' >"$out/adapter_config.json"
    head -c 20000000 /dev/urandom >"$out/merged/model.safetensors"
    echo x >"$out/checkpoints/state"
    echo "{\"host\": \"$(hostname)\", \"step\": 5}" >"$out/kubetune-complete.json"
    mapfile -t args < <(jp pod "$pod" '{.spec.containers[1].args}' | "$python" -c '
import json, sys
for a in json.load(sys.stdin):
    print(a)')
    args=("${args[@]//\/kubetune\/output/$out}")
    args=("${args[@]//\/dev\/termination-log/$work/$pod.publish}")
    env PYTHONPATH="$root/fetch" AWS_ENDPOINT_URL="$s3_url" AWS_ACCESS_KEY_ID=test \
      AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 KUBETUNE_FETCH_FIRST_RETRY_SECONDS=0.05 \
      "$python" -m kubetune_fetch "${args[@]}" >/dev/null 2>"$work/$pod.publish.log"
  }
  publish_ended() {  # publish_ended POD CODE: trainer exited 0, publish CODE with its message
    "$python" - "$2" "$work/$1.publish" <<'PY' >"$work/publish-status.json"
import json, sys
code, message = int(sys.argv[1]), open(sys.argv[2]).read()
def ended(name, c, m=""):
    return {"name": name, "ready": False, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"terminated": {"exitCode": c, "message": m,
                                     "reason": "Completed" if c == 0 else "Error"}}}
print(json.dumps({"status": {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
    ended("trainer", 0), ended("publish", code, message)]}}))
PY
    kubectl patch pod -n "$ns" "$1" --subresource=status --type=merge -p "$(cat "$work/publish-status.json")" >/dev/null
  }
  ojob=e2e-to-s3
  s3_job $ojob s3://kubetune-out/e2e/v1
  [[ "$(jp pod $ojob-worker-0 '{.spec.containers[*].name}')" == "trainer publish" ]] ||
    fail "rank 0 has no publish container: $(jp pod $ojob-worker-0 '{.spec.containers[*].name}')"
  [[ "$(jp pod $ojob-worker-1 '{.spec.containers[*].name}')" == trainer ]] || fail "rank 1 publishes"
  [[ "$(jp configmap $ojob-config '{.data.config\.json}')" == *'"dir": "/kubetune/output"'* ]] ||
    fail "the trainer does not write the staging folder"
  run_publish $ojob-worker-0 || fail "the upload failed: $(tail -3 "$work/$ojob-worker-0.publish.log")"
  set_pod $ojob-worker-1 Succeeded 0
  publish_ended $ojob-worker-0 0
  eventually 30 phase_is $ojob Succeeded || fail "not Succeeded: $(jp ftj $ojob '{.status}')"
  [[ "$(jp ftj $ojob '{.status.outputs[*].uri}')" == "s3://kubetune-out/e2e/v1/ s3://kubetune-out/e2e/v1/merged/" ]] ||
    fail "status.outputs: $(jp ftj $ojob '{.status.outputs}')"
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$python" -c 'import boto3, json, sys
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
marker = json.loads(s3.get_object(Bucket="kubetune-out", Key="e2e/v1/kubetune-complete.json")["Body"].read())
assert sorted(marker["files"]) == ["adapter_config.json", "merged/model.safetensors"], marker' "$s3_url" ||
    fail "the prefix is not whole"
  ok "rank 0's publish container uploaded the output (checkpoints left out, kubetune-complete.json last); status.outputs: $(jp ftj $ojob '{.status.outputs[*].name}')"
  ojob2=e2e-to-no-bucket
  s3_job $ojob2 s3://no-such-bucket/e2e
  code=0
  run_publish $ojob2-worker-0 || code=$?
  [[ $code -eq 2 ]] || fail "an upload to a missing bucket should exit 2, got $code"
  publish_ended $ojob2-worker-0 2
  eventually 30 phase_is $ojob2 Failed || fail "$ojob2 did not fail: $(jp ftj $ojob2 '{.status}')"
  msg=$(jp ftj $ojob2 '{.status.conditions[?(@.type=="Failed")].message}')
  [[ "$(jp ftj $ojob2 '{.status.conditions[?(@.type=="Failed")].reason}')" == PublishFailed &&
    "$msg" == *no-such-bucket* ]] || fail "Failed condition: $msg"
  ok "an upload that cannot succeed fails the job (PublishFailed): ${msg:0:110}..."
  ojob3=e2e-s3-checkpoints
  s3_job $ojob3 s3://kubetune-out/e2e/v2 1 s3://kubetune-out/e2e/v2-checkpoints
  [[ "$(jp pod $ojob3-worker-0 '{.spec.initContainers[0].args}')" == *'"--restore-checkpoint","s3://kubetune-out/e2e/v2-checkpoints=/kubetune/checkpoints"'* ]] ||
    fail "the worker's fetch does not restore: $(jp pod $ojob3-worker-0 '{.spec.initContainers[0].args}')"
  [[ "$(jp pod $ojob3-worker-0 '{.spec.containers[1].args}')" == *'"--sync-checkpoints","/kubetune/checkpoints"'* ]] ||
    fail "the publish container does not sync: $(jp pod $ojob3-worker-0 '{.spec.containers[1].args}')"
  ok "s3:// checkpoints: the worker's fetch restores the newest, the publish container uploads each"
  kubectl delete ftj -n "$ns" $ojob $ojob2 $ojob3 >/dev/null
  eval "exec ${SOURCES[1]}>&-"  # olah and moto stop when their stdin closes
  wait "$SOURCES_PID" 2>/dev/null || true
else
  echo "  (olah, moto or boto3 not installed: skipped)"
fi

echo "== deletion leaves nothing behind (garbage collector)"
for j in $job $bad $orph $badline $big; do kubectl delete ftj -n "$ns" $j --wait=true --timeout=60s >/dev/null; done
eventually 60 no_leftovers || fail "left behind: $(leftovers)"
ok "no pod, ConfigMap or Service left"

echo "== SIGTERM: the leader exits 0 and releases the Lease; the standby takes over"
leader=$(lease_holder)
if [[ "$leader" == "$leader_a" ]]; then victim=0; else victim=1; fi
t0=$SECONDS
kill -TERM "${op_pids[$victim]}"
set +e
wait "${op_pids[$victim]}"
code=$?
set -e
[[ $code -eq 0 ]] || fail "the operator exited $code on SIGTERM: $(tail -5 "$work/op-$([[ $victim == 0 ]] && echo a || echo b).log")"
eventually 10 lease_not_held_by "$leader" || fail "the Lease still names $leader"
eventually 15 lease_held || fail "the standby did not take over"
ok "exit 0, Lease released; new leader $(lease_holder) after $((SECONDS - t0)) s"

echo "== the operator's command line and a Lease it may not touch"
if out=$("$operator_bin" --bogus 2>&1); then fail "--bogus accepted"; fi
[[ "$out" == *"--bogus"* ]] || fail "--bogus: $out"
ok "an unknown option is named: ${out%%$'\n'*}"
set +e
out=$(timeout 30 "$operator_bin" --kubeconfig "$work/operator.kubeconfig" --lease-namespace default \
  --http-port -1 2>&1)
code=$?
set -e
[[ $code -eq 1 && "$out" == *"--lease-namespace"* ]] ||
  fail "a forbidden Lease: exit $code: $out"
ok "a forbidden Lease ends the operator with a message naming --lease-namespace"

echo "PASS: $passed checks"
