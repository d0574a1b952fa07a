"""kubetune-fetch (Python) and the C++ side agree on what they share, written on each side:

- the exit codes: fetch/kubetune_fetch/errors.py's EXIT_USER_ERROR and EXIT_RETRYABLE are
  common/contracts.h's kExitUserError and kExitRetryable (the operator classifies a fetch
  container's exit by them), and no module of the tool passes an exit code as a bare number;
- the output folder's completion marker: upload.py's COMPLETE_FILE is contracts.h's
  kOutputCompleteFile (the trainer writes it, the publisher waits for it);
- the progress series: the names fetch/kubetune_fetch/metrics.py serves are exactly
  common/metrics/fetch_series.h's (the operator reads them into status.preflight.fetch).

Both sides are parsed, not imported: a change to one side only fails here, naming both values.
Usage: contract_test.py SOURCE_DIR
"""
import ast
import pathlib
import re
import sys


def header_constants(path: pathlib.Path, pattern: str) -> dict:
    """NAME -> value for each `inline constexpr <type> NAME = VALUE;` matching `pattern`."""
    text = path.read_text()
    return dict(re.findall(pattern, text))


def module_tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def python_assignments(tree: ast.Module) -> dict:
    """Top-level NAME = <literal> of a module."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def literal_exit_codes(package: pathlib.Path) -> list:
    """Places that pass an exit code as a number: exit_code=3, FetchError(s, r, 3), failed(a, w, 3)."""
    found = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(module_tree(path)):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            numbers = [k.value for k in node.keywords if k.arg == "exit_code"]
            if name in ("FetchError", "failed") and len(node.args) >= 3:
                numbers.append(node.args[2])
            for value in numbers:
                if isinstance(value, ast.Constant) and isinstance(value.value, int):
                    found.append(f"{path}:{value.lineno}: exit code {value.value} as a number "
                                 "(use errors.EXIT_USER_ERROR or errors.EXIT_RETRYABLE)")
    return found


def main() -> int:
    root = pathlib.Path(sys.argv[1])
    package = root / "fetch" / "kubetune_fetch"
    problems = []

    contracts = header_constants(root / "common" / "contracts.h",
                                 r"inline constexpr int (kExit\w+) = (\d+);")
    errors = python_assignments(module_tree(package / "errors.py"))
    for py, cpp in (("EXIT_USER_ERROR", "kExitUserError"), ("EXIT_RETRYABLE", "kExitRetryable")):
        if cpp not in contracts:
            problems.append(f"common/contracts.h: no {cpp}")
        elif errors.get(py) != int(contracts[cpp]):
            problems.append(f"fetch/kubetune_fetch/errors.py: {py} = {errors.get(py)}, but "
                            f"common/contracts.h: {cpp} = {contracts[cpp]}")
    problems += literal_exit_codes(package)

    marker = header_constants(root / "common" / "contracts.h",
                              r'inline constexpr const char\* (kOutputCompleteFile) = "([^"]+)";')
    published = python_assignments(module_tree(package / "upload.py")).get("COMPLETE_FILE")
    if marker.get("kOutputCompleteFile") != published:
        problems.append(f"fetch/kubetune_fetch/upload.py: COMPLETE_FILE = {published!r}, but "
                        f"common/contracts.h: kOutputCompleteFile = "
                        f"{marker.get('kOutputCompleteFile')!r}")

    series = set(header_constants(root / "common" / "metrics" / "fetch_series.h",
                                  r'inline constexpr std::string_view (k\w+) = "([^"]+)";').values())
    served = python_assignments(module_tree(package / "metrics.py")).get("_SERIES", ())
    names = {entry[0] for entry in served}
    if not series:
        problems.append("common/metrics/fetch_series.h: no series found")
    for name in sorted(names - series):
        problems.append(f"fetch/kubetune_fetch/metrics.py serves {name}, which "
                        "common/metrics/fetch_series.h does not name")
    for name in sorted(series - names):
        problems.append(f"common/metrics/fetch_series.h names {name}, which "
                        "fetch/kubetune_fetch/metrics.py does not serve")

    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"exit codes {sorted(contracts.items())} and {len(series)} series agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
