"""Allocation segments have one writer, scheduler_app/services/segments.py: no other app module inserts,
updates or deletes Allocation rows through the ORM, and none reaches into the lifecycle owner's private
_move."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ["portal", "teams", "audit", "scheduler_app", "billing_app", "demo"]
OWNER = ROOT / "scheduler_app" / "services" / "segments.py"
WRITES = {"update", "bulk_create", "bulk_update", "create", "get_or_create", "update_or_create", "delete"}


def _root_name(node: ast.AST) -> str | None:
    """The name a chain such as Allocation.objects.filter(...).update starts from."""
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _segment_writes(path: Path, root: Path = ROOT) -> list[str]:
    where = path.relative_to(root)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in WRITES and _root_name(func) == "Allocation":
            found.append(f"{where}:{node.lineno} Allocation ... .{func.attr}()")
        elif (
            isinstance(func, ast.Name)
            and func.id == "insert_rows"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "Allocation"
        ):
            found.append(f"{where}:{node.lineno} insert_rows(Allocation, ...)")
        elif isinstance(func, ast.Name) and func.id == "_move" and path.name != "transitions.py":
            found.append(f"{where}:{node.lineno} _move(...)")
    return found


def test_only_the_segments_module_writes_allocation_rows():
    offenders = [
        write
        for app in APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if path != OWNER and "migrations" not in path.parts
        for write in _segment_writes(path)
    ]
    assert offenders == []


def test_the_check_sees_a_write_it_should_refuse(tmp_path):
    # given a module that closes slices itself and one that moves requests through the private _move
    module = tmp_path / "rogue.py"
    module.write_text(
        "Allocation.objects.committed().filter(request=r).update(ended_at=now)\n"
        "insert_rows(Allocation, rows)\n"
        "_move(locked, 'scheduled', reasons={})\n"
    )
    # when it is checked, then each write is named
    assert [line.split(" ", 1)[1] for line in _segment_writes(module, tmp_path)] == [
        "Allocation ... .update()",
        "insert_rows(Allocation, ...)",
        "_move(...)",
    ]
