"""The browser terminal: xterm.js in Chromium, through the portal's relay, into a real agent's allocation."""

import re

import pytest

from tests.agent.test_sessions_end_to_end import allocation, portal  # noqa: F401  (fixtures)
from tests.e2e.conftest import log_in_at

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("fresh_channel_layer")]

SCREEN = """() => {
  const buffer = window.portalTerminal.buffer.active;
  const lines = [];
  for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
  return lines.join("\\n");
}"""


def screen(page) -> str:
    return page.evaluate(SCREEN)


def sizes_shown(page) -> list[tuple[int, int]]:
    """Every `stty size` answer on the screen, as (rows, cols)."""
    return [(int(rows), int(cols)) for rows, cols in re.findall(r"^size=(\d+) (\d+)$", screen(page), re.M)]


def test_the_browser_terminal_runs_in_the_allocation_and_resizes_with_the_window(
    allocation,  # noqa: F811
    portal,  # noqa: F811
    member,
    browser,
    screenshot,
    off_the_browser_thread,
):
    card = off_the_browser_thread(lambda: allocation.allocations.get().gpu.uuid)
    page = log_in_at(portal.url, browser, "bob", "pw-bob-123")
    page.goto(f"{portal.url}/requests/{allocation.pk}/")
    page.get_by_role("link", name="Terminal").click()
    page.wait_for_function("document.getElementById('terminal-status').textContent === 'Connected'")

    page.locator("#terminal").click()
    page.keyboard.type('echo "cards=$CUDA_VISIBLE_DEVICES"; echo "size=$(stty size)"\n')
    page.wait_for_function(f"({SCREEN})().includes('cards={card}')", timeout=10_000)
    page.wait_for_function(f"/^size=\\d+ \\d+$/m.test(({SCREEN})())", timeout=10_000)
    before = page.evaluate("[window.portalTerminal.rows, window.portalTerminal.cols]")
    assert sizes_shown(page) == [tuple(before)]
    screenshot(page, "terminal")

    page.set_viewport_size({"width": 760, "height": 560})
    page.wait_for_function(f"window.portalTerminal.cols < {before[1]}")
    page.keyboard.type('echo "size=$(stty size)"\n')
    page.wait_for_function(f"(({SCREEN})().match(/^size=/mg) || []).length === 2", timeout=10_000)

    after = page.evaluate("[window.portalTerminal.rows, window.portalTerminal.cols]")
    assert sizes_shown(page) == [tuple(before), tuple(after)]
    assert after[1] < before[1] and after[0] < before[0]


def test_ctrl_shift_c_copies_the_selection_and_ctrl_shift_v_pastes_into_the_terminal(
    allocation,  # noqa: F811
    portal,  # noqa: F811
    member,
    browser,
):
    page = log_in_at(portal.url, browser, "bob", "pw-bob-123")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=portal.url)
    page.goto(f"{portal.url}/requests/{allocation.pk}/terminal/")
    page.wait_for_function("document.getElementById('terminal-status').textContent === 'Connected'")
    page.locator("#terminal").click()
    page.keyboard.type("echo copied-$((6 * 7))\n")
    page.wait_for_function(f"/^copied-42$/m.test(({SCREEN})())", timeout=10_000)

    row = screen(page).splitlines().index("copied-42")
    page.evaluate(f"window.portalTerminal.select(0, {row}, 9)")
    page.keyboard.press("Control+Shift+C")
    page.wait_for_function("navigator.clipboard.readText().then(text => text === 'copied-42')")

    page.evaluate("navigator.clipboard.writeText('echo pasted-$((7 * 6))')")
    page.keyboard.press("Control+Shift+V")
    # Enter once the command shows, as a user's would.
    page.wait_for_function(f"({SCREEN})().includes('echo pasted-$((7 * 6))')", timeout=10_000)
    page.keyboard.press("Enter")
    page.wait_for_function(f"/^pasted-42$/m.test(({SCREEN})())", timeout=10_000)
    assert screen(page).count("echo pasted-") == 1  # pasted once
    assert "^C" not in screen(page)  # the copy was not the shell's interrupt
