#!/bin/sh
# kvbench nightly capacity regression: run a scenario with repeats, compare it with the
# baseline, keep the report. POSIX sh (the CronJob runs it with the image's busybox sh).
#
# Settings, from the environment or from the flag of the same name (--scenario, --endpoint,
# --baseline, --results, --repeat, --salt, --api-key-env, --pushgateway, --cluster,
# --push-user-env, --push-password-env):
#   SCENARIO     a built-in scenario name or a scenario file (required)
#   ENDPOINT     the server's OpenAI-compatible base URL, ending in /v1 (required)
#   BASELINE     the baseline run directory (default: baselines/<scenario's file name>)
#   RESULTS      where the nights go, each in RESULTS/nightly/<UTC time>/ (default: results)
#   REPEAT       repetitions of the steps (default: 3)
#   SALT         the prompt salt (default: random, fresh bytes of the same shapes each night,
#                so a server's caches cannot hold them from an earlier night; empty: the
#                scenario's own, which a long-lived server may still hold: a warm night)
#   API_KEY_ENV  the environment variable holding the server's API key (default: no key)
#   PUSHGATEWAY  push the run and the comparison to this Pushgateway (default: no push)
#   CLUSTER      the push label telling this fleet's runs apart (default: default)
#   PUSH_USER_ENV, PUSH_PASSWORD_ENV  the variables holding the Pushgateway's basic auth
# Exit code: 0 no regression; 4 a regression; 3 a gate failed; 5 a push failed (the run is
# kept); 2 no baseline yet (the message says how to promote this night's run) or runs that
# are not comparable (a changed scenario or model, or warm caches); anything else, broken.
# A regression outranks a failed gate, which outranks a failed push.
set -u

while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || {
		echo "nightly.sh: $1 needs a value" >&2
		exit 2
	}
	case $1 in
	--scenario) SCENARIO=$2 ;;
	--endpoint) ENDPOINT=$2 ;;
	--baseline) BASELINE=$2 ;;
	--results) RESULTS=$2 ;;
	--repeat) REPEAT=$2 ;;
	--salt) SALT=$2 ;;
	--api-key-env) API_KEY_ENV=$2 ;;
	--pushgateway) PUSHGATEWAY=$2 ;;
	--cluster) CLUSTER=$2 ;;
	--push-user-env) PUSH_USER_ENV=$2 ;;
	--push-password-env) PUSH_PASSWORD_ENV=$2 ;;
	*)
		echo "nightly.sh: unknown flag $1" >&2
		exit 2
		;;
	esac
	shift 2
done
: "${SCENARIO:?set SCENARIO (or --scenario): a built-in scenario name or a scenario file}"
: "${ENDPOINT:?set ENDPOINT (or --endpoint): the server's OpenAI-compatible base URL, ending in /v1}"
BASELINE=${BASELINE:-baselines/$(basename "$SCENARIO" .toml)}
RESULTS=${RESULTS:-results}
REPEAT=${REPEAT:-3}
SALT=${SALT-random} # set and empty: no salt
CLUSTER=${CLUSTER:-default}

# Each night, a rerun the same day included, gets a directory of its own. What this makes
# and kvbench refuses (RESULTS inside a run directory) is removed again.
made=
[ -d "$RESULTS" ] || made=$RESULTS
[ -d "$RESULTS/nightly" ] || made="$RESULTS/nightly${made:+
$made}"
mkdir -p "$RESULTS/nightly" || exit 1
stamp=$(date -u +%Y%m%dT%H%M%SZ)
NIGHT=$RESULTS/nightly/$stamp
n=1
while ! mkdir "$NIGHT" 2>/dev/null; do
	n=$((n + 1))
	[ "$n" -le 100 ] || {
		echo "nightly: cannot create a directory for this night in $RESULTS/nightly" >&2
		exit 1
	}
	NIGHT=$RESULTS/nightly/$stamp-$n
done

# The push flags, shared by run and compare.
set --
if [ -n "${PUSHGATEWAY:-}" ]; then
	set -- --push "$PUSHGATEWAY" --push-label "cluster=$CLUSTER"
	if [ -n "${PUSH_USER_ENV:-}${PUSH_PASSWORD_ENV:-}" ]; then
		set -- "$@" --push-user-env "${PUSH_USER_ENV:-}" --push-password-env "${PUSH_PASSWORD_ENV:-}"
	fi
fi

echo "nightly: $SCENARIO, $REPEAT repetitions${SALT:+, salt $SALT}, in $NIGHT" # not the URLs: they may hold credentials
# kvbench runs in the background so that a TERM or INT to this script (PID 1 in the
# CronJob's container, which gets no default action) reaches it: it then stops as on Ctrl-C,
# its records written and the run interrupted. wait returns early on a trapped signal, so it
# is called until kvbench is gone.
stopped=
kvbench run "$SCENARIO" --endpoint "$ENDPOINT" --repeat "$REPEAT" --out "$NIGHT" \
	${SALT:+--salt "$SALT"} ${API_KEY_ENV:+--api-key-env "$API_KEY_ENV"} "$@" &
