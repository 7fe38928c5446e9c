"""The docs describe the present and point at things that exist.

Every relative link in README.md, docs/*.md, bench/README.md and agent/README.md names a file of the
checkout, and a `#anchor` into a markdown file names one of its headings (GitHub's slugs). Links that
leave the checkout (`../shared/...`, the workspace beside it) and web addresses are not followed.
bench/README.md keeps one section per benchmark, short, without the diary of past rounds of work.
"""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", ROOT / "agent" / "README.md"])
DOCS += sorted((ROOT / "docs").glob("*.md"))
BENCH_README = ROOT / "bench" / "README.md"

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`]*`")
ORDINAL = (
    r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
    r"fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|\d+(?:st|nd|rd|th)"
)
NUMBERED_ROUND = re.compile(
    rf"\b(?:{ORDINAL})\s+(?:round|session|stop)s?\b|\b(?:round|session|stop)s?\s+(?:\d+|{ORDINAL})\b",
    re.IGNORECASE,
)


def prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The link targets of a file's prose (not inside code blocks or inline code)."""
    return [target for line in prose_lines(path) for target in LINK.findall(INLINE_CODE.sub("", line))]


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `path` whose file, or heading, does not exist, with the reason; links that
    leave `root` are not followed."""
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.IGNORECASE):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.is_relative_to(root):
            continue
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(root)}")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file_and_heading(doc):
    assert broken_links(doc) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    # given a page with one good link, two broken ones, and links the check leaves alone
    (tmp_path / "guide.md").write_text("# Guide\n\n## Two words\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](guide.md#two-words) [gone](missing.md) [no heading](guide.md#three-words)\n"
        "```\n[in code](missing-too.md)\n```\n"
        "`[inline](missing-three.md)` [web](https://example.org/x) [outside](../x.md)\n"
    )
    # when it is checked, then only the two broken links are reported
    assert broken_links(page, root=tmp_path) == [
        "missing.md: no such file",
        "guide.md#three-words: no heading #three-words in guide.md",
    ]


def test_github_slugs_of_headings_with_code_and_punctuation():
    assert slug("Isolating jobs (`isolation/`)") == "isolating-jobs-isolation"
    assert slug("Job isolation: the cost at a job's start") == "job-isolation-the-cost-at-a-jobs-start"
    assert slug("Cost/performance model") == "costperformance-model"


def test_bench_readme_is_short():
    assert len(BENCH_README.read_text().splitlines()) < 500


def test_bench_readme_names_no_numbered_round_of_work():
    passages = [line for line in BENCH_README.read_text().splitlines() if NUMBERED_ROUND.search(line)]
    assert passages == []


def test_bench_readme_has_every_benchmark_module():
    modules = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__")
    text = BENCH_README.read_text()
    assert [m for m in modules if f"bench.{m}" not in text and f"{m}.py" not in text] == []
