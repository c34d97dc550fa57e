package runner

import (
	"slices"
	"testing"
)

func TestProbeEnvDropsSecrets(t *testing.T) {
	environ := []string{"PATH=/bin", "HOME=/root", "VLLM_ENDPOINT_AUTH=x", "HF_TOKEN=hf", "aws_secret_access_key=a",
		"DB_PASSWORD=p", "OPENAI_API_KEY=sk", "LANG=C.UTF-8"}
	got := ProbeEnv(environ, "VLLM_ENDPOINT_AUTH", false)
	if want := []string{"PATH=/bin", "HOME=/root", "LANG=C.UTF-8"}; !slices.Equal(got, want) {
		t.Errorf("default: %v, want %v", got, want)
	}
	got = ProbeEnv(environ, "VLLM_ENDPOINT_AUTH", true)
	if slices.Contains(got, "VLLM_ENDPOINT_AUTH=x") || !slices.Contains(got, "HF_TOKEN=hf") || len(got) != len(environ)-1 {
		t.Errorf("with secrets: %v, want all but the API key variable", got)
	}
	if got := ProbeEnv(nil, "", false); got == nil {
		t.Error("an empty environment must be empty, not nil (nil means the parent's)")
	}
}
