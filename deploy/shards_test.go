package deploy

import (
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestTraceShardsJob: the Indexed Job runs N pods at once, pod K-1 running kvbench run
// --shard K/N on the nightly's image against one endpoint, as non-root with no API token,
// and writes each shard's run to its own directory of a volume all of them mount.
func TestTraceShardsJob(t *testing.T) {
	objs := build(t, "kubernetes/trace-shards")
	var job batchv1.Job
	strict(t, "Job/kvbench-trace-shards", objs["Job/kvbench-trace-shards"], &job)
	var pvc corev1.PersistentVolumeClaim
	strict(t, "PersistentVolumeClaim/kvbench-shard-results", objs["PersistentVolumeClaim/kvbench-shard-results"], &pvc)
	strict(t, "kubernetes/trace-shards/job.yaml", mustRead(t, "kubernetes/trace-shards/job.yaml"), &batchv1.Job{})
	strict(t, "kubernetes/trace-shards/shard-results-pvc.yaml", mustRead(t, "kubernetes/trace-shards/shard-results-pvc.yaml"), &corev1.PersistentVolumeClaim{})

	s := job.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion || s.Completions == nil || s.Parallelism == nil {
		t.Fatalf("job spec %+v: want completionMode Indexed, completions and parallelism", s)
	}
	pod := s.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	env := envOf(c)
	n, err := strconv.Atoi(env["SHARDS"].Value)
	if err != nil || int32(n) != *s.Completions || *s.Parallelism != *s.Completions || n < 2 {
		t.Errorf("SHARDS %q, completions %d, parallelism %d: want one N >= 2, all shards at once", env["SHARDS"].Value, *s.Completions, *s.Parallelism)
	}
	cmd := strings.Join(c.Command, " ")
	for _, want := range []string{"$((JOB_COMPLETION_INDEX + 1))", `--shard "$K/$SHARDS"`, `--endpoint "$ENDPOINT"`, `--out "$RESULTS/shard-$K-of-$SHARDS"`, "exec kvbench run"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command %q lacks %s", cmd, want)
		}
	}
	if s.BackoffLimit == nil || *s.BackoffLimit != 0 || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Error("a failed shard is retried: its rerun would find warm caches")
	}

	nightly := build(t, "kubernetes")
	var cj batchv1.CronJob
	strict(t, "CronJob/kvbench-nightly", nightly["CronJob/kvbench-nightly"], &cj)
	if nc := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0]; c.Image != nc.Image {
		t.Errorf("shards run %s, the nightly %s", c.Image, nc.Image)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("the shards mount an API token, run as root or write their root filesystem")
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if v := vols["results"].PersistentVolumeClaim; v == nil || v.ClaimName != pvc.Name || mounts["results"].MountPath != env["RESULTS"].Value || mounts["results"].ReadOnly {
		t.Errorf("results %+v at %+v: want %s, writable, at RESULTS", vols["results"], mounts["results"], pvc.Name)
	}
	if len(pvc.Spec.AccessModes) != 1 || pvc.Spec.AccessModes[0] != corev1.ReadWriteMany {
		t.Errorf("shard results access modes %v: N pods on N nodes write it", pvc.Spec.AccessModes)
	}
	if !strings.HasPrefix(env["TRACE"].Value, mounts["traces"].MountPath+"/") || !mounts["traces"].ReadOnly {
		t.Errorf("TRACE %q is not on the read-only traces volume %+v", env["TRACE"].Value, mounts["traces"])
	}
}
