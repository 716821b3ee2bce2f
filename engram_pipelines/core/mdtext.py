"""Text from memories (content, namespaces, reasons) inside Markdown reports: shown as text, never read as
Markdown or HTML. Injected content once rendered as raw `<script>` tags, headings and `javascript:` links, and
a namespace holding `|` or a newline broke the report's tables."""

from __future__ import annotations

import re
from typing import Any

_ESCAPED = re.compile(r"([\\`*_\[\]|])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def inline(value: Any, limit: int | None = None) -> str:
    """One line of plain text for a list item or a table cell (cut to `limit` characters before escaping)."""
    text = " ".join(("" if value is None else str(value)).split())
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    text = "".join(_ENTITIES.get(ch, ch) for ch in text)
    return _ESCAPED.sub(r"\\\1", text)
