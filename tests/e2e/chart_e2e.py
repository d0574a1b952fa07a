#!/usr/bin/env python3
"""The Helm chart on a real cluster ($KUBECONFIG), through Helm's own Go library (helm-python-sdk):
the README's `helm install` line (its --set values read from the README itself) on a cluster
without the Prometheus Operator's CRDs, then a second release beside it on a cluster that serves
them, then `helm uninstall` of both, leaving no object (the leader-election Lease included).

usage: chart_e2e.py REPO_ROOT"""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import helm_python as helm

ROOT = Path(sys.argv[1])
CHART = str(ROOT / "charts" / "kubetune")
MONITORING_CRDS = ROOT / "tests" / "e2e" / "prometheus-operator-crds.yaml"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def kubectl(*args, check=True):
    p = subprocess.run(["kubectl", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {p.stderr}")
    return p.stdout


def readme_install():
    """The README's `helm install` command: release, namespace and --set values."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^helm install (\S+) charts/kubetune -n (\S+) --create-namespace(.*?)(?:#.*)?$"
                  r"((?:\n  --set .*)*)", text, re.M)
    assert m, "README has no `helm install NAME charts/kubetune -n NS --create-namespace` line"
    sets = re.findall(r"--set (\S+)", m.group(3) + m.group(4))
    values = {}
    for s in sets:
        values = deep_merge(values, helm.parse_set_string(s))
    return m.group(1), m.group(2), values


def deep_merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def kinds(release):
    return {d.group(1) for d in re.finditer(r"^kind: (\w+)", release["manifest"], re.M)}


def install(name, namespace, values):
    with helm.Config(namespace=namespace, kubeconfig_path=os.environ["KUBECONFIG"]) as cfg:
        return cfg.install(CHART, name, values, namespace=namespace, create_namespace=True,
                           timeout=120)


def uninstall(name, namespace):
    with helm.Config(namespace=namespace, kubeconfig_path=os.environ["KUBECONFIG"]) as cfg:
        cfg.uninstall(name, timeout=120)


def leftovers(release, namespace):
    sel = f"app.kubernetes.io/instance={release}"
    return (kubectl("get", "deployments,services,serviceaccounts,roles,rolebindings,leases,"
                    "configmaps", "-n", namespace, "-l", sel, "-o", "name") +
            kubectl("get", "clusterroles,clusterrolebindings", "-o", "name",
                    "--field-selector", f"metadata.name={release}-operator")).split()


def wait(cond, what, seconds=60):
    deadline = time.time() + seconds
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.5)


def main():
    lint = helm.lint(CHART, strict=False)
    assert not lint["errors"], lint
    print("  lint:", [m["error"] for m in lint["messages"]])

    name, namespace, values = readme_install()
    print(f"  README: helm install {name} -n {namespace} with {json.dumps(values)}")
    assert values.get("monitoring", {}).get("podMonitor") is True, values

    # 1. No Prometheus Operator: the monitoring switches are skipped, and NOTES.txt says so.
    kubectl("delete", "-f", str(MONITORING_CRDS), "--ignore-not-found", "--wait=true")
    rel = install(name, namespace, values)
    assert rel["status"] == "deployed", rel["status"]
    assert not kinds(rel) & MONITORING_KINDS, kinds(rel)
    assert "Prometheus Operator's CRDs are not installed" in json.dumps(rel), "NOTES.txt"
    deployment = json.loads(kubectl("get", "deployment", "-n", namespace, f"{name}-operator",
                                    "-o", "json"))
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["app.kubernetes.io/component"] == "operator", pod_labels
    kubectl("get", "lease", "-n", namespace, f"{name}-operator")
    print(f"  installed {name} without the Prometheus Operator: {sorted(kinds(rel))}")

    # 2. With its CRDs, a second release beside the first: its monitors are created, its names
    #    are its own.
    kubectl("apply", "-f", str(MONITORING_CRDS))
    kubectl("wait", "--for", "condition=established", "--timeout=60s", "-f", str(MONITORING_CRDS))
    second, second_ns = "kubetune-mon", "kubetune-mon"
    mon_values = deep_merge(values, {"monitoring": {"prometheusRule": True}})
    rel2 = install(second, second_ns, mon_values)
    assert MONITORING_KINDS <= kinds(rel2), kinds(rel2)
    for kind in ("servicemonitors", "podmonitors", "prometheusrules"):
        assert kubectl("get", kind, "-n", second_ns, "-o", "name").strip(), kind
    print(f"  installed {second} beside it, with the Prometheus Operator: {sorted(kinds(rel2))}")

    # 3. Uninstall leaves nothing, the Lease included; the CRD stays (Helm never deletes crds/).
    for r, ns in ((name, namespace), (second, second_ns)):
        uninstall(r, ns)
        wait(lambda: not leftovers(r, ns), f"{r}: left behind: {leftovers(r, ns)}")
    kubectl("get", "crd", "finetunejobs.kubetune.io")
    kubectl("delete", "-f", str(MONITORING_CRDS), "--wait=true")
    kubectl("delete", "namespace", second_ns, "--wait=false")
    print("  uninstalled both: no object left, the FineTuneJob CRD kept")


if __name__ == "__main__":
    main()
