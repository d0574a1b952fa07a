#!/usr/bin/env python3
"""The Workload the operator makes for a queued FineTuneJob (`kubetune render` prints the same
object the reconciler creates) is one that Kueue's own CRD accepts: checked against the
v1beta2 schema of Kueue's Workload CRD (as the API server serves it with Kueue's CRDs installed,
pinned in operator/kube/openapi/ with the Kueue version it came from, the same document the
operator's Workload type is generated from) by jsonschema, with no field the API server would prune, and with every
CEL rule of that schema (x-kubernetes-validations, transition rules aside) evaluated by cel-python.
Neither checker was written here. Broken Workloads check that the checkers do refuse.
The real API server with Kueue's CRD and controller is tests/e2e/shared_cluster_e2e.sh.

usage: kueue_workload_test.py PATH/TO/kubetune"""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import celpy
import jsonschema
import yaml

ROOT = Path(os.environ["KUBETUNE_SOURCE_DIR"])
SERVED = json.loads(
    (ROOT / "operator/kube/openapi/apis__kueue.x-k8s.io__v1beta2_openapi.json").read_text())
SCHEMA = copy.deepcopy(SERVED["components"]["schemas"]["io.x-k8s.kueue.v1beta2.Workload"])
# The server publishes metadata as a reference to ObjectMeta; the CRD itself says "an object" (the
# API server validates metadata by its own rules), and so does this check.
SCHEMA["properties"]["metadata"] = {"type": "object"}
ENV = celpy.Environment()


def rendered_workload(cli, manifest):
    out = subprocess.run([cli, "render", str(manifest)], check=True, capture_output=True, text=True)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    workloads = [d for d in docs if d.get("kind") == "Workload"]
    assert len(workloads) == 1, f"{manifest}: {len(workloads)} Workloads rendered"
    wl = workloads[0]
    wl["metadata"]["uid"] = "0"
    if "priorityClassRef" in wl["spec"]:
        wl["spec"]["priority"] = 100  # the WorkloadPriorityClass's value, read in a cluster
    return wl


def pruned_fields(obj, schema, path="", out=None):
    """Fields the API server would drop (not in a structural schema that lists its properties)."""
    out = [] if out is None else out
    if schema.get("x-kubernetes-preserve-unknown-fields") or path == ".metadata":
        return out
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in obj.items():
            if props is not None and k in props:
                pruned_fields(v, props[k], f"{path}.{k}", out)
            elif isinstance(extra, dict):
                pruned_fields(v, extra, f"{path}.{k}", out)
            elif props is not None:
                out.append(f"{path}.{k}")
    elif isinstance(obj, list) and "items" in schema:
        for i, v in enumerate(obj):
            pruned_fields(v, schema["items"], f"{path}[{i}]", out)
    return out


def cel_violations(obj, schema, path="", out=None):
    """Messages of the schema's CEL rules that `obj` breaks (rules on oldSelf are for updates)."""
    out = [] if out is None else out
    for r in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in r["rule"]:
            continue
        program = ENV.program(ENV.compile(r["rule"]))
        try:
            ok = bool(program.evaluate({"self": celpy.json_to_cel(obj)}))
        except celpy.CELEvalError as e:
            ok = False
            r = dict(r, message=f"{r.get('message', r['rule'])} ({e})")
        if not ok:
            out.append(f"{path or '.'}: {r.get('message', r['rule'])}")
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = schema.get("properties", {}).get(k)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                cel_violations(v, sub, f"{path}.{k}", out)
    elif isinstance(obj, list) and "items" in schema:
        for i, v in enumerate(obj):
            cel_violations(v, schema["items"], f"{path}[{i}]", out)
    return out


def problems(wl):
    found = [f"schema: {e.json_path}: {e.message}"
             for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(wl)]
    found += [f"pruned by the API server: {p}" for p in pruned_fields(wl, SCHEMA)]
    found += [f"CEL: {m}" for m in cel_violations(wl, SCHEMA)]
    return found


def main():
    cli = sys.argv[1]
    checks = 0
    for manifest in (ROOT / "examples/jobs").glob("*.yaml"):
        if "kueue.x-k8s.io/queue-name" not in manifest.read_text():
            continue
        wl = rendered_workload(cli, manifest)
        found = problems(wl)
        assert not found, f"{manifest.name}: the Workload Kueue's CRD would refuse:\n" + "\n".join(found)
        pod_set = wl["spec"]["podSets"][0]
        workers = yaml.safe_load(manifest.read_text())["spec"]["workers"]
        assert pod_set["count"] == workers["replicas"], pod_set["count"]
        requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert requests["nvidia.com/gpu"] == workers["gpusPerWorker"], requests
        print(f"ok: {manifest.name}: Workload {wl['metadata']['name']} passes Kueue's schema and CEL rules")
        checks += 1

        # The checkers refuse what Kueue refuses.
        broken = {
            "a podSet count below 0": lambda w: w["spec"]["podSets"][0].update(count=-1),
            "priorityClassRef without priority": lambda w: w["spec"].pop("priority", None)
            or w["spec"].setdefault("priorityClassRef", {"group": "kueue.x-k8s.io",
                                                         "kind": "WorkloadPriorityClass", "name": "x"}),
            "a field Kueue does not know": lambda w: w["spec"].update(gangSize=2),
            "no podSets": lambda w: w["spec"].update(podSets=[]),
        }
        for what, breaking in broken.items():
            w = copy.deepcopy(wl)
            breaking(w)
            assert problems(w), f"{what}: not refused"
            print(f"ok: refused {what}: {problems(w)[0][:120]}")
            checks += 1
    assert checks > 0, "no example names a LocalQueue"
    print(f"all {checks} checks passed")


if __name__ == "__main__":
    main()
