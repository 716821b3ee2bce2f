#!/usr/bin/env bash
# Create the virtualenv and install the project with its dev tools, once per change of pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.engram-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing engram-pipelines and its dependencies into .venv (a few minutes the first time)"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip wheel
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
  echo "$want" > "$stamp"
fi
