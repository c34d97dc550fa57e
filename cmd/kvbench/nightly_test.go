package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// nightlyScript returns deploy/kubernetes/nightly.sh, the file the CronJob runs and
// docs/nightly.md links (without copying it: a reader follows the link to this very text).
func nightlyScript(t *testing.T) string {
	t.Helper()
	script := readDeploy(t, "kubernetes/nightly.sh")
	if !strings.HasPrefix(script, "#!/bin/sh\n") {
		t.Fatal("deploy/kubernetes/nightly.sh does not start with #!/bin/sh")
	}
	return script
}

// nightlyHarness runs the script as a user would: kvbench on PATH (this test binary,
// re-executed as kvbench), in a working directory of its own.
type nightlyHarness struct {
	t *testing.T
	// shell is the command that runs a script file: /bin/sh, or busybox sh.
	shell                  []string
	script, work, bin, key string
	scenario, results      string
	// server, when set, serves every night: a long-lived server whose caches keep what
	// earlier nights sent. Otherwise each night gets a fresh engine.
	server *sim.Server
}

func newNightlyHarness(t *testing.T, shell []string, script string) *nightlyHarness {
	t.Helper()
	h := &nightlyHarness{t: t, shell: shell, work: t.TempDir(), bin: t.TempDir(), key: "sk-nightly-test"}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(h.bin, "kvbench")); err != nil {
		t.Fatal(err)
	}
	h.script = filepath.Join(h.work, "nightly.sh")
	if err := os.WriteFile(h.script, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h.results = "results" // relative, as docs/nightly.md runs it
	return h
}

// night runs the script once against a fresh embedded engine (cold caches, a key required)
// or the harness's long-lived one
// with env and args; stdout goes to a log file opened as '> night.log' opens it. It returns
// the exit code, the log and the night's directory named in its first line.
func (h *nightlyHarness) night(env []string, args ...string) (int, string, string) {
	t := h.t
	t.Helper()
	// Requests of about a second (slowTiny): a loaded machine's lateness stays within the
	// tolerance, so a night compares as no regression.
	srv := h.server
	if srv == nil {
		srv = startSim(t, sim.Options{Profile: "tiny", APIKey: h.key, Override: slowTiny})
	}
	logPath := filepath.Join(t.TempDir(), "night.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(append([]string{}, h.shell...), h.script, "--endpoint", srv.URL()+"/v1"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = h.work
	cmd.Env = append(os.Environ(), "KVBENCH_TEST_EXEC=1", "PATH="+h.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KVBENCH_NIGHTLY_KEY="+h.key, "SCENARIO="+h.scenario, "RESULTS="+h.results, "REPEAT=2")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	runErr := cmd.Run()
	logf.Close()
	code := 0
	if ee, ok := runErr.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if runErr != nil {
		t.Fatal(runErr)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^nightly: .* in (\S+)$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("exit %d; the log names no night directory:\n%s", code, data)
	}
	return code, string(data), m[1]
}

// TestNightlyScriptAsPrinted runs deploy/kubernetes/nightly.sh, as shipped, with the shells a
// user's machine and the nightly image have, against the embedded engine: the first night has
// no baseline and says how to promote one (exit 2); its own instructions promote it; the next
// nights pass (0) with a log the script's own output never corrupts, each in its own
// directory with its own report, a rerun the same second included; a failed gate is a failed
// night (3) though compare finds nothing; the API key and the push go where they are sent.
func TestNightlyScriptAsPrinted(t *testing.T) {
	script := nightlyScript(t)
	shells := map[string][]string{"sh": {"/bin/sh"}}
	for _, bb := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(bb); err == nil {
			shells["busybox"] = []string{bb, "sh"} // the nightly image's shell
			break
		}
	}
	for name, shell := range shells {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each shell its own engines and directories; the nights mostly wait
			testNightly(t, shell, script)
		})
	}
}

