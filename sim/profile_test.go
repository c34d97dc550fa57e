package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEmbeddedProfiles(t *testing.T) {
	names := ProfileNames()
	for _, want := range []string{"tiny", "dsv4-offload16", "dsv4-offload8"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("profile %s missing from %v", want, names)
		}
	}
	for _, name := range names {
		p, err := LoadProfile(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if p.Name != name || p.ServedModelName == "" {
			t.Errorf("%s: name %q served as %q", name, p.Name, p.ServedModelName)
		}
	}
	if _, err := LoadProfile("nope"); !errors.Is(err, ErrUnknownProfile) {
		t.Errorf("unknown profile: %v", err)
	}
}

func TestSeedProfilesGeometry(t *testing.T) {
	cases := []struct {
		name                       string
		gpuTokens, cpuBlocks       int
		validReload                bool
		storeBytes, loadBytes      int64
		maxModelLen, decodeTokensS int
	}{
		// 16 GiB / (20790 B * 16) = 51647 blocks: 826352 tokens > 506288 on the GPU.
		{"dsv4-offload16", 31643 * 16, 51647, true, 20790, 8833, 262144, 118},
		// 8 GiB: 25823 blocks, 413168 tokens < 503472 on the GPU: the invalid control.
		{"dsv4-offload8", 31467 * 16, 25823, false, 20790, 8833, 262144, 118},
		{"tiny", 4096, 512, true, 2048, 2048, 2048, 2000},
	}
	for _, c := range cases {
		p, err := LoadProfile(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.NumGPUBlocks * p.BlockSize; got != c.gpuTokens {
			t.Errorf("%s: GPU tokens %d, want %d", c.name, got, c.gpuTokens)
		}
		if got := p.CPUBlocks(); got != c.cpuBlocks {
			t.Errorf("%s: CPU blocks %d, want %d", c.name, got, c.cpuBlocks)
		}
		if valid := p.CPUBlocks()*p.BlockSize > c.gpuTokens; valid != c.validReload {
			t.Errorf("%s: valid reload setup %v, want %v", c.name, valid, c.validReload)
		}
		if p.StoreBytesPerToken != c.storeBytes || p.LoadBytesPerToken != c.loadBytes ||
			p.MaxModelLen != c.maxModelLen || p.DecodeTokensPerSecond != float64(c.decodeTokensS) {
			t.Errorf("%s: %+v", c.name, p)
		}
		if !strings.Contains(p.Summary(), c.name) {
			t.Errorf("summary %q", p.Summary())
		}
	}
}

func TestParseProfile(t *testing.T) {
	base := "model = \"m\"\nmax_model_len = 64\nnum_gpu_blocks = 8\nprefill_tokens_per_second = 1\ndecode_tokens_per_second = 1\n"
	p, err := ParseProfile("x.toml", []byte(base+"request_overhead = \"25ms\"\nstore_bytes_per_token = 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.RequestOverhead != 25*time.Millisecond || p.LoadBytesPerToken != 10 || p.ServedModelName != "m" || !p.FlatOffloadMetrics {
		t.Errorf("defaults not applied: %+v", p)
	}
	for _, bad := range []string{
		base + "max_model_len_typo = 3\n",                                     // unknown key
		base + "block_size = 0\n",                                             // invalid
		base + "max_model_len = 9999\n",                                       // duplicate key
		"model = \"m\"\nnum_gpu_blocks = [",                                   // syntax
		strings.Replace(base, "max_model_len = 64", "max_model_len = 256", 1), // longer than the pool
		base + "reasoning_field = \"thoughts\"\n",
	} {
		if _, err := ParseProfile("x.toml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "x.toml") {
			t.Errorf("accepted or unlocated error %v for:\n%s", err, bad)
		}
	}
}

func FuzzParseProfile(f *testing.F) {
	f.Add([]byte("model = \"m\"\nmax_model_len = 64\nnum_gpu_blocks = 8\nprefill_tokens_per_second = 1\ndecode_tokens_per_second = 1\n"))
	f.Add([]byte("speed = -1\n"))
	f.Add([]byte("request_overhead = \"1h\"\nnum_gpu_blocks = 1e9\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile("fuzz.toml", data)
		if err == nil && (p.BlockSize <= 0 || p.NumGPUBlocks <= 0 || p.MaxModelLen > p.NumGPUBlocks*p.BlockSize) {
			t.Fatalf("accepted an unusable profile: %+v", p)
		}
	})
}
