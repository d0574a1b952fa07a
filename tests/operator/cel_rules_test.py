#!/usr/bin/env python3
"""Every CEL rule of the checked-in CRD, compiled and evaluated by cel-python (a CEL implementation
no one here wrote), gives the same answer as its C++ twin on the defaulted examples (valid and
broken) and on edits of them made to hit each rule, transition rules (oldSelf) included. The API
server is the final reference (tests/e2e); this is what CI can check without one.

usage: cel_rules_test.py PATH/TO/cel_twin"""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import celpy
import yaml

ROOT = Path(os.environ["KUBETUNE_SOURCE_DIR"])
CRD = ROOT / "charts" / "kubetune" / "crds" / "finetunejobs.yaml"


class Twin:
    """The C++ side, one request per line."""

    def __init__(self, path):
        self.p = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())


def crd_rules():
    """(where, rule, message) of every x-kubernetes-validations entry, where = "" | "spec" |
    "spec.volumes[]" as in operator/api/cel_rules.cpp."""
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out = []

    def walk(s, where):
        for r in s.get("x-kubernetes-validations", []):
            out.append((where, r["rule"], r["message"]))
        for k, v in s.get("properties", {}).items():
            walk(v, f"{where}.{k}" if where else k)
        if "items" in s:
            walk(s["items"], where + "[]")

    walk(schema, "")
    return out


def targets(obj, where):
    """The values a rule at `where` sees as `self`."""
    if where == "":
        return [obj]
    if where == "spec":
        return [obj["spec"]]
    if where == "spec.volumes[]":
        return obj["spec"].get("volumes", [])
    if where in ("spec.model", "spec.data", "spec.output", "spec.checkpoint"):
        part = obj["spec"].get(where.split(".")[1])
        return [] if part is None else [part]
    raise AssertionError(f"a rule at {where}: teach this test where that is")


ENV = celpy.Environment()


def cel(rule, self, old=None):
    act = {"self": celpy.json_to_cel(self)}
    if old is not None:
        act["oldSelf"] = celpy.json_to_cel(old)
    try:
        return bool(ENV.program(ENV.compile(rule)).evaluate(act))
    except celpy.CELEvalError:
        return False  # the API server reports an evaluation error as a failed rule


def load(path):
    text = Path(path).read_text()
    return yaml.safe_load(text)


