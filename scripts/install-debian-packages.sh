#!/usr/bin/env bash
# Debian packages the project needs beside its Python ones, when they are missing: `make install`
# brings bubblewrap (each runner's box), `make test` Chromium and its driver (the browser tests).
# Usage: install-debian-packages.sh "what happens without them" PACKAGE:COMMAND...
# Idempotent; without root or apt-get it only says what to do.
set -u
without=$1
shift
missing=()
for spec in "$@"; do
  command -v "${spec#*:}" >/dev/null || missing+=("${spec%%:*}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "warning: ${missing[*]} missing (apt-get install ${missing[*]}): $without" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" \
  || { apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; } \
  || echo "warning: could not install ${missing[*]}: $without" >&2
exit 0
