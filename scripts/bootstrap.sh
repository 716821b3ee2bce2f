#!/usr/bin/env bash
# Create the virtualenv and install the project with its dev tools, once per change of pyproject.toml.
set -euo pipefail
# pip's notes about this machine's extra (empty) package indexes are noise; real errors still stop the script.
quiet_pip() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
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
  quiet_pip .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip wheel
  quiet_pip .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench,fast]'
  echo "$want" > "$stamp"
fi
