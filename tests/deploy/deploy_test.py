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
    assert len(files) == 2, files
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
    # The operator pods run as non-root with nothing to escalate to.
    deployment = templates["deployment.yaml"]
    for needle in ("runAsNonRoot: true", "allowPrivilegeEscalation: false",
                   "readOnlyRootFilesystem: true", "capabilities: {drop: [ALL]}"):
        assert needle in deployment, needle


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print(sys.argv[1] + ": ok")