def edits_of(base):
    """Objects made from a valid example to hit each rule from both sides."""
    def edit(fn):
        o = copy.deepcopy(base)
        fn(o)
        return o

    long_name = "a" * 51
    return {
        "name too long": edit(lambda o: o["metadata"].__setitem__("name", long_name)),
        "name of 50": edit(lambda o: o["metadata"].__setitem__("name", "a" * 50)),
        "output.dir = mountPath": edit(lambda o: o["spec"]["output"].__setitem__(
            "dir", o["spec"]["volumes"][0]["mountPath"])),
        "output.dir beside mountPath": edit(lambda o: o["spec"]["output"].__setitem__(
            "dir", o["spec"]["volumes"][0]["mountPath"] + "2/out")),
        "no volumes": edit(lambda o: o["spec"].pop("volumes")),
        "checkpoint.dir off volumes": edit(lambda o: o["spec"]["checkpoint"].__setitem__(
            "dir", "/elsewhere/ck")),
        "checkpoint.dir empty": edit(lambda o: o["spec"]["checkpoint"].__setitem__("dir", "")),
        "nccl on CPU": edit(lambda o: (o["spec"]["distributed"].__setitem__("backend", "nccl"),
                                       o["spec"]["workers"].__setitem__("gpusPerWorker", 0))),
        "nccl on GPU": edit(lambda o: o["spec"]["distributed"].__setitem__("backend", "nccl")),
        "reserved volume name": edit(lambda o: o["spec"]["volumes"][0].__setitem__(
            "name", "kubetune-x")),
        "microBatchSize auto, no globalBatchSize": edit(lambda o: o["spec"]["training"].update(
            microBatchSize="auto", globalBatchSize=0)),
        "microBatchSize auto with globalBatchSize": edit(lambda o: o["spec"]["training"].update(
            microBatchSize="auto", globalBatchSize=64)),
        "volume with two sources": edit(lambda o: o["spec"]["volumes"][0].__setitem__(
            "hostPath", {"path": "/x", "type": ""})),
        "model from the Hub": edit(lambda o: o["spec"]["model"].__setitem__(
            "path", "hf://meta-llama/Llama-3.2-1B@main")),
        "model from S3": edit(lambda o: o["spec"]["model"].__setitem__("path", "s3://models/llama")),
        "a dataset file as the model": edit(lambda o: o["spec"]["model"].__setitem__(
            "path", "hf://datasets/org/chat/train.jsonl")),
        "a malformed bucket": edit(lambda o: o["spec"]["model"].__setitem__("path", "s3://Bad_B/x")),
        "data from the Hub": edit(lambda o: o["spec"]["data"].__setitem__(
            "train", "hf://datasets/org/chat/data/train.jsonl@v2")),
        "a model repository as data": edit(lambda o: o["spec"]["data"].__setitem__(
            "train", "hf://org/chat")),
        "a dataset path with ..": edit(lambda o: o["spec"]["data"].__setitem__(
            "validation", "hf://datasets/org/chat/../../x.jsonl")),
        "validation from S3": edit(lambda o: o["spec"]["data"].__setitem__(
            "validation", "s3://my-data/chat/valid.jsonl")),
        # Outputs in S3 and GGUF files (issue 49).
        "output to S3": edit(lambda o: o["spec"]["output"].__setitem__("dir", "s3://models/run")),
        "output to S3 in upper case": edit(lambda o: o["spec"]["output"].__setitem__(
            "dir", "S3://models/run")),
        "output to the Hub": edit(lambda o: o["spec"]["output"].__setitem__("dir", "hf://org/x")),
        "output to S3 with ..": edit(lambda o: o["spec"]["output"].__setitem__(
            "dir", "s3://models/../x")),
        "gguf without a merged model": edit(lambda o: o["spec"]["output"].__setitem__(
            "gguf", ["q8_0"])),
        "gguf with a merged model": edit(lambda o: o["spec"]["output"].update(
            gguf=["q8_0"], saveMerged=True)),
        "gguf of a full fine-tune": edit(lambda o: (o["spec"]["output"].__setitem__("gguf", ["f16"]),
                                                    o["spec"].setdefault("method", {}).__setitem__(
                                                        "type", "full"))),
        "checkpoints in S3": edit(lambda o: o["spec"]["checkpoint"].__setitem__(
            "dir", "s3://models/run/ck")),
        "checkpoints in S3 for two pods": edit(lambda o: (
            o["spec"]["checkpoint"].__setitem__("dir", "s3://models/run/ck"),
            o["spec"]["workers"].__setitem__("replicas", 2))),
        "checkpoints in S3 with one slash": edit(lambda o: o["spec"]["checkpoint"].__setitem__(
            "dir", "s3:/models/ck")),
        # Near misses of a source (issue "administrators stay in charge", part 5).
        "a scheme in upper case": edit(lambda o: o["spec"]["model"].__setitem__(
            "path", "HF://meta-llama/Llama-3.2-1B")),
        "one slash": edit(lambda o: o["spec"]["model"].__setitem__("path", "hf:/org/name")),
        "three slashes": edit(lambda o: o["spec"]["model"].__setitem__("path", "hf:///org/name")),
        "an empty repository name": edit(lambda o: o["spec"]["model"].__setitem__(
            "path", "hf://org/")),
        "S3 in upper case": edit(lambda o: o["spec"]["data"].__setitem__("train", "S3://data/x")),
        "data with one slash": edit(lambda o: o["spec"]["data"].__setitem__(
            "validation", "s3:/data/valid.jsonl")),
        "a local path with a colon": edit(lambda o: o["spec"]["data"].__setitem__(
            "train", "/data/hf:2024/train.jsonl")),
        # Preference objectives and their data (issue 47).
        "dpo on messages": edit(lambda o: (o["spec"].setdefault("training", {}).__setitem__(
            "objective", "dpo"), o["spec"]["data"].__setitem__("format", "messages"))),
        "dpo on pairs": edit(lambda o: (o["spec"].setdefault("training", {}).__setitem__(
            "objective", "dpo"), o["spec"]["data"].__setitem__("format", "preference"))),
        "dpo on auto": edit(lambda o: (o["spec"].setdefault("training", {}).__setitem__(
            "objective", "orpo"), o["spec"]["data"].__setitem__("format", "auto"))),
        "pairs under sft": edit(lambda o: o["spec"]["data"].__setitem__("format", "preference")),
        "pairs under explicit sft": edit(lambda o: (o["spec"].setdefault("training", {}).__setitem__(
            "objective", "sft"), o["spec"]["data"].__setitem__("format", "preference"))),
        "packed pairs": edit(lambda o: (o["spec"].setdefault("training", {}).__setitem__(
            "objective", "simpo"), o["spec"]["data"].__setitem__("packing", True))),
        "packed sft": edit(lambda o: o["spec"]["data"].__setitem__("packing", True)),
        "label smoothing 0.5": edit(lambda o: o["spec"].setdefault("training", {}).__setitem__(
            "preference", {"labelSmoothing": 0.5})),
        "label smoothing 0.4": edit(lambda o: o["spec"].setdefault("training", {}).__setitem__(
            "preference", {"labelSmoothing": 0.4})),
    }


