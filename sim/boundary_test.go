package sim

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/anvil-serving/kvbench"

// TestEngineAndHarnessMeetOnlyOverHTTP enforces the boundary: nothing under sim/ imports
// kvbench, and no library package (harness/, prompts/, scenarios/) imports the engine; only
// the CLI and tests under cmd/ start it, and they reach it by URL.
// Shared code would let one bug hide on both sides.
func TestEngineAndHarnessMeetOnlyOverHTTP(t *testing.T) {
	walk := func(root string, check func(path, imp string)) {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				check(path, strings.Trim(imp.Path.Value, `"`))
			}
			return nil
		})
	}
	walk(".", func(path, imp string) {
		if strings.HasPrefix(imp, module) {
			t.Errorf("%s imports %s: the engine must not share code with the harness", path, imp)
		}
	})
	for _, lib := range []string{"../harness", "../prompts", "../scenarios"} {
		walk(lib, func(path, imp string) {
			if imp == module+"/sim" || strings.HasPrefix(imp, module+"/sim/") {
				t.Errorf("%s imports the embedded engine: the harness may reach it only by URL", path)
			}
		})
	}
}
