#!/usr/bin/env python3
"""The kubelet's part for the shared-cluster e2e, on a control plane whose Nodes have no kubelet.

Watches one namespace (polling with kubectl) and, for the pods the real kube-scheduler has bound:
  - reports them Running (phase and the trainer container's running state);
  - for a pod annotated kubetune.io/e2e-run-trainer=true, really runs `kubetune-trainer train` on
    this machine's CPU with the config from the job's ConfigMap, and reports its exit code when
    it ends (Succeeded for 0, else Failed with the code);
  - when a pod is deleted, does what a kubelet does in the grace period: SIGTERM to the trainer,
    wait for it (the trainer writes its checkpoint and exits 3), then removes the pod
    (--grace-period=0 --force, as a kubelet confirms a deletion).
Each trainer run's output goes to LOGDIR/<pod>.<n>.log, n counting the runs of that pod name.

usage: fake_kubelet.py NAMESPACE TRAINER LOGDIR
"""
import json
import os
import signal
import subprocess
import sys
import time

RUN_TRAINER = "kubetune.io/e2e-run-trainer"


def kubectl(*args, stdin=None):
    return subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)


def patch_status(ns, pod, status):
    kubectl("patch", "pod", "-n", ns, pod, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))


def container_status(state):
    return [{"name": "trainer", "ready": "running" in state, "restartCount": 0, "image": "x",
             "imageID": "", "state": state}]


def start_trainer(ns, pod, trainer, logdir, runs):
    job = pod["metadata"]["labels"]["kubetune.io/job-name"]
    config = kubectl("get", "configmap", "-n", ns, job + "-config", "-o",
                     "jsonpath={.data.config\\.json}").stdout
    name = pod["metadata"]["name"]
    runs[name] = runs.get(name, 0) + 1
    path = os.path.join(logdir, f"{name}.config.json")
    with open(path, "w") as f:
        f.write(config)
    log = open(os.path.join(logdir, f"{name}.{runs[name]}.log"), "w")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([trainer, "train", "--config", path], stdout=log,
                            stderr=subprocess.STDOUT, env=env)


def main():
    ns, trainer, logdir = sys.argv[1:4]
    procs = {}  # pod name -> (uid, Popen)
    runs = {}
    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping:
        out = kubectl("get", "pods", "-n", ns, "-o", "json")
        if out.returncode != 0:
            time.sleep(0.5)
            continue
        for pod in json.loads(out.stdout)["items"]:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
            name, uid = meta["name"], meta["uid"]
            if not spec.get("nodeName"):
                continue  # the scheduler's business
            proc = procs.get(name)
            if proc and proc[0] != uid:  # a pod of that name from an earlier gang
                proc = None
            if meta.get("deletionTimestamp"):
                if proc and proc[1].poll() is None:
                    proc[1].send_signal(signal.SIGTERM)
                    try:
                        proc[1].wait(timeout=spec.get("terminationGracePeriodSeconds", 30))
                    except subprocess.TimeoutExpired:
                        proc[1].kill()
                        proc[1].wait()
                procs.pop(name, None)
                kubectl("delete", "pod", "-n", ns, name, "--grace-period=0", "--force", "--wait=false")
                continue
            phase = status.get("phase", "Pending")
            if phase == "Pending":
                if meta.get("annotations", {}).get(RUN_TRAINER) == "true":
                    procs[name] = (uid, start_trainer(ns, pod, trainer, logdir, runs))
                patch_status(ns, name, {"phase": "Running", "podIP": "",
                                        "containerStatuses": container_status(
                                            {"running": {"startedAt": "2026-01-01T00:00:00Z"}})})
            elif phase == "Running" and proc and proc[1].poll() is not None:
                code = proc[1].returncode
                patch_status(ns, name, {"phase": "Succeeded" if code == 0 else "Failed",
                                        "containerStatuses": container_status(
                                            {"terminated": {"exitCode": code,
                                                            "reason": "Completed" if code == 0 else "Error"}})})
                procs.pop(name, None)
        time.sleep(0.3)
    for _, p in procs.values():
        p.kill()


if __name__ == "__main__":
    main()
