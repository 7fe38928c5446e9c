"""The apps' import graph, function-level imports included: no module cycle, dependencies one way
along the apps' layers, and no import of the benchmarks or the tests from what the portal runs.

Imports under `if TYPE_CHECKING:` are left out: they never run, and only name types for annotations."""

import ast
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]

# Lowest first: an app may import only the apps before it. The apps are installed in this order, but
# for the project, portal (settings, URLs, the home page), which puts every app together and comes last.
PROJECT = "portal"
LAYERS = [app for app in settings.INSTALLED_APPS if (ROOT / app).is_dir() and app != PROJECT] + [PROJECT]
# Packages beside the Django apps, deployed on their own: they import no app (agent uses the SDK).
STANDALONE = {"agent": {"gpu_portal_sdk"}, "gpu_portal_sdk": set()}
PACKAGES = {name: ROOT / name for name in [*LAYERS, "agent"]}
PACKAGES["gpu_portal_sdk"] = ROOT / "sdk" / "gpu_portal_sdk"
NEVER_IMPORTED = ("bench", "tests")


def modules_under(packages: dict[str, Path]) -> dict[str, Path]:
    """Every module's dotted name and file, migrations included."""
    found = {}
    for package, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST):
    """Every Import and ImportFrom node, at any depth (in functions and classes too), except under
    `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        if _type_checking_only(child):
            yield from (node for branch in child.orelse for node in _imports(ast.Module([branch], [])))
            continue
        yield from _imports(child)


def imported_names(module: str, path: Path) -> set[str]:
    """The dotted names a module imports: for `from a import b`, both `a` and `a.b` (b may be a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in _imports(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            parent = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parent + ([base] if base else []))
        names.add(base)
        names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `modules` it imports (a name that is not a module counts as its package)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        targets = {known(name) for name in imported_names(module, path)}
        graph[module] = targets - {None, module}
    return graph


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as the modules along it (first repeated last), or None."""
    state = {}  # module -> "open" while on the current path, "done" after
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = "open"
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state.get(target) == "open":
                return [*path[path.index(target) :], target]
            elif target not in state:
                state[target] = "open"
                path.append(target)
                stack.append(iter(sorted(graph[target])))
    return None


def app_of(module: str) -> str:
    return module.split(".")[0]


MODULES = modules_under(PACKAGES)
GRAPH = import_graph(MODULES)


def test_no_module_imports_another_that_imports_it_back_even_through_function_level_imports():
    assert a_cycle(GRAPH) is None


def imports_beyond(package: str, allowed: set[str]) -> list[str]:
    """Each import of a module of `package` from a package neither its own nor in `allowed`."""
    return sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if app_of(module) == package
        for target in targets
        if app_of(target) not in allowed | {package}
    )


@pytest.mark.parametrize("app", LAYERS)
def test_an_app_imports_only_the_apps_below_it(app):
    assert imports_beyond(app, set(LAYERS[: LAYERS.index(app)]) | set(STANDALONE)) == []


@pytest.mark.parametrize("package", sorted(STANDALONE))
def test_the_agent_and_the_sdk_import_no_django_app(package):
    assert imports_beyond(package, STANDALONE[package]) == []


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_nothing_the_portal_runs_imports_the_benchmarks_or_the_tests(package):
    offenders = sorted(
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if app_of(module) == package
        for name in imported_names(module, path)
        if name.split(".")[0] in NEVER_IMPORTED
    )
    assert offenders == []


def test_the_graph_sees_a_cycle_closed_by_a_function_level_import_and_not_one_under_type_checking(tmp_path):
    package = tmp_path / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "orders.py").write_text("from shop.billing import charge\n")
    (package / "billing.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from shop.orders import Order\n"
        "else:\n    import json\n\n\ndef charge():\n    pass\n"
    )
    assert a_cycle(import_graph(modules_under({"shop": package}))) is None

    (package / "billing.py").write_text("def charge():\n    from .orders import Order\n")
    cycle = a_cycle(import_graph(modules_under({"shop": package})))
    assert cycle == ["shop.billing", "shop.orders", "shop.billing"]
