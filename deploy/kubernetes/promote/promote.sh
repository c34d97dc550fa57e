#!/bin/sh
# Promote a night's run to the baseline: copy it, whole (run.json and every artifact, whose
# sha256 sums compare checks), to BASELINE, replacing the one there only once the copy is
# complete, and log the promotion beside it. POSIX sh (the Job runs it with busybox sh).
#   NIGHT     the night's directory name under RESULTS/nightly (default: latest, the
#             newest night that holds a run)
#   REASON    why this run is the new normal (required: it goes in the log)
#   RESULTS   the nights' volume (default: /results)
#   BASELINE  the baseline run directory (default: /baseline/run)
# Exit code: 0 promoted; 2 no such night, or a night without exactly one run.
set -eu
: "${REASON:?set REASON: why this night is the new baseline (engine v0.12, recipe X)}"
RESULTS=${RESULTS:-/results}
BASELINE=${BASELINE:-/baseline/run}
NIGHT=${NIGHT:-latest}

# runs_in prints the run directories (those holding a run.json) of night $1.
runs_in() {
	for dir in "$RESULTS/nightly/$1"/*/; do
		[ -f "$dir/run.json" ] && printf '%s\n' "${dir%/}"
	done
	return 0
}

if [ "$NIGHT" = latest ]; then
	NIGHT=
	# Night names are UTC times (a same-day rerun adds -N), so they sort by time.
	for name in $(ls "$RESULTS/nightly" 2>/dev/null | sort); do
		[ -z "$(runs_in "$name")" ] || NIGHT=$name
	done
	[ -n "$NIGHT" ] || {
		echo "promote: no night in $RESULTS/nightly holds a run" >&2
		exit 2
	}
fi
[ -d "$RESULTS/nightly/$NIGHT" ] || {
	echo "promote: no night $NIGHT in $RESULTS/nightly" >&2
	exit 2
}
runs=$(runs_in "$NIGHT")
[ -n "$runs" ] && [ "$(printf '%s\n' "$runs" | wc -l)" -eq 1 ] || {
	echo "promote: night $NIGHT holds $(printf '%s' "$runs" | grep -c .) runs, want one" >&2
	exit 2
}

rm -rf "$BASELINE.new" "$BASELINE.old"
cp -r "$runs" "$BASELINE.new"
[ ! -e "$BASELINE" ] || mv "$BASELINE" "$BASELINE.old"
mv "$BASELINE.new" "$BASELINE"
rm -rf "$BASELINE.old"
printf '%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$runs" "$REASON" >>"$(dirname "$BASELINE")/promotions.log"
echo "promote: $runs is the baseline now ($BASELINE): $REASON"
