#!/usr/bin/env bash
# install-busybox.sh installs Debian's busybox so the nightly script's test
# (cmd/kvbench: TestNightlyScriptAsPrinted) runs it with busybox sh too, the shell of the
# nightly image (distroless's debug variant), beside /bin/sh. Idempotent and quiet.
set -euo pipefail

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if [ -x /bin/busybox ] || [ -x /usr/bin/busybox ]; then
	exit 0
fi
echo "install-busybox: installing busybox" >&2
export DEBIAN_FRONTEND=noninteractive
as_root apt-get update -qq >&2
as_root apt-get install -y -qq --no-install-recommends busybox >&2
