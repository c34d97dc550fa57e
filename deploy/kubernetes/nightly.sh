#!/bin/sh
# nightly.sh is the README's nightly capacity regression as the CronJob runs it (busybox sh in
# the kvbench:nightly image): run the scenario with repeats and push its series, then compare
# it with the baseline. The exit code is the Job's status:
#   0 no regression, 4 a regression, 3 a gate failed, 5 the push failed (the run is kept in
#   $RESULTS; 'kvbench push' retries it), anything else: broken (2: not comparable).
# A regression outranks a failed gate, which outranks a failed push.
set -u
: "${SCENARIO:?set SCENARIO: a built-in scenario name or a scenario file}"
: "${ENDPOINT:?set ENDPOINT: the server's OpenAI-compatible base URL, ending in /v1}"
: "${PUSHGATEWAY:?set PUSHGATEWAY: the Pushgateway's base URL}"
: "${CLUSTER:?set CLUSTER: the push-label telling this fleet's runs apart}"
BASELINE=${BASELINE:-/baseline}
RESULTS=${RESULTS:-/results}
NIGHT="$RESULTS/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$NIGHT" || exit 1

kvbench run "$SCENARIO" --endpoint "$ENDPOINT" --repeat 3 --out "$NIGHT" \
	--push "$PUSHGATEWAY" --push-label cluster="$CLUSTER"
run_rc=$?
case $run_rc in
0 | 3 | 5) ;; # the records are written: compare them
*)
	echo "run failed ($run_rc)"
	exit "$run_rc"
	;;
esac
set -- "$NIGHT"/*/
CANDIDATE=$1
[ -f "$CANDIDATE/run.json" ] || {
	echo "no run directory in $NIGHT"
	exit 1
}

kvbench compare "$BASELINE" "$CANDIDATE" --format markdown >"$NIGHT/compare.md"
compare_rc=$?
cat "$NIGHT/compare.md"
kvbench report "$BASELINE" "$CANDIDATE" -o "$NIGHT/report.html" || echo "report failed (kept going)"

case $compare_rc in
0) ;;
4)
	echo "capacity regression: see $NIGHT/report.html"
	exit 4
	;;
*)
	echo "compare failed ($compare_rc)"
	exit "$compare_rc"
	;;
esac
[ "$run_rc" -eq 0 ] || echo "run exit $run_rc (3: a gate failed, 5: the push failed; retry: kvbench push $CANDIDATE PUSHGATEWAY_URL --push-label cluster=$CLUSTER)"
exit "$run_rc"
