package report

// pageTemplate is the whole page. Everything it needs is inline: a system font stack, no
// external fonts, scripts or images, so it reads the same offline years later.
const pageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px; color: #222; background: #fff; max-width: 1200px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #666; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.v-cpu_reload { color: #1a7f37; font-weight: 600; }
.v-recompute, .v-invalid, .regression { color: #c62828; font-weight: 600; }
.v-gpu_hit, .v-partial { color: #9a6700; font-weight: 600; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 12px; }
svg.chart { width: 100%; height: auto; border: 1px solid #eee; background: #fcfcfc; }
svg .title { font-size: 13px; font-weight: 600; fill: #333; }
svg .xl, svg .yl, svg .lg { font-size: 10px; fill: #555; }
svg .na { font-size: 10px; fill: #999; }
svg .grid { stroke: #e6e6e6; stroke-width: 1; }
.interp { font-size: 13px; color: #333; max-width: 1100px; }
#kvbench-status { color: #999; font-size: 11px; }
.study { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 16px; }
.study-run { border: 1px solid #ddd; padding: 4px 12px; }
.answer { font-size: 20px; font-weight: 700; padding: 8px 14px; margin: 12px 0 6px; border-radius: 4px; display: inline-block; }
.answer.pass { background: #e6f4ea; color: #1a7f37; }
.answer.fail { background: #fdecea; color: #c62828; }
td.passed { color: #1a7f37; font-weight: 600; }
td.failed { color: #c62828; font-weight: 600; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="meta">generated {{.Generated}} by kvbench report from the runs' step artifacts; no network is needed to view this page.</p>
{{with .Answer}}<div id="answer">
<p class="answer {{if .Pass}}pass{{else}}fail{{end}}">{{if .Pass}}PASS{{else}}FAIL{{end}}</p>
<p class="meta">{{if .Gates}}{{len .Gates}} gate(s){{else}}no gates (the scenario sets none){{end}}{{if $.Comparison}}; compared with the baseline{{end}}{{if and .Pass (or .Gates $.Comparison)}}: all passed{{end}}</p>
{{if .Why}}<ul class="why">{{range .Why}}<li class="regression">{{.}}</li>{{end}}</ul>{{end}}
{{if .Gates}}<table id="gates">
<tr><th>run</th><th>gate step</th><th>condition</th><th>result</th><th>reason</th></tr>
{{range .Gates}}<tr><td class="num">{{.Run}}</td><td>{{.Step}}</td><td>{{.Gate}}</td><td class="{{if .Passed}}passed{{else}}failed{{end}}">{{if .Passed}}pass{{else}}FAIL{{end}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>{{end}}
</div>{{end}}
{{if replays .Runs}}<table id="replays">
<tr><th>run</th><th>replay step</th><th>verdict</th><th>offload gain over the cold twin</th><th>reload fidelity</th><th>reload bandwidth</th><th>setup valid</th></tr>
{{range $i, $r := .Runs}}{{range .Verdicts}}<tr><td>{{$i}}: {{$r.Scenario}}</td><td>{{.Step}}</td><td class="v-{{.Verdict}}">{{.Verdict}}</td><td>{{.Gain}}</td><td>{{.Fidelity}}</td><td>{{.Bandwidth}}</td><td>{{.SetupValid}}{{with .SetupReason}}: {{.}}{{end}}</td></tr>
{{end}}{{end}}</table>{{end}}
{{with .NotCompared}}<p class="regression" id="not-compared">{{.}}</p>{{end}}
{{with .Comparison}}
<h2>Comparison: {{if .Regression}}<span class="regression">regression ({{len .Findings}})</span>{{else}}no regression{{end}}</h2>
<p class="meta">baseline {{.Baseline.Dir}} ({{.Baseline.Repetitions}} repetition(s)) vs candidate {{.Candidate.Dir}} ({{.Candidate.Repetitions}} repetition(s)); tolerance {{pct .Tolerance}}; noise {{.Noise}}</p>
{{range .ServerChanges}}<p class="regression server-change">server changed: {{.Field}}: baseline {{.Baseline}}, candidate {{.Candidate}}</p>{{end}}
{{range .Mismatches}}<p class="regression">mismatch (allowed): {{.Field}}: baseline {{.Baseline}}, candidate {{.Candidate}}</p>{{end}}
{{if .Findings}}<ul>{{range .Findings}}<li class="regression">{{.}}</li>{{end}}</ul>{{end}}
<table id="comparison">
<tr><th>step</th><th>req</th><th>metric</th><th>baseline median</th><th>candidate median</th><th>change</th><th>threshold</th><th>status</th></tr>
{{range $st := .Steps}}{{with .Verdict}}<tr><td>{{$st.Step}}</td><td class="num">0</td><td>verdict</td><td>{{range .Baseline}}<span class="v-{{.}}">{{.}}</span> {{end}}</td><td>{{range .Candidate}}<span class="v-{{.}}">{{.}}</span> {{end}}</td><td>-</td><td>-</td><td class="{{.Status}}">{{.Status}}</td></tr>{{end}}
{{range $q := .Requests}}{{range .Metrics}}<tr><td>{{$st.Step}}</td><td class="num">{{$q.Index}}</td><td>{{.Metric}}</td><td class="num">{{median .Baseline.Median}}</td><td class="num">{{median .Candidate.Median}}</td><td class="num">{{signed .Relative}}</td><td class="num">{{pct .Threshold}}</td><td class="{{.Judgement}}">{{.Judgement}}</td></tr>
{{end}}{{end}}{{end}}
</table>
{{end}}
{{range $k, $sw := .Sweeps}}
<h2>Sweep {{.Scenario}} / {{.Step}}: capacity</h2>
<p class="meta">{{len .Levels}} level(s) of {{if eq .Load "request_rate"}}request rate{{else}}users{{end}}, status {{.Status}}{{with .StopReason}} ({{.}}){{end}}; the levels differ in load on purpose and are not compared with each other.</p>
<p class="interp" id="capacity-{{$k}}"><b>capacity:</b> {{if .CapacityUsers}}{{deref2 .CapacityUsers}} users{{else if .CapacityRequestsPerSecond}}{{median .CapacityRequestsPerSecond}} requests/s{{else}}none{{end}}{{with .CapacityReason}}: {{.}}{{end}}</p>
<table class="capacity" id="sweep-{{$k}}">
<tr><th>level</th><th>status</th><th>requests</th><th>failed</th><th>TTFT p50 ms</th><th>TTFT p90 ms</th><th>TTFT p99 ms</th><th>host share</th><th>ideal host share</th><th>within threshold{{with .TTFTP90ThresholdMS}} (p90 &le; {{median .}} ms){{end}}</th></tr>
{{range .Levels}}<tr><td>{{if .Users}}{{.Users}} users{{else}}{{median .RequestsPerSecond}} req/s{{end}}</td><td>{{.Status}}</td><td class="num">{{.Requests}}</td><td class="num">{{.FailedRequests}}</td><td class="num">{{median .TTFTMS.P50}}</td><td class="num">{{median .TTFTMS.P90}}</td><td class="num">{{median .TTFTMS.P99}}</td><td class="num">{{frac .Tiers.Host}}</td><td class="num">{{frac .IdealHostShare}}</td><td>{{if .WithinThreshold}}{{deref .WithinThreshold}}{{else}}no threshold{{end}}</td></tr>
{{end}}</table>
{{end}}
{{if eq .Kind "study"}}
<h2>Study: {{len .Runs}} runs of different scenarios, side by side</h2>
<p class="meta">The runs measured different setups on purpose (a primary run and its controls): read them together; they are no baseline and candidate.</p>
<div class="study">
{{range $i, $r := .Runs}}<div class="study-run" id="study-{{$i}}">
<h3>{{.Scenario}}{{if .StudyRole}} <span class="meta">({{.StudyRole}})</span>{{end}}</h3>
<p class="meta">{{.Dir}}, observed {{.ObservedAt}}, {{.Repetitions}} repetition(s)</p>
<table class="identity">
<tr><th>GPU KV pool</th><td class="num">{{.GPUKVTokens}} tokens</td><th>CPU tier</th><td class="num">{{.CPUOffload}} GiB</td></tr>
</table>
<table class="verdicts">
<tr><th>replay step</th><th>verdict</th><th>cached fraction</th><th>setup valid</th></tr>
{{range .Verdicts}}<tr><td>{{.Step}}</td><td class="v-{{.Verdict}}">{{.Verdict}}</td><td class="num">{{frac .CachedFraction}}</td><td>{{.SetupValid}}</td></tr>
{{else}}<tr><td colspan="4">no replay step</td></tr>{{end}}
</table>
{{range .Verdicts}}{{if .Interpretation}}<p class="interp"><b>{{.Step}}:</b> {{.Interpretation}}</p>{{end}}{{end}}
{{with .Control}}<h3>Control section {{$r.StudyKey}}</h3>
<table class="control">
<tr><th>sequence</th><td>{{.Sequence}}</td></tr>
<tr><th>replay verdict</th><td class="v-{{.ReplayVerdict}}">{{.ReplayVerdict}}</td></tr>
<tr><th>replay cached fraction</th><td class="num">{{frac .ReplayCachedFraction}}</td></tr>
<tr><th>setup valid</th><td>{{.SetupValid}}</td></tr>
<tr><th>CPU-to-GPU bytes after</th><td class="num">{{count .CPUToGPUBytesAfter}}</td></tr>
<tr><th>external prefix hits after</th><td class="num">{{count .ExternalPrefixHitsAfter}}</td></tr>
<tr><th>GPU prefix hits after</th><td class="num">{{count .GPUPrefixHitsAfter}}</td></tr>
</table>
{{/* The control's interpretation is its last replay's, printed above. */}}
{{end}}</div>
{{end}}</div>
{{end}}
{{range $i, $s := .Sets}}{{with .Run}}
<h2>{{if gt (len $.Sets) 1}}Run {{$i}}: {{end}}{{.Scenario}} <span class="meta">{{.Dir}}</span></h2>
<table class="identity">
<tr><th>observed</th><td>{{.ObservedAt}}</td><th>status</th><td>{{.Status}}</td><th>repetitions</th><td>{{.Repetitions}}</td></tr>
<tr><th>model</th><td>{{.Model}}</td><th>engine</th><td>{{.Engine}}</td><th>recipe</th><td>{{.Recipe}}</td></tr>
<tr><th>GPU KV pool</th><td class="num">{{.GPUKVTokens}} tokens</td><th>CPU tier</th><td class="num">{{.CPUOffload}} GiB</td><th></th><td></td></tr>
</table>
<h3>Verdicts</h3>
<table class="verdicts">
<tr><th>replay step</th><th>verdict</th><th>repetitions</th><th>cached fraction</th><th>setup valid</th><th>why</th></tr>
{{range .Verdicts}}<tr><td>{{.Step}}</td><td class="v-{{.Verdict}}">{{.Verdict}}</td><td>{{range .Repetitions}}<span class="v-{{.}}">{{.}}</span> {{end}}{{if not .Agree}}<span class="regression">(disagree)</span>{{end}}</td><td class="num">{{frac .CachedFraction}}</td><td>{{.SetupValid}}</td><td>{{.Reason}}</td></tr>
{{else}}<tr><td colspan="6">{{if .Traces}}a trace, no replay: its answer is its tier split against the ideal below{{else}}no replay step{{end}}</td></tr>{{end}}
</table>
<h3>Time to first output per step</h3>
<table class="step-ttft" id="step-ttft-{{$i}}">
<tr><th>step</th><th>kind</th><th>requests</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>
{{range .StepTTFT}}<tr><td>{{.Step}}</td><td>{{.Kind}}</td><td class="num">{{.TTFTMS.N}}</td><td class="num">{{median .TTFTMS.P50}}</td><td class="num">{{median .TTFTMS.P90}}</td><td class="num">{{median .TTFTMS.P99}}</td><td class="num">{{median .TTFTMS.Max}}</td></tr>
{{end}}</table>
{{range .Traces}}<h3>Trace {{.Step}}: measured tier split against the ideal</h3>
<table class="trace-split">
<tr><th></th><th>GPU share</th><th>host tier share</th><th>recomputed share</th></tr>
<tr><th>measured ({{.Requests}} requests)</th><td class="num">{{frac .Measured.GPU}}</td><td class="num">{{frac .Measured.Host}}</td><td class="num">{{frac .Measured.Recompute}}</td></tr>
{{with .Ideal}}<tr><th>ideal at the server's pool sizes</th><td class="num">{{fixed .GPUShare}}</td><td class="num">{{fixed .HostShare}}</td><td class="num">{{fixed .RecomputeShare}}</td></tr>{{else}}<tr><th>ideal</th><td colspan="3">{{.IdealUnavailable}}</td></tr>{{end}}
</table>
{{with .Finding}}<p class="interp">{{.}}</p>{{end}}
{{end}}
{{if ne $.Kind "study"}}{{/* a study printed them side by side above */}}
{{range .Verdicts}}{{if .Interpretation}}<p class="interp"><b>{{.Step}}:</b> {{.Interpretation}}</p>{{end}}{{end}}
{{end}}{{end}}
<div class="charts">
{{$s.TTFT}}
{{$s.Cached}}
{{$s.Bytes}}
{{$s.KVUsage}}
{{$s.Conversations}}
{{$s.Curves}}
</div>
{{range $s.Run.Curves}}<h3>{{curveHeading .ID}}</h3>
<p class="interp">{{.BreakEven}}</p>
<table class="curve" id="{{.ChartID}}-table">
<tr><th>prompt tokens</th><th>replay TTFT ms</th><th>cold twin TTFT ms</th><th>gain</th><th>load bytes</th><th>verdict</th><th>identical output</th><th>note</th></tr>
{{range .Points}}<tr><td class="num">{{.Tokens}}</td><td class="num">{{median .ReplayTTFTMS}}</td><td class="num">{{median .TwinTTFTMS}}</td><td class="num">{{median .Gain}}</td><td class="num">{{count .LoadBytes}}</td><td class="v-{{.Verdict}}">{{.Verdict}}</td><td>{{if .Identical}}{{deref .Identical}}{{else}}absent{{end}}</td><td>{{.Excluded}}</td></tr>
{{end}}</table>{{end}}
{{end}}
<p id="kvbench-status" data-status="pending">charts not checked (JavaScript off)</p>
<script type="application/json" id="kvbench-data">{{.Data}}</script>
<script>
(function () {
  "use strict";
  var status = document.getElementById("kvbench-status");
  var data = JSON.parse(document.getElementById("kvbench-data").textContent);
  var problems = [];
  data.runs.forEach(function (run, i) {
    // One bar per measured request, or past a few dozen one point of its step's distribution.
    var drawn = document.querySelectorAll("#ttft-" + i + " rect.bar, #ttft-" + i + " circle.pt").length;
    var measured = run.requests.filter(function (r) { return r.time_to_first_output_ms !== null; }).length;
    if (drawn !== measured) { problems.push("run " + i + ": " + drawn + " TTFT bars for " + measured + " measured requests"); }
    var pts = document.querySelectorAll("#kv-" + i + " circle.pt").length;
    if (pts !== run.kv_usage.length) { problems.push("run " + i + ": " + pts + " KV points for " + run.kv_usage.length + " samples"); }
    (run.reload_curves || []).forEach(function (c) {
      var timed = 0;
      c.points.forEach(function (p) {
        if (p.replay_time_to_first_output_ms > 0) { timed++; }
        if (p.cold_twin_time_to_first_output_ms > 0) { timed++; }
      });
      var drawn = document.querySelectorAll("#" + c.chart_id + " circle.pt").length;
      if (drawn !== timed) { problems.push("curve " + c.id + ": " + drawn + " points for " + timed + " timings"); }
    });
    (run.conversations || []).forEach(function (c) {
      var t = document.querySelectorAll("#" + c.chart_prefix + "-ttft circle.pt").length;
      if (t !== c.ttft_series.length) { problems.push(c.step + ": " + t + " TTFT points for " + c.ttft_series.length + " requests"); }
    });
  });
  status.dataset.status = problems.length ? "mismatch" : "ok";
  status.textContent = problems.length ? "chart check failed: " + problems.join("; ")
    : "kvbench-render-ok: " + data.runs.length + " run(s), charts match the embedded data";
})();
</script>
</body>
</html>
`
