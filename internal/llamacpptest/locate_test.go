package llamacpptest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeInstall lays out an install dir as install-llamacpp.sh does.
func fakeInstall(t *testing.T, root, name string, finished bool, built time.Time) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path string, mode os.FileMode) {
		if err := os.WriteFile(path, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "bin", "llama-server"), 0o755)
	write(filepath.Join(dir, ModelFile), 0o644)
	if finished {
		stamp := filepath.Join(dir, buildStamp)
		write(stamp, 0o644)
		if err := os.Chtimes(stamp, built, built); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLocate(t *testing.T) {
	old := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		setup      func(t *testing.T, root string) (server, model string) // env values
		wantDir    string                                                 // install dir expected, relative to root
		wantErrSub string
	}{
		{
			name: "newest finished install",
			setup: func(t *testing.T, root string) (string, string) {
				fakeInstall(t, root, "llama.cpp-3.21.1-v0.4.0", true, old)
				fakeInstall(t, root, "llama.cpp-3.22.0-v0.5.0", true, old.Add(time.Hour))
				fakeInstall(t, root, "llama.cpp-3.23.0-v0.6.0", false, time.Time{}) // interrupted
				return "", ""
			},
			wantDir: "llama.cpp-3.22.0-v0.5.0",
		},
		{
			name: "env overrides",
			setup: func(t *testing.T, root string) (string, string) {
				d := fakeInstall(t, root, "elsewhere", false, time.Time{})
				return filepath.Join(d, "bin", "llama-server"), filepath.Join(d, ModelFile)
			},
			wantDir: "elsewhere",
		},
		{
			name:       "nothing installed",
			setup:      func(t *testing.T, root string) (string, string) { return "", "" },
			wantErrSub: "no llama-server: KVBENCH_LLAMA_SERVER unset",
		},
		{
			name: "model missing",
			setup: func(t *testing.T, root string) (string, string) {
				d := fakeInstall(t, root, "llama.cpp-3.21.1-v0.4.0", true, old)
				os.Remove(filepath.Join(d, ModelFile))
				return "", ""
			},
			wantErrSub: "model ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			server, model := tt.setup(t, root)
			t.Setenv(EnvCache, root)
			t.Setenv(EnvServer, server)
			t.Setenv(EnvModel, model)
			gotServer, gotModel, err := Locate()
			if tt.wantErrSub != "" {
				if err == nil || !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), tt.wantErrSub) {
					t.Fatalf("Locate() error = %v, want ErrNotInstalled containing %q", err, tt.wantErrSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, tt.wantDir)
			if want := filepath.Join(dir, "bin", "llama-server"); gotServer != want {
				t.Errorf("server = %s, want %s", gotServer, want)
			}
			if want := filepath.Join(dir, ModelFile); gotModel != want {
				t.Errorf("model = %s, want %s", gotModel, want)
			}
		})
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	b := newTailBuffer(8)
	b.Write([]byte("line1\nline2\n"))
	b.Write([]byte("line3\n"))
	if got := b.String(); got != "2\nline3\n" {
		t.Errorf("String() = %q", got)
	}
	if got := b.Tail(1); got != "line3" {
		t.Errorf("Tail(1) = %q", got)
	}
}
