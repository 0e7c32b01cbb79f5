#!/usr/bin/env bash
# bubblewrap, which builds each runner's box (docs/security.md), when it is missing: `make install`
# runs this. Idempotent; without root or apt-get it only says what to do. Without bubblewrap a
# worker refuses repository code and `gradci check` runs the developer's own code unboxed.
set -u
if command -v bwrap >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "warning: bubblewrap is missing (apt-get install bubblewrap): workers will refuse repository" \
       "code and the box's tests will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends bubblewrap \
  || { apt-get update && apt-get install -y --no-install-recommends bubblewrap; } \
  || echo "warning: could not install bubblewrap; workers will refuse repository code" >&2
exit 0
