"""Masking a team's secrets in its jobs' output: every occurrence becomes `*` of the same length, so the
character offsets the agent ships pieces at stay valid. Pure: pieces in (anything with `offset` and
`text`), the same pieces out with their text masked; the caller stores them (services.agents.append_log).
"""

from collections.abc import Iterable, Sequence
from typing import Protocol

MASK = "*"


class Piece(Protocol):
    offset: int
    text: str


def mask_secrets(pieces: Sequence[Piece], secrets: Iterable[str]) -> list[Piece]:
    """Mask the secrets in `pieces` (neighbouring pieces of one job's output, in any order, possibly
    overlapping), including an occurrence that runs across two or more of them; returns the pieces whose
    text changed."""
    secrets = [s for s in set(secrets) if s]
    if not secrets:
        return []
    # Each piece on its own too: where pieces overlap, a stretch reads the overlap from one of them only.
    texts = [*_stretches(pieces), *((piece.offset, piece.text) for piece in pieces)]
    spans = [span for start, text in texts for span in _occurrences(start, text, secrets)]
    changed = []
    for piece in pieces:
        masked = _starred(piece, spans)
        if masked != piece.text:
            piece.text = masked
            changed.append(piece)
    return changed


def _stretches(pieces: Sequence[Piece]) -> list[tuple[int, str]]:
    """The output the pieces hold as (offset, text) runs without gaps; an overlap is read once."""
    runs: list[tuple[int, list[str]]] = []
    position = None
    for piece in sorted(pieces, key=lambda p: p.offset):
        end = piece.offset + len(piece.text)
        if position is None or piece.offset > position:
            runs.append((piece.offset, [piece.text]))
            position = end
        elif end > position:
            runs[-1][1].append(piece.text[position - piece.offset :])
            position = end
    return [(start, "".join(parts)) for start, parts in runs]


def _occurrences(start: int, text: str, secrets: list[str]) -> list[tuple[int, int]]:
    """[start, end) of every occurrence of each secret in `text` (found at `start` of the output),
    overlapping ones included."""
    spans = []
    for secret in secrets:
        found = text.find(secret)
        while found != -1:
            spans.append((start + found, start + found + len(secret)))
            found = text.find(secret, found + 1)
    return spans


def _starred(piece: Piece, spans: list[tuple[int, int]]) -> str:
    end = piece.offset + len(piece.text)
    chars = None
    for span_start, span_end in spans:
        low, high = max(span_start, piece.offset), min(span_end, end)
        if low < high:
            chars = chars if chars is not None else list(piece.text)
            chars[low - piece.offset : high - piece.offset] = MASK * (high - low)
    return piece.text if chars is None else "".join(chars)
