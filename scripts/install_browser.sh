#!/usr/bin/env bash
# Headless Chromium and ChromeDriver for tests/orchestration/test_browser.py, from the system's Debian packages.
# Idempotent: does nothing when both are already installed. Never fails the test run: when it cannot install
# (not root, or apt fails) it says how to install and exits 0, and the browser tests skip with that reason.
set -uo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
PACKAGES=(chromium chromium-driver)

if [[ -x "$CHROMIUM" && -x "$CHROMEDRIVER" ]]; then
    exit 0
fi

how_to() {
    echo "install_browser: the browser tests will be skipped; to run them install Debian's Chromium:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y --no-install-recommends ${PACKAGES[*]}" >&2
}

if [[ "$(id -u)" -ne 0 ]]; then
    echo "install_browser: $CHROMIUM or $CHROMEDRIVER is missing and this is not root." >&2
    how_to
    exit 0
fi

echo "install_browser: installing ${PACKAGES[*]} from Debian's packages (once; about a minute)..."
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if apt-get update -qq >"$log" 2>&1 \
    && apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >>"$log" 2>&1; then
    echo "install_browser: $("$CHROMIUM" --version 2>/dev/null || echo chromium), $("$CHROMEDRIVER" --version 2>/dev/null | cut -d' ' -f1-2)"
else
    echo "install_browser: apt-get failed; its last lines:" >&2
    tail -n 20 "$log" >&2
    how_to
fi
rm -f "$log"
exit 0
