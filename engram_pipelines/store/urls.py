"""Store URLs in messages and logs never show a password."""

from __future__ import annotations

import re

_PASSWORD = re.compile(r"(://[^:/@]+:)[^@]*(@)")


def redact(url: str) -> str:
    return _PASSWORD.sub(r"\1***\2", url)
