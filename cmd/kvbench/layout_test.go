package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLibraryImportsNoInternal: the tree is the map. The library (harness/, scenarios/,
// prompts/) imports nothing under internal/, which serves only the kvbench command, so a
// program importing the library never needs the CLI's stages.
func TestLibraryImportsNoInternal(t *testing.T) {
	const internal = "github.com/anvil-serving/kvbench/internal/"
	for _, root := range []string{"../../harness", "../../scenarios", "../../prompts"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, internal) {
					t.Errorf("%s imports %s: the library must not depend on the CLI's stages", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
