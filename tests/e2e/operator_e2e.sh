#!/usr/bin/env bash
# End-to-end check of the FineTuneJob operator against a real cluster from $KUBECONFIG:
# applies the CRD, renders the Helm chart (when helm is installed) for a server-side dry run, has
# the API server (CEL included) accept the examples and reject the broken ones, runs kubetune-operator locally against the cluster, creates an example job, waits for
# its pods and status, and checks that deleting the job removes its pods.
# Exits 77 (ctest: skipped) when no cluster is reachable.
#
# usage: operator_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT]
set -euo pipefail

operator_bin=${1:?usage: operator_e2e.sh PATH/TO/kubetune-operator [REPO_ROOT]}
root=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
ns=kubetune-e2e-$$
job=llama-lora-chat

if [[ -z "${KUBECONFIG:-}" ]] || ! command -v kubectl >/dev/null ||
   ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
  echo "SKIPPED: no cluster reachable (set KUBECONFIG)"
  exit 77
fi

op_pid=""
cleanup() {
  [[ -n "$op_pid" ]] && kill "$op_pid" 2>/dev/null || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== CRD"
kubectl apply -f "$root/charts/kubetune/crds/finetunejobs.yaml"
kubectl wait --for condition=established --timeout=60s crd/finetunejobs.kubetune.io
kubectl create namespace "$ns"

echo "== the Helm chart, rendered by helm and validated by the API server"
if command -v helm >/dev/null; then
  helm lint "$root/charts/kubetune"
  helm template kubetune "$root/charts/kubetune" --namespace "$ns" |
    kubectl apply -n "$ns" --dry-run=server -f - >/dev/null || fail "the chart's objects were rejected"
else
  echo "  helm not installed: chart not rendered"
fi

echo "== the API server validates the examples (schema, defaults, CEL)"
for f in "$root"/examples/jobs/*.yaml; do
  kubectl apply -n "$ns" --dry-run=server -f "$f" >/dev/null || fail "$f rejected"
done
for f in "$root"/examples/jobs/invalid/*.yaml; do
  if out=$(kubectl apply -n "$ns" --dry-run=server --validate=strict -f "$f" 2>&1); then
    fail "$f accepted"
  fi
  echo "  $(basename "$f"): rejected: ${out:0:160}"
done

echo "== operator"
"$operator_bin" --namespace "$ns" --leader-elect false --http-port 18080 \
  --lease-namespace "$ns" > "/tmp/$ns-operator.log" 2>&1 &
op_pid=$!

echo "== job"
kubectl apply -n "$ns" -f "$root/examples/jobs/lora-single-gpu.yaml"
for i in $(seq 60); do
  n=$(kubectl get pods -n "$ns" -l kubetune.io/job-name=$job -o name | wc -l)
  [[ "$n" -ge 1 ]] && break
  sleep 2
done
[[ "$n" -ge 1 ]] || fail "no worker pods (operator log: /tmp/$ns-operator.log)"
kubectl get configmap -n "$ns" "$job-config" >/dev/null || fail "no ConfigMap"
kubectl get service -n "$ns" "$job" >/dev/null || fail "no headless Service"
for i in $(seq 30); do
  phase=$(kubectl get ftj -n "$ns" "$job" -o jsonpath='{.status.phase}')
  [[ -n "$phase" ]] && break
  sleep 2
done
echo "  phase: $phase"
[[ "$phase" =~ ^(Created|Running|Pending|Failed|Restarting)$ ]] || fail "unexpected phase '$phase'"
kubectl get ftj -n "$ns"
kubectl get events -n "$ns" --field-selector involvedObject.name=$job

echo "== deletion cascades"
kubectl delete ftj -n "$ns" "$job" --wait=true --timeout=60s
for i in $(seq 30); do
  n=$(kubectl get pods -n "$ns" -l kubetune.io/job-name=$job -o name | wc -l)
  [[ "$n" -eq 0 ]] && break
  sleep 2
done
[[ "$n" -eq 0 ]] || fail "pods left after deleting the job"
echo "PASS"
