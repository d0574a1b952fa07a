#!/usr/bin/env python3
"""The Dockerfiles and the Helm chart, checked without Docker or Helm; each function a ctest entry."""
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(os.environ["KUBETUNE_REPO"])
CHART = REPO / "charts" / "kubetune"


def dockerfiles_pass_hadolint():
    """hadolint (the Dockerfile linter) finds nothing, with the repository's .hadolint.yaml."""
    hadolint = Path(sys.executable).parent / "hadolint"
    files = sorted((REPO / "docker").glob("*.Dockerfile"))
    assert len(files) == 4, files  # trainer, operator, fetch, export
    p = subprocess.run([str(hadolint), "--config", str(REPO / ".hadolint.yaml"), *map(str, files)],
                       capture_output=True, text=True)
    print(p.stdout, p.stderr)
    assert p.returncode == 0


def values_paths(tree, prefix=""):
    out = set()
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else key
        out.add(path)
        if isinstance(value, dict):
            out |= values_paths(value, path)
    return out


def chart_references_resolve():
    """Every .Values path a template reads is in values.yaml, every bundled file it reads exists,
    and the RBAC the chart bundles names no namespace but the one the template replaces."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "kubetune" and chart["version"], chart
    defined = values_paths(yaml.safe_load((CHART / "values.yaml").read_text()))
    templates = {t.name: t.read_text() for t in (CHART / "templates").iterdir()}
    assert {"deployment.yaml", "rbac.yaml", "service.yaml", "monitoring.yaml"} <= templates.keys()
    used, bundled = set(), set()
    for text in templates.values():
        used |= set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text))
        bundled |= set(re.findall(r'\.Files\.Get "([^"]+)"', text))
        # `$m := .Values.monitoring`: `$m.x` reads monitoring.x
        for alias, target in re.findall(r"\{\{-?\s*\$(\w+)\s*:=\s*\.Values\.([A-Za-z0-9_.]+)", text):
            used |= {f"{target}.{p}" for p in re.findall(rf"\${alias}\.([A-Za-z0-9_.]+)", text)}
    missing = sorted(u for u in used if u not in defined)
    assert not missing, f"templates read values that values.yaml does not define: {missing}"
    for f in bundled:
        assert (CHART / f).is_file(), f"{f}: read by a template, not in the chart"
    assert {"rbac/operator-rbac.yaml", "alerts/kubetune-rules.yaml",
            "dashboards/kubetune-training.json"} <= bundled, bundled
    # The bundled RBAC: its namespaced objects all say `namespace: kubetune-system`, the string
    # templates/rbac.yaml replaces with the release's namespace.
    docs = list(yaml.safe_load_all((CHART / "rbac" / "operator-rbac.yaml").read_text()))
    for d in docs:
        ns = d["metadata"].get("namespace")
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            assert ns == "kubetune-system", d["metadata"]
        for s in d.get("subjects", []):
            assert s.get("namespace") == "kubetune-system", s
    assert 'replace "namespace: kubetune-system"' in templates["rbac.yaml"]
    assert 'replace "kubetune-operator"' in templates["rbac.yaml"]
    # The operator pods run as non-root with nothing to escalate to.
    deployment = templates["deployment.yaml"]
    for needle in ("runAsNonRoot: true", "allowPrivilegeEscalation: false",
                   "readOnlyRootFilesystem: true", "capabilities: {drop: [ALL]}"):
        assert needle in deployment, needle


def trainer_image_carries_no_python_packages():
    """The trainer's runtime stage copies the wheel's shared libraries, never the virtual
    environment (triton, sympy, ... that nothing runs)."""
    text = (REPO / "docker" / "trainer.Dockerfile").read_text()
    runtime = text[text.rindex("\nFROM "):]
    copies = re.findall(r"^COPY --from=build (\S+) (\S+)", runtime, re.M)
    assert copies, runtime
    for src, _ in copies:
        assert src in ("/opt/torchlibs", "/opt/kubetune"), f"runtime stage copies {src}"


def export_image_pins_are_the_tested_ones():
    """The export image installs the versions the GGUF test ran with: each package it pins is
    pinned to the same version in scripts/setup.sh (the one place the tests' versions live), and
    its llama.cpp sources come from the same llama-cpp-python release; so does fetch/pyproject.toml
    for what the fetch tests ran with."""
    setup = (REPO / "scripts" / "setup.sh").read_text()
    tested = dict(re.findall(r'"([A-Za-z0-9_.\-]+)(?:\[[a-z]+\])?==([0-9][^"]*)"', setup))
    image = (REPO / "docker" / "export.Dockerfile").read_text()
    pins = re.findall(r"([A-Za-z0-9_.\-]+)==([0-9][0-9A-Za-z.]*)", image)
    assert {name for name, _ in pins} >= {"llama-cpp-python", "torch", "transformers", "sentencepiece"}, pins
    for name, version in pins:
        assert tested.get(name) == version, f"export.Dockerfile pins {name}=={version}, setup.sh {tested.get(name)}"
    for release in re.findall(r"llama_cpp_python-([0-9.]+[0-9])", image):
        assert release == tested["llama-cpp-python"], release
    # The fetch package (both images install it): what the tests also pin, at the same version.
    fetch = (REPO / "fetch" / "pyproject.toml").read_text()
    shared = [(n, v) for n, v in re.findall(r'"([A-Za-z0-9_.\-]+)==([0-9][^"]*)"', fetch) if n in tested]
    assert {n for n, _ in shared} >= {"datasets", "pyarrow", "boto3"}, shared
    for name, version in shared:
        assert tested[name] == version, f"fetch/pyproject.toml pins {name}=={version}, setup.sh {tested[name]}"


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with a key twice (yaml.safe_load keeps the last)."""


def _no_duplicates(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dups = sorted({k for k in keys if keys.count(k) > 1})
    if dups:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {dups}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and a current one.
KUBE_VERSIONS = ("1.28.0", "1.33.0")


def render(values, name="kubetune", namespace="kubetune-system"):
    import helm_python as helm
    with helm.Chart.load(str(CHART)) as chart:
        out = chart.render(values, name=name, namespace=namespace, is_install=True)
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d]
    return docs


def chart_lints_renders_and_matches_kind_schemas():
    """Helm's own library (helm-python-sdk) lints the chart and renders it with several value
    sets; every rendered object has no duplicate key and passes its kind's schema
    (kubernetes-validate, strict: no unknown field) at each supported Kubernetes version; two
    releases share no object name; values.schema.json rejects a wrong type and a typo."""
    import helm_python as helm
    import kubernetes_validate
    lint = helm.lint(str(CHART))
    assert not lint["errors"], lint
    value_sets = [
        {},
        {"operator": {"watchNamespace": "team-a", "replicas": 1, "leaderElect": False}},
        {"monitoring": {"serviceMonitor": True, "podMonitor": True, "prometheusRule": True,
                        "grafanaDashboard": True}},
    ]
    checked = 0
    for values in value_sets:
        for d in render(values):
            kind = d["kind"]
            for v in KUBE_VERSIONS:
                kubernetes_validate.validate(d, v, strict=True)
            checked += 1
            labels = d["metadata"].get("labels", {})
            assert labels.get("app.kubernetes.io/instance") in (None, "kubetune"), d["metadata"]
            assert kind not in ("ServiceMonitor", "PodMonitor", "PrometheusRule"), \
                "rendered without the cluster serving monitoring.coreos.com/v1"
    assert checked >= 20, checked
    first = {(d["kind"], d["metadata"]["name"]) for d in render({})}
    second = {(d["kind"], d["metadata"]["name"]) for d in render({}, name="team-b", namespace="b")}
    assert not first & second, first & second
    assert ("Lease", "kubetune-operator") in first, first
    for bad in ({"operator": {"replicas": "two"}}, {"operatr": {"replicas": 1}}):
        with helm.Chart.load(str(CHART)) as chart:
            try:
                chart.validate_schema(bad)
            except helm.HelmError as e:
                print(f"  {bad}: rejected: {str(e).splitlines()[-1]}")
                continue
        raise AssertionError(f"values.schema.json accepted {bad}")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print(sys.argv[1] + ": ok")
