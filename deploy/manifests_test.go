// Package deploy holds the deployment files (Kubernetes, Prometheus, Grafana) and, in its
// tests, the checks that need Kubernetes' own types: the manifests are built with kustomize's
// library, as kubectl apply -k builds them, and every object is decoded strictly into its
// k8s.io/api type, so an unknown or misspelt field fails here rather than in a cluster.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// build runs kustomize on dir as kubectl apply -k does and returns each object as YAML, by
// kind and name.
func build(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := map[string][]byte{}
	for _, r := range resMap.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		out[r.GetKind()+"/"+r.GetName()] = data
	}
	return out
}

// strict decodes data into v, refusing unknown fields and wrong types.
func strict(t *testing.T, where string, data []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

// kustomization reads dir's kustomization.yaml strictly into kustomize's own type.
func kustomization(t *testing.T, dir string) kustypes.Kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustypes.Kustomization
	strict(t, filepath.Join(dir, "kustomization.yaml"), data, &k)
	return k
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// TestManifestsAreValidKubernetesObjects builds deploy/kubernetes with kustomize, decodes
// every object strictly into its API type, and checks what the nightly needs of each: the
// CronJob keeps Forbid, backoffLimit 0, non-root, a read-only root and seccomp, mounts no
// service-account token, reads the API key and the Pushgateway's basic auth from Secrets
// (never a literal, never in the URL), runs the generated script, may mount a scenario file,
// reads the baseline from its volume, and runs the image the kustomization pins.
func TestManifestsAreValidKubernetesObjects(t *testing.T) {
	objs := build(t, "kubernetes")
	for _, want := range []string{"CronJob/kvbench-nightly", "ConfigMap/kvbench-nightly", "PersistentVolumeClaim/kvbench-results",
		"PersistentVolumeClaim/kvbench-baseline", "PrometheusRule/kvbench", "ConfigMap/kvbench-dashboard"} {
		if _, ok := objs[want]; !ok {
			t.Fatalf("kustomize build has no %s (it has %v)", want, keys(objs))
		}
	}
	var cm corev1.ConfigMap
	strict(t, "ConfigMap/kvbench-nightly", objs["ConfigMap/kvbench-nightly"], &cm)
	script, err := os.ReadFile("kubernetes/nightly.sh")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["nightly.sh"] != string(script) {
		t.Error("the kvbench-nightly ConfigMap does not hold nightly.sh")
	}
	var pvc corev1.PersistentVolumeClaim
	strict(t, "PersistentVolumeClaim/kvbench-results", objs["PersistentVolumeClaim/kvbench-results"], &pvc)

	var cj batchv1.CronJob
	strict(t, "CronJob/kvbench-nightly", objs["CronJob/kvbench-nightly"], &cj)
	job := cj.Spec.JobTemplate.Spec
	pod := job.Template.Spec
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || job.BackoffLimit == nil || *job.BackoffLimit != 0 || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("concurrency %q, backoffLimit %v, restart %q: want Forbid, 0, Never", cj.Spec.ConcurrencyPolicy, job.BackoffLimit, pod.RestartPolicy)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service-account token kvbench never uses")
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || psc.FSGroup == nil {
		t.Errorf("pod security context %+v: want non-root, RuntimeDefault seccomp, an fsGroup", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v: want a read-only root, no privilege escalation, every capability dropped", sc)
	}
	if !slices.Equal(c.Command, []string{"/busybox/sh", "/etc/kvbench/nightly.sh"}) {
		t.Errorf("command %v", c.Command)
	}

	// The image: the kustomization's entry, with a registry and an immutable pin.
	k := kustomization(t, "kubernetes")
	img := imageEntry(t, k, "kubernetes")
	if want := pinnedRef(img); c.Image != want {
		t.Errorf("built image %q, want the kustomization's %q", c.Image, want)
	}
	if rr := kustomization(t, "kubernetes/results-reader"); !slices.Equal(rr.Images, k.Images) {
		t.Errorf("results-reader's images %v differ from the nightly's %v", rr.Images, k.Images)
	}

	// Secrets by reference; the script's settings present.
	env := envOf(c)
	for name, ref := range map[string][2]string{
		"KVBENCH_API_KEY":      {"kvbench-api-key", "api-key"},
		"PUSHGATEWAY_USERNAME": {"kvbench-pushgateway", "username"},
		"PUSHGATEWAY_PASSWORD": {"kvbench-pushgateway", "password"},
	} {
		e, ok := env[name]
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != ref[0] || e.ValueFrom.SecretKeyRef.Key != ref[1] {
			t.Errorf("env %s = %+v, want secret %s key %s", name, e, ref[0], ref[1])
		}
	}
	for setting, names := range map[string]string{"API_KEY_ENV": "KVBENCH_API_KEY", "PUSH_USER_ENV": "PUSHGATEWAY_USERNAME", "PUSH_PASSWORD_ENV": "PUSHGATEWAY_PASSWORD"} {
		if env[setting].Value != names {
			t.Errorf("env %s = %q, want %q (the variable the Secret fills)", setting, env[setting].Value, names)
		}
	}
	if u := env["PUSHGATEWAY"].Value; u == "" || strings.Contains(u, "@") {
		t.Errorf("PUSHGATEWAY %q: want a URL without credentials", u)
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+):\?`).FindAllStringSubmatch(string(script), -1) {
		if env[m[1]].Value == "" {
			t.Errorf("nightly.sh requires %s; the CronJob does not set it", m[1])
		}
	}

	// Volumes: the script, an optional scenario file and baseline, the results, a /tmp.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("mount %s has no volume", m.Name)
		}
	}
	if v := vols["script"]; v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || mounts["script"].MountPath != "/etc/kvbench" {
		t.Errorf("the script volume %+v, mount %+v", v, mounts["script"])
	}
	if v := vols["scenarios"]; v.ConfigMap == nil || v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional || !mounts["scenarios"].ReadOnly {
		t.Errorf("volume scenarios %+v: want an optional ConfigMap, mounted read-only", v)
	}
	if v := vols["results"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name || mounts["results"].MountPath != env["RESULTS"].Value {
		t.Errorf("results volume %+v at %q, RESULTS %q", v, mounts["results"].MountPath, env["RESULTS"].Value)
	}
	// The baseline: a directory on the kvbench-baseline volume (read-only here; TestPromoteJob
	// checks the Job that writes it).
	if v := vols["baseline"]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "kvbench-baseline" || !mounts["baseline"].ReadOnly ||
		!strings.HasPrefix(env["BASELINE"].Value, mounts["baseline"].MountPath+"/") {
		t.Errorf("baseline %+v mounted at %q, BASELINE %q: want kvbench-baseline, read-only, holding BASELINE", v, mounts["baseline"].MountPath, env["BASELINE"].Value)
	}
	if mounts["tmp"].MountPath != "/tmp" || vols["tmp"].EmptyDir == nil {
		t.Error("no writable /tmp beside the read-only root")
	}

	// The results reader: the same image, the results read-only, no token.
	reader := build(t, "kubernetes/results-reader")
	var rp corev1.Pod
	strict(t, "Pod/kvbench-results-reader", reader["Pod/kvbench-results-reader"], &rp)
	if len(rp.Spec.Containers) != 1 || rp.Spec.Containers[0].Image != c.Image || rp.Spec.AutomountServiceAccountToken == nil || *rp.Spec.AutomountServiceAccountToken {
		t.Errorf("results reader %+v: want the nightly's image and no token", rp.Spec)
	}
	if len(rp.Spec.Volumes) != 1 || rp.Spec.Volumes[0].PersistentVolumeClaim == nil || rp.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name || !rp.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly {
		t.Errorf("results reader volumes %+v: want %s, read-only", rp.Spec.Volumes, pvc.Name)
	}
}

// TestRawManifestsDecodeStrictly: each manifest file as written (before kustomize) decodes
// strictly too, so a misspelt field cannot hide behind kustomize's own parsing.
func TestRawManifestsDecodeStrictly(t *testing.T) {
	for file, v := range map[string]any{
		"kubernetes/cronjob.yaml":            &batchv1.CronJob{},
		"kubernetes/results-pvc.yaml":        &corev1.PersistentVolumeClaim{},
		"kubernetes/baseline-pvc.yaml":       &corev1.PersistentVolumeClaim{},
		"kubernetes/results-reader/pod.yaml": &corev1.Pod{},
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		strict(t, file, data, v)
	}
	// A misspelt field is refused: the check can fail.
	bad := bytes.Replace(mustRead(t, "kubernetes/cronjob.yaml"), []byte("concurrencyPolicy:"), []byte("concurrencyPolcy:"), 1)
	if err := yaml.UnmarshalStrict(bad, &batchv1.CronJob{}); err == nil {
		t.Error("a misspelt CronJob field decoded")
	}
}

// imageEntry returns the kustomization's entry for the nightly image and checks its pin: a
// registry host in the name, and a digest or a version tag (never latest or nightly, which
// a later push moves).
func imageEntry(t *testing.T, k kustypes.Kustomization, where string) kustypes.Image {
	t.Helper()
	for _, img := range k.Images {
		if img.Name != "kvbench-nightly" {
			continue
		}
		if host, _, ok := strings.Cut(img.NewName, "/"); !ok || !strings.ContainsAny(host, ".:") {
			t.Errorf("%s: image %q names no registry host", where, img.NewName)
		}
		if err := checkPin(img.NewTag, img.Digest); err != nil {
			t.Errorf("%s: image %s: %v", where, img.NewName, err)
		}
		return img
	}
	t.Fatalf("%s: no images: entry for kvbench-nightly", where)
	return kustypes.Image{}
}

var (
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// versionTag is what the Dockerfile's build line tags an image with: git describe's
	// output (a release tag, commits since it and the commit) or a commit, plus -nightly.
	versionTag = regexp.MustCompile(`^(v\d+\.\d+\.\d+(-\d+-g[0-9a-f]{7,40})?|[0-9a-f]{7,40})(-dirty)?(-nightly)?$`)
)

// checkPin accepts a digest, or a tag that names a version (mutable tags refused).
func checkPin(tag, digest string) error {
	switch {
	case digest != "":
		if !digestPattern.MatchString(digest) {
			return fmt.Errorf("digest %q is not sha256:<64 hex>", digest)
		}
		return nil
	case versionTag.MatchString(tag):
		return nil
	}
	return fmt.Errorf("tag %q names no version (want git describe's output, or a digest)", tag)
}

func TestCheckPin(t *testing.T) {
	for _, c := range []struct {
		tag, digest string
		ok          bool
	}{
		{"v0.3.1-nightly", "", true},
		{"v0.3.1-12-gabcdef0-nightly", "", true},
		{"d55a9e5", "", true},
		{"", "sha256:" + strings.Repeat("ab", 32), true},
		{"nightly", "", false},
		{"latest", "", false},
		{"", "", false},
		{"", "sha256:abc", false},
	} {
		if err := checkPin(c.tag, c.digest); (err == nil) != c.ok {
			t.Errorf("tag %q digest %q: %v", c.tag, c.digest, err)
		}
	}
}

// pinnedRef is the image reference kustomize writes for img.
func pinnedRef(img kustypes.Image) string {
	if img.Digest != "" {
		return img.NewName + "@" + img.Digest
	}
	return img.NewName + ":" + img.NewTag
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