def transitions_of(base):
    """(old, new) pairs for the transition rules."""
    def edit(o, fn):
        o = copy.deepcopy(o)
        fn(o)
        return o

    suspended = edit(base, lambda o: o["spec"]["runPolicy"].__setitem__("suspend", True))
    return {
        "unchanged": (base, base),
        "learningRate while running": (base, edit(base, lambda o: o["spec"]["training"].__setitem__(
            "learningRate", 0.5))),
        "replicas while running": (base, edit(base, lambda o: o["spec"]["workers"].__setitem__(
            "replicas", 7))),
        "volumes removed while running": (base, edit(base, lambda o: o["spec"].pop("volumes"))),
        "runPolicy while running": (base, edit(base, lambda o: o["spec"]["runPolicy"].__setitem__(
            "backoffLimit", 9))),
        "suspend while running": (base, suspended),
        "replicas while suspended": (suspended, edit(suspended, lambda o: o["spec"]["workers"]
                                                     .__setitem__("replicas", 7))),
    }


def main():
    twin = Twin(sys.argv[1])
    rules = crd_rules()
    cpp_rules = twin.ask({"op": "rules"})["rules"]
    assert sorted((r["where"], r["rule"]) for r in cpp_rules) == sorted(
        (w, r) for w, r, _ in rules), "the checked-in CRD's rules differ from cel_rules.cpp"

    examples = sorted((ROOT / "examples" / "jobs").glob("*.yaml"))
    broken = sorted((ROOT / "examples" / "jobs" / "invalid").glob("*.yaml"))
    cases = {}
    for f in examples + broken:
        obj = load(f)
        obj.setdefault("metadata", {}).setdefault("namespace", "default")
        cases[f.name] = obj
    base_raw = cases["lora-single-gpu.yaml"]
    cases.update(edits_of(twin.ask({"op": "default", "object": base_raw})["object"]))

    compared = failing = 0
    for label, raw in cases.items():
        obj = twin.ask({"op": "default", "object": raw})["object"]
        for where, rule, message in rules:
            if "oldSelf" in rule:
                continue
            for self in targets(obj, where) if "spec" in obj or where == "" else []:
                want = cel(rule, self)
                got = twin.ask({"op": "eval", "rule": rule, "self": self})["result"]
                assert want == got, f"{label}: {where}: cel-python {want}, C++ {got}: {rule}"
                compared += 1
                failing += not want

    base = twin.ask({"op": "default", "object": base_raw})["object"]
    expected = {"unchanged": True, "learningRate while running": False,
                "replicas while running": False, "volumes removed while running": False,
                "runPolicy while running": True, "suspend while running": True,
                "replicas while suspended": True}
    for label, (old, new) in transitions_of(base).items():
        for where, rule, message in rules:
            if "oldSelf" not in rule:
                continue
            old_self, new_self = targets(old, where)[0], targets(new, where)[0]
            want = cel(rule, new_self, old_self)
            got = twin.ask({"op": "eval", "rule": rule, "self": new_self, "oldSelf": old_self})["result"]
            assert want == got, f"{label}: cel-python {want}, C++ {got}: {rule}"
            assert want == expected[label], f"{label}: the rule says {want}"
            compared += 1
            failing += not want
    # Both answers occur, so a twin that always agrees by saying the same thing would be caught.
    assert failing >= 10 and compared - failing >= 20, (compared, failing)
    print(f"{compared} evaluations agree ({failing} failing the rule), "
          f"{len(rules)} rules, {len(cases)} objects")


if __name__ == "__main__":
    main()
