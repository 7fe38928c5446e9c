"""Production code never imports the benchmarks: bench/ is run by hand and is not deployed, so what the
portal runs (the what-if's simulator, the demo's workload) lives in the pure core."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ["portal", "teams", "audit", "scheduler_app", "billing_app"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("app", APPS)
def test_no_app_module_imports_the_benchmarks(app):
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / app).rglob("*.py"))
        for name in sorted(imported_modules(path))
        if name == "bench" or name.startswith("bench.")
    ]
    assert offenders == []
