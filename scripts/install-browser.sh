#!/usr/bin/env bash
# Debian's Chromium and its driver for the browser tests (tests/test_browser.py), when they are
# missing: `make test` runs this first. Idempotent; without root or apt-get it only says what to do.
set -u
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "warning: chromium and chromium-driver are missing (apt-get install chromium chromium-driver);" \
       "the browser tests will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends chromium chromium-driver \
  || { apt-get update && apt-get install -y --no-install-recommends chromium chromium-driver; } \
  || echo "warning: could not install chromium; the browser tests will be skipped" >&2
exit 0
