"""The folders' include rules, checked against every #include in the sources.

LAYERS is the one table of what each folder may include (docs/DEVELOPING.md shows it as the map
of the house). A folder not in it, an include it does not allow, or a cycle in it fails.
"""
import os
import re
import sys

REPO = os.environ.get("KUBETUNE_REPO", os.path.join(os.path.dirname(__file__), "..", ".."))

# folder -> the folders its files may include (besides their own). Lower layers first.
LAYERS = {
    "common": [],
    "text": ["common"],
    "kernels": ["common"],
    "fetch": [],
    # The trainer.
    "trainer/data": ["common", "text"],
    "trainer/model": ["common", "kernels"],
    "trainer/io": ["common", "kernels", "trainer/model"],
    "trainer/device": ["common"],
    "trainer/optim": ["common"],
    "trainer/inputs": ["common", "text", "trainer/data", "trainer/device", "trainer/io",
                       "trainer/model"],
    "trainer/parallel": ["common", "trainer/data", "trainer/device", "trainer/model",
                         "trainer/optim"],
    "trainer/plan": ["common", "trainer/data", "trainer/device", "trainer/inputs",
                     "trainer/model"],
    "trainer/metrics": ["common", "trainer/device", "trainer/parallel"],
    "trainer/loop": ["common", "kernels", "trainer/data", "trainer/device", "trainer/inputs",
                     "trainer/io", "trainer/metrics", "trainer/model", "trainer/optim",
                     "trainer/parallel", "trainer/plan"],
    "trainer": ["common", "trainer/data", "trainer/device", "trainer/inputs", "trainer/io",
                "trainer/loop", "trainer/metrics", "trainer/model", "trainer/parallel",
                "trainer/plan"],
}
LAYERS.update({
    # The operator.
    "operator/kube": ["common"],
    "operator/api": ["common", "operator/kube"],
    "operator/render": ["common", "operator/api", "operator/kube"],
    "operator/policy": ["common", "operator/api", "operator/kube", "operator/render"],
    "operator/controller": ["common", "operator/api", "operator/kube", "operator/policy",
                            "operator/render"],
    "operator/local": ["common", "operator/api", "operator/kube", "operator/policy",
                       "operator/render"],
    "operator/runtime": ["common", "operator/api", "operator/controller", "operator/kube",
                         "operator/policy", "operator/render"],
    "operator": ["common", "operator/api", "operator/controller", "operator/kube",
                 "operator/local", "operator/policy", "operator/render", "operator/runtime"],
})

SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
SKIPPED_TOP = {".git", "tests", "bench", "docs", "examples", "charts", "docker", "scripts",
               "tools"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    """The LAYERS key a repository path belongs to: the longest that is a prefix of its folder."""
    parts = os.path.dirname(path).split("/")
    for n in range(len(parts), 0, -1):
        key = "/".join(parts[:n])
        if key in LAYERS:
            return key
    return None


def sources():
    for top in sorted(os.listdir(REPO)):
        if top in SKIPPED_TOP or not os.path.isdir(os.path.join(REPO, top)):
            continue
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for f in sorted(files):
                if f.endswith(SOURCE_SUFFIXES):
                    full = os.path.join(root, f)
                    yield os.path.relpath(full, REPO), full


def folders_include_only_what_the_map_allows():
    problems = []
    for path, full in sources():
        mine = folder_of(path)
        if mine is None:
            problems.append(f"{path}: its folder is not in LAYERS (tests/layout/layers_test.py)")
            continue
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            if "/" not in inc:
                continue  # a generated header beside the file, or a system-style include
            theirs = folder_of(inc)
            if theirs is None or theirs == mine:
                continue
            if theirs not in LAYERS[mine]:
                problems.append(f"{path}: includes {inc} ({mine} may include only "
                                f"{', '.join(LAYERS[mine]) or 'nothing'})")
    assert not problems, "\n".join(problems)


def the_map_has_no_cycle():
    state = {}  # folder -> "visiting" | "done"

    def visit(node, trail):
        if state.get(node) == "done":
            return
        assert state.get(node) != "visiting", "cycle: " + " -> ".join(trail + [node])
        state[node] = "visiting"
        for nxt in LAYERS.get(node, []):
            assert nxt in LAYERS, f"{node} allows {nxt}, which is not a folder in LAYERS"
            visit(nxt, trail + [node])
        state[node] = "done"

    for node in LAYERS:
        visit(node, [])


def developing_md_shows_the_same_map():
    """docs/DEVELOPING.md's layout table names, for each folder, what LAYERS allows: one map."""
    doc = open(os.path.join(REPO, "docs", "DEVELOPING.md"), encoding="utf-8").read()
    row = re.compile(r"^\| `([a-z_/]+?)/?` \|[^|]*\| ([^|]*) \|", re.M)
    shown = {}
    for folder, allowed in row.findall(doc):
        if folder not in LAYERS:
            continue
        names = [] if allowed.strip().startswith("—") else [a.strip() for a in allowed.split(",")]
        top = folder.split("/")[0]
        shown[folder] = sorted(n if n in LAYERS else f"{top}/{n}" for n in names)
    problems = [f"{folder}: DEVELOPING.md shows {shown.get(folder)}, LAYERS has {sorted(allowed)}"
                for folder, allowed in LAYERS.items() if shown.get(folder) != sorted(allowed)]
    assert not problems, "\n".join(problems)


def the_loop_does_not_know_the_sharding_mode():
    """The training loop calls the WeightSync interface and never asks which scheme it has."""
    loop = os.path.join(REPO, "trainer", "loop")
    asks = re.compile(r"\.distributed\.sharding\b|DistributedSharding|FullSharding\b|"
                      r"OptimizerSharding\b|ReplicatedWeights\b|full_sharding\.h|"
                      r"optimizer_sharding\.h")
    found = []
    for f in sorted(os.listdir(loop)):
        with open(os.path.join(loop, f), encoding="utf-8") as src:
            for n, line in enumerate(src, 1):
                if asks.search(line) and not line.lstrip().startswith("//"):
                    found.append(f"trainer/loop/{f}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


if __name__ == "__main__":
    test = globals()[sys.argv[1]]
    test()
    print(f"{sys.argv[1]}: passed")
