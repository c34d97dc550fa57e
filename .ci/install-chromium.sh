#!/usr/bin/env bash
# install-chromium.sh installs Debian's chromium so the HTML report test
# (cmd/kvbench: TestReportRendersInChromium) renders the report headless instead of skipping.
# Idempotent and quiet: it does nothing when /usr/bin/chromium exists, and refreshes the
# package lists only when there are none or the install cannot find the package. See issue 7.
set -euo pipefail

log() { echo "install-chromium: $*" >&2; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if [ -x /usr/bin/chromium ]; then
	exit 0
fi
log "installing chromium"
export DEBIAN_FRONTEND=noninteractive
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
	as_root apt-get update -qq >&2
fi
if ! as_root apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1; then
	as_root apt-get update -qq >&2
	as_root apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
fi
/usr/bin/chromium --version >&2
