"""Every page, as each kind of user meets it, on a desktop (1280x800) and a phone (390x844) screen:
no serious or critical accessibility violation that axe-core finds (labels, contrast, keyboard focus,
landmarks; axe-core vendored from npm in tests/e2e/vendor), no horizontal scrolling of the page
itself, and every chart with a text summary for screen readers. The pages are those a user reaches
by following the links from the home page, on the demo as `bin/run-portal` runs it; screenshots of
the main ones at both sizes go to test-artifacts/ (CI keeps that folder)."""

import re
from collections import deque
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

import pytest
from playwright.sync_api import Page

from tests.e2e.conftest import ARTIFACTS
from tests.embedded_portal import embedded_portal

pytestmark = pytest.mark.e2e

AXE = Path(__file__).with_name("vendor") / "axe.min.js"
SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
USERS = {"member": "bob", "team-admin": "alice", "operator": "ops"}
PASSWORD = "gpu-portal-demo"
# Not pages of ours (Django's admin, the API and its browsable docs) or not pages at all.
SKIP = re.compile(r"^/(admin|api|static|metrics|healthz)|/logout/|\.csv$|/revoke/|/delete/")
SCREENSHOTS = {
    "/requests/new/": "request-form",
    "/requests/{id}/": "request-page",
    "/cluster/": "cluster",
    "/teams/{slug}/budget/": "budget",
    "/prices/": "prices",
    "/operator/what-if/": "what-if",
}
SERIOUS = ("serious", "critical")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    ARTIFACTS.mkdir(exist_ok=True)
    with embedded_portal(tmp_path_factory.mktemp("a11y-demo"), "--simulated-agents") as portal:
        yield portal


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("who", list(USERS))
def test_every_page_passes_axe_fits_the_screen_and_summarises_its_charts(demo, browser, who, size):
    page = browser.new_context(viewport=SIZES[size]).new_page()
    log_in(page, demo.url, USERS[who])
    problems = {}
    # Besides the pages linked from home, the refusal a member meets on an operator's page (403).
    for path in pages_of(page, demo.url) + (["/operator/"] if who == "member" else []):
        page.goto(demo.url + path)
        page.wait_for_load_state("networkidle")
        if found := page_problems(page):
            problems[path] = found
        if name := screenshot_name(path):
            page.screenshot(path=ARTIFACTS / f"a11y-{name}-{who}-{size}.png", full_page=True)
    assert not problems, "\n".join(f"{path}: {found}" for path, found in problems.items())


@pytest.mark.parametrize("size", list(SIZES))
def test_the_sign_in_page_passes_axe_and_fits_the_screen(demo, browser, size):
    page = browser.new_context(viewport=SIZES[size]).new_page()
    page.goto(f"{demo.url}/accounts/login/")

    assert not page_problems(page)


def log_in(page: Page, url: str, username: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{url}/")


def pages_of(page: Page, url: str, limit: int = 60) -> list[str]:
    """The site's pages a user reaches from the home page, one of each kind (/requests/7/ stands for
    every request page), in the order found."""
    seen_kinds, found, queue = set(), [], deque(["/"])
    while queue and len(found) < limit:
        path = queue.popleft()
        kind = re.sub(r"/\d+(?=/)", "/{id}", path)
        if kind in seen_kinds:
            continue
        seen_kinds.add(kind)
        page.goto(url + path)
        found.append(path)
        for href in page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)"):
            link = urlsplit(urldefrag(href)[0])
            if link.netloc == urlsplit(url).netloc and not SKIP.search(link.path) and not link.query:
                queue.append(link.path)
    return found


def page_problems(page: Page) -> list[str]:
    """Serious and critical axe violations, horizontal overflow, and charts without a text summary."""
    page.add_script_tag(path=str(AXE))
    results = page.evaluate(
        "() => axe.run(document, {runOnly: {type: 'tag', values: "
        "['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}})"
    )
    problems = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes'][:3]]}"
        for v in results["violations"]
        if v["impact"] in SERIOUS
    ]
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    if overflow > 0:
        problems.append(f"the page scrolls sideways by {overflow} px")
    unsummarised = page.evaluate(
        "[...document.querySelectorAll('.js-plotly-plot')]"
        ".filter(chart => !(chart.closest('[role=img][aria-label], figure[aria-label]')"
        " || chart.closest('figure')?.querySelector('figcaption, .sr-only')))"
        ".map(chart => chart.id || chart.className)"
    )
    if unsummarised:
        problems.append(f"charts without a text summary: {unsummarised}")
    return problems


def screenshot_name(path: str) -> str | None:
    kind = re.sub(r"/\d+(?=/)", "/{id}", path)
    kind = re.sub(r"^/teams/[^/]+/budget/$", "/teams/{slug}/budget/", kind)
    return SCREENSHOTS.get(kind)
