// Package llamacpptest runs a real llama.cpp llama-server for tests: it finds the binary and
// test model that .ci/install-llamacpp.sh installs and starts the server on a free loopback
// port. Only test files import it, so the kvbench binary does not carry process control.
package llamacpptest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Environment variables that name the server binary and model; install-llamacpp.sh prints
// both.
const (
	EnvServer = "KVBENCH_LLAMA_SERVER"
	EnvModel  = "KVBENCH_LLAMA_MODEL"
	EnvCache  = "KVBENCH_CACHE"
)

// ModelFile is the test model's file name inside an install directory; bump it with
// MODEL_NAME in .ci/install-llamacpp.sh whenever kvbench-testmodel's output changes.
const ModelFile = "kvbench-testmodel-v1.gguf"

// buildStamp marks an install directory whose build finished.
const buildStamp = ".build-complete"

// ErrNotInstalled reports that the server binary or the model was not found.
var ErrNotInstalled = errors.New("llama.cpp not installed (run .ci/install-llamacpp.sh)")

// CacheDir returns the directory install-llamacpp.sh builds into: $KVBENCH_CACHE, else
// $HOME/.cache/kvbench.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the kvbench cache dir: %w", err)
	}
	return filepath.Join(home, ".cache", "kvbench"), nil
}

// Locate returns the llama-server binary and test model paths, from KVBENCH_LLAMA_SERVER
// and KVBENCH_LLAMA_MODEL when set, else from the newest finished install under
// CacheDir (llama.cpp-<version>-<tag>/bin/llama-server and .../kvbench-testmodel-v1.gguf).
// The error wraps ErrNotInstalled and says which file is missing.
func Locate() (server, model string, err error) {
	server, model = os.Getenv(EnvServer), os.Getenv(EnvModel)
	if server == "" || model == "" {
		dir, derr := newestInstall()
		if dir != "" {
			if server == "" {
				server = filepath.Join(dir, "bin", "llama-server")
			}
			if model == "" {
				model = filepath.Join(dir, ModelFile)
			}
		} else if derr != nil {
			return "", "", derr
		}
	}
	if server == "" {
		return "", "", fmt.Errorf("%w: no llama-server: %s unset and no finished build in the cache dir", ErrNotInstalled, EnvServer)
	}
	if err := isExecutable(server); err != nil {
		return "", "", fmt.Errorf("%w: llama-server %s: %w", ErrNotInstalled, server, err)
	}
	if model == "" {
		return "", "", fmt.Errorf("%w: no test model: %s unset and no finished build in the cache dir", ErrNotInstalled, EnvModel)
	}
	if fi, err := os.Stat(model); err != nil {
		return "", "", fmt.Errorf("%w: model %s: %w", ErrNotInstalled, model, err)
	} else if fi.Size() == 0 {
		return "", "", fmt.Errorf("%w: model %s is empty", ErrNotInstalled, model)
	}
	return server, model, nil
}

// newestInstall returns the most recently built install directory, or "" when none has
// finished.
func newestInstall() (string, error) {
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	stamps, err := filepath.Glob(filepath.Join(root, "llama.cpp-*", buildStamp))
	if err != nil {
		return "", fmt.Errorf("searching %s: %w", root, err)
	}
	type install struct {
		dir   string
		built int64
	}
	var found []install
	for _, s := range stamps {
		fi, err := os.Stat(s)
		if err != nil {
			continue
		}
		found = append(found, install{filepath.Dir(s), fi.ModTime().UnixNano()})
	}
	if len(found) == 0 {
		return "", nil
	}
	sort.Slice(found, func(i, j int) bool { return found[i].built > found[j].built })
	return found[0].dir, nil
}

func isExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}