func testNightly(t *testing.T, shell []string, script string) {
	h := newNightlyHarness(t, shell, script)
	// A tiny scenario file whose name gives the baseline's: baselines/nightly-tiny.
	h.scenario = filepath.Join(h.work, "nightly-tiny.toml")
	if err := os.WriteFile(h.scenario, []byte(regressionScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	baseline := filepath.Join(h.work, "baselines", "nightly-tiny")

	// 1. The first night: no baseline. The key's variable comes by flag.
	code, log, night1 := h.night(nil, "--api-key-env", "KVBENCH_NIGHTLY_KEY")
	if code != 2 || !strings.Contains(log, "no baseline at baselines/nightly-tiny") {
		t.Fatalf("first night: exit %d, want 2 naming the missing baseline:\n%s", code, log)
	}
	if _, err := os.Stat(filepath.Join(h.work, night1, "report.html")); err != nil {
		t.Errorf("first night: no report: %v", err)
	}
	promote := regexp.MustCompile(`(?m)^  (mkdir -p .* && cp -r .*)$`).FindStringSubmatch(log)
	if promote == nil {
		t.Fatalf("first night: no command to promote its run:\n%s", log)
	}
	cmd := exec.Command("/bin/sh", "-c", promote[1])
	cmd.Dir = h.work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the printed promotion %q: %v: %s", promote[1], err, out)
	}
	if _, err := runs.Load(baseline); err != nil {
		t.Fatalf("the promoted baseline: %v", err)
	}

	// 2. A night whose output is redirected to a log; the key's variable comes by environment,
	// and the run and the comparison are pushed with basic auth from two more variables.
	gw := &gateway{status: http.StatusOK}
	pg := httptest.NewServer(gw)
	defer pg.Close()
	pushEnv := []string{"API_KEY_ENV=KVBENCH_NIGHTLY_KEY", "PUSHGATEWAY=" + pg.URL, "CLUSTER=ci",
		"PUSH_USER_ENV=KVBENCH_NIGHTLY_PUSH_USER", "PUSH_PASSWORD_ENV=KVBENCH_NIGHTLY_PUSH_PASSWORD",
		"KVBENCH_NIGHTLY_PUSH_USER=ci", "KVBENCH_NIGHTLY_PUSH_PASSWORD=hunter2"}
	code, log, night2 := h.night(pushEnv)
	if code != 0 {
		t.Fatalf("second night: exit %d, want 0:\n%s", code, log)
	}
	compareMD, err := os.ReadFile(filepath.Join(h.work, night2, "compare.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(compareMD, []byte("## kvbench compare: No regression\n")) || !strings.Contains(log, string(compareMD)) {
		t.Errorf("second night: the log does not hold the comparison whole:\n%s\n--- compare.md:\n%s", log, compareMD)
	}
	if want := "nightly: no regression: see " + night2 + "/report.html\n"; !strings.HasSuffix(log, want) {
		t.Errorf("second night: the log does not end %q:\n%s", want, log)
	}
	if strings.Contains(log, "hunter2") || strings.Contains(log, h.key) {
		t.Errorf("second night: a credential in the log:\n%s", log)
	}
	paths := gw.pushes()
	_, auths, _ := gw.pushed()
	if len(paths) != 2 || !strings.HasPrefix(paths[0], "PUT /metrics/job/kvbench/") || !strings.HasPrefix(paths[1], "PUT /metrics/job/kvbench_compare/") ||
		!strings.Contains(paths[1], "/cluster/ci") || auths[0] != "ci:hunter2" || auths[1] != "ci:hunter2" {
		t.Errorf("second night's pushes %v (auth %q), want the run's and the comparison's", paths, auths)
	}
	for _, f := range []string{"report.html", "compare.md", "compare.json"} {
		if st, err := os.Stat(filepath.Join(h.work, night2, f)); err != nil || st.Mode().Perm()&0o040 == 0 {
			t.Errorf("second night's %s: %v, not readable by the group (%v)", f, err, st)
		}
	}

	// 3. A rerun at once, same day (the same second, likely): its own directory and report,
	// and a CI job summary that gets the comparison.
	summary := filepath.Join(t.TempDir(), "summary.md")
	code, log, night3 := h.night([]string{"API_KEY_ENV=KVBENCH_NIGHTLY_KEY", "GITHUB_STEP_SUMMARY=" + summary})
	if code != 0 || night3 == night2 || !strings.HasSuffix(log, "see "+night3+"/report.html\n") {
		t.Errorf("rerun: exit %d in %s (the night before: %s):\n%s", code, night3, night2, log)
	}
	if got, err := os.ReadFile(summary); err != nil || !bytes.HasPrefix(got, []byte("## kvbench compare: No regression\n")) {
		t.Errorf("rerun: the job summary holds %q (%v)", got, err)
	}
	for _, n := range []string{night2, night3} {
		if _, err := os.Stat(filepath.Join(h.work, n, "report.html")); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}

	// 4. A gate that fails (no replay is that fast): a failed night, though compare finds no
	// regression. The scenario keeps its name and prompts, so it compares with the baseline.
	if err := os.WriteFile(h.scenario, []byte(regressionScenario+"[[gate]]\nstep = \"replay\"\nmax_time_to_first_output_ms = 0.001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, log, _ = h.night([]string{"API_KEY_ENV=KVBENCH_NIGHTLY_KEY"})
	if code != 3 || !strings.Contains(log, "nightly: a gate failed") {
		t.Errorf("a failed gate: exit %d, want 3:\n%s", code, log)
	}

	// 5. Without the key the server refuses the run: not a pass, and no empty night is left.
	code, log, night5 := h.night(nil)
	if code == 0 || code == 3 || code == 4 {
		t.Errorf("no API key: exit %d:\n%s", code, log)
	}
	if _, err := os.Stat(filepath.Join(h.work, night5)); !os.IsNotExist(err) {
		t.Errorf("a night refused before it measured anything left %s: %v", night5, err)
	}

	// push's own example, on this layout, finds every night's run.
	help, _, _ := runCLI(t, "push", "-h")
	m := regexp.MustCompile(`kvbench push (results/nightly/\S+) `).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("push -h has no example on the nightly layout:\n%s", help)
	}
	// The shell expands it as the user's would: directories only, the trailing slash kept.
	glob := exec.Command("/bin/sh", "-c", `for d in `+m[1]+`; do echo "$d"; done`)
	glob.Dir = h.work
	out, err := glob.Output()
	dirs := strings.Fields(string(out))
	if err != nil || len(dirs) != 4 {
		t.Fatalf("push's example %s finds %v (%v), want the 4 runs of the nights that ran", m[1], dirs, err)
	}
	for _, d := range dirs {
		if _, err := runs.Load(filepath.Join(h.work, d)); err != nil {
			t.Errorf("push's example finds %s, no run: %v", d, err)
		}
	}
}

// TestNightlyScriptFlags: the script refuses an unknown flag and a flag without its value
// with exit 2, before it runs anything.
func TestNightlyScriptFlags(t *testing.T) {
	h := newNightlyHarness(t, []string{"/bin/sh"}, readDeploy(t, "kubernetes/nightly.sh"))
	for _, args := range [][]string{{"--nosuch", "x"}, {"--api-key-env"}} {
		cmd := exec.Command("/bin/sh", append([]string{h.script}, args...)...)
		cmd.Dir = h.work
		cmd.Env = append(os.Environ(), "PATH="+h.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), args[0]) {
			t.Errorf("%v: %v: %s", args, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(h.work, "results")); !os.IsNotExist(err) {
		t.Errorf("a refused flag left a results directory: %v", err)
	}
}

// TestNightlyScriptAsPrintedOnWarmCaches runs deploy/kubernetes/nightly.sh, as shipped,
// night after night against one long-lived embedded engine whose CPU tier (1 GiB) holds far
// more than a night sends: the same bytes a second night come back cached (the cold sequence
// stores nothing, its TTFT falls), and the night fails loudly, naming warm caches (exit 2:
// not comparable); the script's default, a random salt, sends fresh bytes of the same shapes,
// and the next night on the same warm server passes against the unsalted baseline.
func TestNightlyScriptAsPrintedOnWarmCaches(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	script := nightlyScript(t)
	h := newNightlyHarness(t, []string{"/bin/sh"}, script)
	h.server = startSim(t, sim.Options{Profile: "tiny", APIKey: h.key, Override: func(p *sim.Profile) {
		slowTiny(p)
		p.CPUOffloadGiB = 1 // 524,288 tokens: every night's prompts stay
	}})
	h.scenario = filepath.Join(h.work, "nightly-tiny.toml")
	if err := os.WriteFile(h.scenario, []byte(regressionScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	key := "API_KEY_ENV=KVBENCH_NIGHTLY_KEY"

	// The first night, unsalted (SALT set and empty: the scenario's own prompts), is the
	// baseline.
	code, log, night1 := h.night([]string{key, "SALT="})
	promote := regexp.MustCompile(`(?m)^  (mkdir -p .* && cp -r .*)$`).FindStringSubmatch(log)
	if code != 2 || promote == nil {
		t.Fatalf("first night: exit %d:\n%s", code, log)
	}
	if out, err := exec.Command("/bin/sh", "-c", "cd "+h.work+" && "+promote[1]).CombinedOutput(); err != nil {
		t.Fatalf("promotion: %v: %s", err, out)
	}
	if r := loadNight(t, h, night1); r.Scenario.Prompt.Salt != "" || len(r.WarmFindings()) != 0 {
		t.Fatalf("first night: salt %q, warm %q", r.Scenario.Prompt.Salt, r.WarmFindings())
	}

	// The same bytes again on the same server: warm caches, said by the run, its record and
	// compare, and the night fails.
	code, log, night2 := h.night([]string{key, "SALT="})
	for _, want := range []string{
		"WARM CACHES: warm caches: step sequence is a cold sequence, yet 3 of its 3 requests came back",
		"measured warm caches, so the runs are not comparable: warm caches: step sequence",
		"nightly: compare failed (exit 2)", "Warm caches: the server still held these prompts; restart it, or leave SALT at random.",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("warm night: the log lacks %q", want)
		}
	}
	if code != 2 || strings.Contains(log, "no regression") {
		t.Fatalf("warm night: exit %d, want 2 (not comparable):\n%s", code, log)
	}
	r := loadNight(t, h, night2)
	rp := r.Replay("replay")
	if seq := r.Sequence("sequence"); seq.WarmCaches == nil || seq.WarmCaches.Requests != 3 || seq.StoreProven {
		t.Errorf("warm night: sequence %+v, store proven %v", seq.WarmCaches, seq.StoreProven)
	}
	if rp.SetupValid != "no" || !strings.HasPrefix(rp.SetupReason, "warm caches: ") {
		t.Errorf("warm night: replay setup %s: %s", rp.SetupValid, rp.SetupReason)
	}

	// The script's default salt: fresh bytes of the same shapes on the same warm server, cold
	// again, compared with the unsalted baseline by shape.
	code, log, night3 := h.night([]string{key})
	if code != 0 || !strings.Contains(log, "Prompts: the runs sent fresh bytes of the same shapes (prompt salt: baseline none, candidate ") || strings.Contains(log, "WARM CACHES") {
		t.Fatalf("salted night: exit %d, want 0 compared by shape:\n%s", code, log)
	}
	r = loadNight(t, h, night3)
	if salt := r.Scenario.Prompt.Salt; !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(salt) || !strings.Contains(log, "salt random, in "+night3) {
		t.Errorf("salted night: salt %q", salt)
	}
	if seq := r.Sequence("sequence"); seq.WarmCaches != nil || !seq.StoreProven || r.Replay("replay").Verdict != "cpu_reload" {
		t.Errorf("salted night: warm %+v, store %v, replay %s", seq.WarmCaches, seq.StoreProven, r.Replay("replay").Verdict)
	}
}

// loadNight loads the one run of a night's directory.
func loadNight(t *testing.T, h *nightlyHarness, night string) *runs.Run {
	t.Helper()
	dirs := runDirs(t, filepath.Join(h.work, night))
	if len(dirs) != 1 {
		t.Fatalf("%s holds runs %v", night, dirs)
	}
	r, err := runs.Load(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNightlyScriptLeavesNothingWhereKvbenchRefuses: RESULTS inside a run directory is
// refused by kvbench; the directories the script made for the night are removed again, so
// the run directory is as it was.
func TestNightlyScriptLeavesNothingWhereKvbenchRefuses(t *testing.T) {
	h := newNightlyHarness(t, []string{"/bin/sh"}, readDeploy(t, "kubernetes/nightly.sh"))
	h.scenario = "smoke"
	runDir := filepath.Join(h.work, "old-run")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(runDir, "run.json"), []byte(`{"schema": "anvil-serving.kv-offload-replay/v1", "status": "completed"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	h.results = filepath.Join(runDir, "inner")
	code, log, _ := h.night(nil)
	if code != cli.ExitUsage || !strings.Contains(log, "inside a kvbench run directory") {
		t.Fatalf("exit %d, want %d refusing the run directory:\n%s", code, cli.ExitUsage, log)
	}
	entries, err := os.ReadDir(runDir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "run.json" {
		t.Errorf("the run directory holds %v (%v), want run.json alone", entries, err)
	}
}

// TestNightlyScriptPassesTERMOn: the script is PID 1 of the CronJob's container, where a
// signal without a handler does nothing; a TERM to it (Kubernetes' stop) reaches kvbench,
// whose run ends interrupted with its records, and the interrupted run is pushed.
func TestNightlyScriptPassesTERMOn(t *testing.T) {
	h := newNightlyHarness(t, []string{"/bin/sh"}, readDeploy(t, "kubernetes/nightly.sh"))
	h.scenario = filepath.Join(h.work, "nightly-tiny.toml")
	if err := os.WriteFile(h.scenario, []byte(regressionScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := &gateway{status: http.StatusOK}
	pg := httptest.NewServer(gw)
	defer pg.Close()
	// The run's second request waits at a gate until the TERM is sent: the run is mid-way
	// however loaded the machine is.
	g := startGate(t, startSim(t, sim.Options{Profile: "tiny", Override: slowTiny}), preflightChats+1)
	cmd := exec.Command("/bin/sh", h.script, "--endpoint", g.URL()+"/v1")
	cmd.Dir = h.work
	cmd.Env = append(os.Environ(), "KVBENCH_TEST_EXEC=1", "PATH="+h.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SCENARIO="+h.scenario, "RESULTS=results", "REPEAT=2", "PUSHGATEWAY="+pg.URL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Once the run directory exists, kvbench is measuring. It is made under a hidden staging
	// name and renamed into place (Glob's * matches a leading dot): only the final one counts.
	var runJSON []string
	for deadline := time.Now().Add(2 * time.Minute); len(runJSON) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		runJSON = finalRunFiles(t, filepath.Join(h.work, "results", "nightly"))
	}
	if len(runJSON) != 1 {
		cmd.Process.Kill()
		t.Fatalf("no run directory appeared: %v", runJSON)
	}
	g.waitHeld(t)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("the script did not stop on TERM:\n%s", out.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitRuntime {
		t.Errorf("exit %v, want %d:\n%s", err, cli.ExitRuntime, out.String())
	}
	data, rerr := os.ReadFile(runJSON[0])
	var rec struct{ Status string }
	if rerr != nil || json.Unmarshal(data, &rec) != nil || rec.Status != "interrupted" {
		t.Errorf("run.json status %q (%v), want interrupted:\n%s", rec.Status, rerr, out.String())
	}
	if paths := gw.pushes(); len(paths) != 1 || !strings.HasPrefix(paths[0], "PUT /metrics/job/kvbench/") {
		t.Errorf("pushes %v, want the interrupted run's:\n%s", paths, out.String())
	}
}

// finalRunFiles lists the run.json files of the run directories under dir/*/, leaving out the
// hidden directories a run is staged in before it is renamed into place.
func finalRunFiles(t *testing.T, dir string) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(dir, "*", "*", "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range all {
		if !strings.HasPrefix(filepath.Base(filepath.Dir(p)), ".") {
			out = append(out, p)
		}
	}
	return out
}
