"""Quoting what a user typed back to them, in pages, API errors and logs.

A message that quotes input quotes at most ECHO_LIMIT characters of it: a 10 KB value sent back whole
fills the page (or the log line) and helps nobody find their mistake. Forms re-render what was typed
cut to the field's own max_length (infra.form_rendering)."""

ECHO_LIMIT = 40


def echoed(value: object, limit: int = ECHO_LIMIT) -> str:
    """The value as text, cut after `limit` characters with an ellipsis; quote it as the message does:
    f"No pool named {echoed(name)!r}." or f"“{echoed(line)}”: ..."."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"
