"""Navigation in a browser: at 1366 px the cluster page's heatmap stays inside its card and leaves its
caption clear, also when the card's width changes without a window resize (the scrollbar that appears as
the pools' nodes load, a narrower layout); a new API token is shown once in a read-only field that
selects whole on focus, with a button that copies it."""

import pytest

from tests.e2e.conftest import log_in_at

pytestmark = pytest.mark.e2e

LAPTOP = {"width": 1366, "height": 768}
HEATMAP_FITS = """() => {
  const box = document.getElementById('heatmap');
  const svg = box.querySelector('.main-svg');
  if (!svg) return false;
  const card = box.closest('.card').getBoundingClientRect();
  const caption = box.parentElement.querySelector('p.muted').getBoundingClientRect();
  const plot = svg.getBoundingClientRect();
  return plot.left >= card.left && plot.right <= card.right && plot.bottom <= caption.top;
}"""


@pytest.fixture
def nodes(make_node):
    for i in range(1, 8):
        make_node(f"a100-80gb-spot-node-{i:02d}", gpus=8)


def test_the_heatmap_stays_inside_its_card_at_1366_px_whatever_the_card_does(
    nodes, member, live_server, browser, screenshot
):
    page = log_in_at(live_server.url, browser, "bob", "pw-bob-123", viewport=LAPTOP)

    page.goto(f"{live_server.url}/cluster/")
    page.wait_for_function(HEATMAP_FITS)
    screenshot(page, "cluster-1366")

    # when the card narrows with no window resize (as when a scrollbar appears)
    page.evaluate("document.querySelector('main').style.maxWidth = '900px'")

    page.wait_for_function(HEATMAP_FITS, timeout=5_000)


def test_a_new_token_is_shown_once_read_only_and_copied_with_one_click(
    member, live_server, browser, screenshot
):
    page = log_in_at(
        live_server.url,
        browser,
        "bob",
        "pw-bob-123",
        viewport=LAPTOP,
        permissions=["clipboard-read", "clipboard-write"],
    )
    page.goto(f"{live_server.url}/accounts/tokens/")
    page.fill("input[name=name]", "laptop")
    page.click("form.row-form button[type=submit]")

    field = page.get_by_label("Your new token")
    secret = field.input_value()
    assert secret.startswith("gpp_") and field.get_attribute("readonly") is not None
    page.get_by_role("button", name="Copy").click()

    page.wait_for_function(
        "() => document.querySelector('[data-copy-status]').textContent.includes('Copied')"
    )
    assert page.evaluate("navigator.clipboard.readText()") == secret
    # a click in the field selects the whole token, for copying by hand
    field.click()
    assert (
        page.evaluate(
            "window.getSelection().toString() || document.activeElement.value.substring("
            "document.activeElement.selectionStart, document.activeElement.selectionEnd)"
        )
        == secret
    )
    screenshot(page, "token-created")

    page.goto(f"{live_server.url}/accounts/tokens/")
    assert page.get_by_label("Your new token").count() == 0  # shown once
