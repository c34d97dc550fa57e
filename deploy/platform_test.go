package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "rewrite prometheus/prometheusrule.yaml from kvbench-alerts.yaml")

// prometheusRule is the part of prometheus-operator's PrometheusRule (monitoring.coreos.com/v1)
// the kustomization writes; strict decoding refuses any other field.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec ruleFile `json:"spec"`
}

// ruleFile is a Prometheus rule file, which is also a PrometheusRule's spec.
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// ruleManifest wraps the alert rules file (its groups, from "groups:" on) in a
// PrometheusRule, so the file promtool tests stays the one source.
func ruleManifest(alerts []byte) []byte {
	_, groups, _ := bytes.Cut(alerts, []byte("\ngroups:\n"))
	var b bytes.Buffer
	b.WriteString(`# Generated from kvbench-alerts.yaml (go test ./deploy -run TestPrometheusRule -update):
# edit that file, which promtool checks and tests, not this one. prometheus-operator loads it
# when its Prometheus's ruleSelector matches these labels (add yours, e.g. release: NAME).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: kvbench
  labels:
    app.kubernetes.io/name: kvbench
spec:
  groups:
`)
	for _, line := range strings.SplitAfter(string(groups), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// TestPrometheusRuleIsTheAlertRules: the kustomization renders a PrometheusRule whose groups
// are kvbench-alerts.yaml's, byte for byte as generated and equal once decoded.
func TestPrometheusRuleIsTheAlertRules(t *testing.T) {
	alerts := mustRead(t, "prometheus/kvbench-alerts.yaml")
	want := ruleManifest(alerts)
	if *update {
		if err := os.WriteFile("prometheus/prometheusrule.yaml", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustRead(t, "prometheus/prometheusrule.yaml"); !bytes.Equal(got, want) {
		t.Fatal("prometheus/prometheusrule.yaml is not generated from kvbench-alerts.yaml: go test ./deploy -run TestPrometheusRule -update")
	}
	var file ruleFile
	strict(t, "prometheus/kvbench-alerts.yaml", alerts, &file)
	objs := build(t, "kubernetes")
	var pr prometheusRule
	strict(t, "PrometheusRule/kvbench", objs["PrometheusRule/kvbench"], &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s %s", pr.APIVersion, pr.Kind)
	}
	if len(file.Groups) == 0 || len(file.Groups[0].Rules) == 0 || !reflect.DeepEqual(pr.Spec, file) {
		t.Errorf("the PrometheusRule's groups differ from kvbench-alerts.yaml's (%d groups)", len(file.Groups))
	}
	// A changed rule is caught: the check can fail.
	changed := bytes.Replace(alerts, []byte("kvbench_gate_passed == 0"), []byte("kvbench_gate_passed == 1"), 1)
	if bytes.Equal(ruleManifest(changed), want) {
		t.Error("a changed alert rule leaves the manifest equal")
	}
}

// TestDashboardConfigMap: the kustomization renders the dashboard as a ConfigMap labelled
// for Grafana's sidecar, holding deploy/grafana's JSON unchanged.
func TestDashboardConfigMap(t *testing.T) {
	objs := build(t, "kubernetes")
	var cm corev1.ConfigMap
	strict(t, "ConfigMap/kvbench-dashboard", objs["ConfigMap/kvbench-dashboard"], &cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v: want grafana_dashboard: \"1\" (the sidecar's default label)", cm.Labels)
	}
	dash := mustRead(t, "grafana/kvbench-dashboard.json")
	if cm.Data["kvbench-dashboard.json"] != string(dash) || !json.Valid(dash) {
		t.Error("the ConfigMap does not hold grafana/kvbench-dashboard.json")
	}
	// kubectl apply (client side) keeps the object in an annotation of at most 256 KiB.
	if len(dash) > 200<<10 {
		t.Errorf("the dashboard is %d bytes: too big for kubectl apply's annotation", len(dash))
	}
}

// TestPromoteJob: the promote Job runs promote.sh from its ConfigMap on the nightly's image,
// reads the results volume read-only and writes the baseline volume the CronJob reads from.
func TestPromoteJob(t *testing.T) {
	objs := build(t, "kubernetes/promote")
	var job batchv1.Job
	strict(t, "Job/kvbench-promote-baseline", objs["Job/kvbench-promote-baseline"], &job)
	var cm corev1.ConfigMap
	strict(t, "ConfigMap/kvbench-promote", objs["ConfigMap/kvbench-promote"], &cm)
	if cm.Data["promote.sh"] != string(mustRead(t, "kubernetes/promote/promote.sh")) {
		t.Error("the kvbench-promote ConfigMap does not hold promote.sh")
	}
	var raw batchv1.Job
	strict(t, "kubernetes/promote/job.yaml", mustRead(t, "kubernetes/promote/job.yaml"), &raw)

	nightly := build(t, "kubernetes")
	var cj batchv1.CronJob
	strict(t, "CronJob/kvbench-nightly", nightly["CronJob/kvbench-nightly"], &cj)
	var bpvc corev1.PersistentVolumeClaim
	strict(t, "PersistentVolumeClaim/kvbench-baseline", nightly["PersistentVolumeClaim/kvbench-baseline"], &bpvc)
	nc := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]

	pod := job.Spec.Template.Spec
	if len(pod.Containers) != 1 || pod.Containers[0].Image != nc.Image {
		t.Fatalf("promote containers %+v: want one, on the nightly's image %s", pod.Containers, nc.Image)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.SecurityContext == nil || pod.SecurityContext.RunAsUser == nil ||
		cj.Spec.JobTemplate.Spec.Template.Spec.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser != *cj.Spec.JobTemplate.Spec.Template.Spec.SecurityContext.RunAsUser {
		t.Error("the promote Job mounts a token or runs as another user than the nightly")
	}
	c := pod.Containers[0]
	if c.Command[len(c.Command)-1] != "/etc/kvbench/promote.sh" {
		t.Errorf("command %v", c.Command)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	env := envOf(c)
	nenv := envOf(nc)
	if v := vols["results"].PersistentVolumeClaim; v == nil || v.ClaimName != "kvbench-results" || !v.ReadOnly || !mounts["results"].ReadOnly || mounts["results"].MountPath != env["RESULTS"].Value {
		t.Errorf("results %+v at %+v: want kvbench-results, read-only, at RESULTS", vols["results"], mounts["results"])
	}
	if v := vols["baseline"].PersistentVolumeClaim; v == nil || v.ClaimName != bpvc.Name || v.ReadOnly || mounts["baseline"].ReadOnly {
		t.Errorf("baseline %+v: want %s, writable", vols["baseline"], bpvc.Name)
	}
	if env["BASELINE"].Value != nenv["BASELINE"].Value || !strings.HasPrefix(env["BASELINE"].Value, mounts["baseline"].MountPath+"/") {
		t.Errorf("promote writes BASELINE %q under %q; the nightly reads %q", env["BASELINE"].Value, mounts["baseline"].MountPath, nenv["BASELINE"].Value)
	}
	// The nightly reads the same claim, read-only, where BASELINE lives.
	nvols := map[string]corev1.Volume{}
	for _, v := range cj.Spec.JobTemplate.Spec.Template.Spec.Volumes {
		nvols[v.Name] = v
	}
	var nm corev1.VolumeMount
	for _, m := range nc.VolumeMounts {
		if m.Name == "baseline" {
			nm = m
		}
	}
	if v := nvols["baseline"].PersistentVolumeClaim; v == nil || v.ClaimName != bpvc.Name || !v.ReadOnly || !nm.ReadOnly || !strings.HasPrefix(nenv["BASELINE"].Value, nm.MountPath+"/") {
		t.Errorf("the nightly's baseline %+v at %+v: want %s read-only, holding BASELINE", nvols["baseline"], nm, bpvc.Name)
	}
	if rr := kustomization(t, "kubernetes/promote"); !reflect.DeepEqual(rr.Images, kustomization(t, "kubernetes").Images) {
		t.Errorf("promote's images %v differ from the nightly's", rr.Images)
	}
}

// TestPromoteScript runs promote.sh on a results tree: the latest night with a run is copied
// whole, replacing the old baseline, and logged; a night without one run is refused.
func TestPromoteScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	results, baseline := filepath.Join(dir, "results"), filepath.Join(dir, "baseline", "run")
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(results, "nightly/20261130T020000Z/smoke-a/run.json"), "old")
	write(filepath.Join(results, "nightly/20261201T020000Z/smoke-b/run.json"), "new")
	write(filepath.Join(results, "nightly/20261201T020000Z/smoke-b/artifacts/step.json"), "step")
	write(filepath.Join(results, "nightly/20261201T020000Z-2/compare.md"), "a night whose run failed")
	write(filepath.Join(results, "nightly/20261202T020000Z/a/run.json"), "1")
	write(filepath.Join(results, "nightly/20261202T020000Z/b/run.json"), "2")
	write(filepath.Join(baseline, "run.json"), "before")
	write(filepath.Join(baseline, "stale.json"), "from the old baseline")
	promote := func(night, reason string) (string, int) {
		cmd := exec.Command(sh, "kubernetes/promote/promote.sh")
		cmd.Env = append(os.Environ(), "RESULTS="+results, "BASELINE="+baseline, "NIGHT="+night, "REASON="+reason)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	// Two runs in the newest night: refused, the baseline untouched.
	if out, code := promote("latest", "engine v0.12"); code != 2 || !strings.Contains(out, "2 runs") {
		t.Errorf("latest with two runs: exit %d: %s", code, out)
	}
	if out, code := promote("20261201T020000Z-2", "x"); code != 2 || !strings.Contains(out, "0 runs") {
		t.Errorf("a night without a run: exit %d: %s", code, out)
	}
	if out, code := promote("20261203T020000Z", "x"); code != 2 || !strings.Contains(out, "no night") {
		t.Errorf("a missing night: exit %d: %s", code, out)
	}
	if out, code := promote("20261201T020000Z", ""); code == 0 {
		t.Errorf("no reason: exit 0: %s", out)
	}
	if got := string(mustRead(t, filepath.Join(baseline, "run.json"))); got != "before" {
		t.Fatalf("a refused promotion changed the baseline: %q", got)
	}
	out, code := promote("20261201T020000Z", "engine v0.12")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if got := string(mustRead(t, filepath.Join(baseline, "run.json"))); got != "new" {
		t.Errorf("baseline run.json %q, want the night's", got)
	}
	if got := string(mustRead(t, filepath.Join(baseline, "artifacts/step.json"))); got != "step" {
		t.Errorf("artifact %q", got)
	}
	if _, err := os.Stat(filepath.Join(baseline, "stale.json")); err == nil {
		t.Error("the old baseline's files survive the promotion")
	}
	if log := string(mustRead(t, filepath.Join(dir, "baseline", "promotions.log"))); !strings.Contains(log, "smoke-b\tengine v0.12") {
		t.Errorf("promotions.log %q", log)
	}
	// latest skips nights without a run: remove the two-run night and promote again.
	if err := os.RemoveAll(filepath.Join(results, "nightly/20261202T020000Z")); err != nil {
		t.Fatal(err)
	}
	if out, code := promote("latest", "again"); code != 0 || !strings.Contains(out, "20261201T020000Z/smoke-b") {
		t.Errorf("latest: exit %d: %s", code, out)
	}
}
