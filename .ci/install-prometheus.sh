#!/usr/bin/env bash
# install-prometheus.sh installs Debian's prometheus and prometheus-pushgateway so the push
# test (cmd/kvbench: TestPushReachesPrometheus) runs against the real components instead of
# skipping. Idempotent and quiet: it does nothing when both binaries exist, and refreshes the
# package lists once, before the install. The test starts its own daemons on free loopback
# ports; nothing here starts a service.
set -euo pipefail

log() { echo "install-prometheus: $*" >&2; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if [ -x /usr/bin/prometheus ] && [ -x /usr/bin/prometheus-pushgateway ]; then
	exit 0
fi
log "installing prometheus and prometheus-pushgateway"
export DEBIAN_FRONTEND=noninteractive
as_root apt-get update -qq >&2
as_root apt-get install -y -qq --no-install-recommends prometheus prometheus-pushgateway >&2
/usr/bin/prometheus --version >&2
/usr/bin/prometheus-pushgateway --version >&2