run_pid=$!
trap 'stopped=TERM; kill -TERM "$run_pid" 2>/dev/null' TERM
trap 'stopped=INT; kill -INT "$run_pid" 2>/dev/null' INT
wait "$run_pid"
run_rc=$?
while kill -0 "$run_pid" 2>/dev/null; do
	wait "$run_pid"
	run_rc=$?
done
trap - TERM INT
CANDIDATE=
for dir in "$NIGHT"/*/; do
	[ -f "$dir/run.json" ] && CANDIDATE=${dir%/}
done
if [ -n "$stopped" ]; then
	echo "nightly: stopped by SIG$stopped (exit $run_rc)${CANDIDATE:+; what it measured is in $CANDIDATE}"
	if [ -n "$CANDIDATE" ] && [ -n "${PUSHGATEWAY:-}" ]; then
		shift 2 # kvbench push takes the URL as an argument, not --push
		kvbench push "$CANDIDATE" "$PUSHGATEWAY" --allow-incomplete "$@"
	fi
	exit "$run_rc"
fi
case $run_rc in
0 | 3 | 5) ;; # the records are written: compare them
*)
	echo "nightly: the run failed (exit $run_rc)${CANDIDATE:+; what it measured is in $CANDIDATE}"
	if [ -z "$CANDIDATE" ]; then # refused before it measured anything
		rmdir "$NIGHT" 2>/dev/null
		printf '%s\n' "$made" | while IFS= read -r dir; do
			[ -z "$dir" ] || rmdir "$dir" 2>/dev/null
		done
	fi
	exit "$run_rc"
	;;
esac
[ -n "$CANDIDATE" ] || {
	echo "nightly: no run directory in $NIGHT"
	exit 1
}

if [ ! -f "$BASELINE/run.json" ]; then
	kvbench report "$CANDIDATE" -o "$NIGHT/report.html" || echo "nightly: the report failed (kept going)"
	chmod g+r "$NIGHT/report.html" 2>/dev/null
	echo "nightly: no baseline at $BASELINE, so nothing to compare this first night with."
	echo "Check this night's report, $NIGHT/report.html. If its run is the normal later nights"
	echo "should be held to, make it the baseline, whole (run.json and every artifact):"
	echo "  mkdir -p \"$(dirname "$BASELINE")\" && cp -r \"$CANDIDATE\" \"$BASELINE\""
	echo "and keep it in version control; in deploy/kubernetes' CronJob, promote it onto the"
	echo "baseline volume with the promote Job (docs/nightly.md, \"Promoting a baseline\"), NIGHT=$(basename "$NIGHT")."
	[ "$run_rc" -eq 0 ] || echo "nightly: the run itself exited $run_rc (3: a gate failed, 5: a push failed)"
	exit 2
fi

kvbench compare "$BASELINE" "$CANDIDATE" --format markdown "$@" >"$NIGHT/compare.md"
compare_rc=$?
kvbench compare "$BASELINE" "$CANDIDATE" --format json >"$NIGHT/compare.json"
kvbench report "$BASELINE" "$CANDIDATE" -o "$NIGHT/report.html" || echo "nightly: the report failed (kept going)"
# Readable by the group (the CronJob's fsGroup), so another pod of the group can copy them.
chmod g+r "$NIGHT/compare.md" "$NIGHT/compare.json" "$NIGHT/report.html" 2>/dev/null
cat "$NIGHT/compare.md"
# A CI job's summary, where there is one; never /dev/stdout, which a redirected log would
# have reopened and overwritten.
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
	cat "$NIGHT/compare.md" >>"$GITHUB_STEP_SUMMARY"
fi

case $compare_rc in
0 | 5) ;;
4)
	echo "nightly: capacity regression: see $NIGHT/report.html"
	exit 4
	;;
*)
	echo "nightly: compare failed (exit $compare_rc): $BASELINE and $CANDIDATE do not compare (compare says why, above)."
	echo "Warm caches: the server still held these prompts; restart it, or leave SALT at random."
	echo "A scenario or model changed on purpose: promote a new baseline."
	exit "$compare_rc"
	;;
esac
if [ "$run_rc" -eq 3 ]; then
	echo "nightly: a gate failed: see the run's output above and $NIGHT/report.html"
	exit 3
fi
if [ "$run_rc" -eq 5 ] || [ "$compare_rc" -eq 5 ]; then
	echo "nightly: a push failed; the records are kept (retry: kvbench push $CANDIDATE PUSHGATEWAY_URL --push-label cluster=$CLUSTER)"
	exit 5
fi
echo "nightly: no regression: see $NIGHT/report.html"
exit 0
