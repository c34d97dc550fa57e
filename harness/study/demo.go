package study

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// WriteDemo writes the demo's records into dir (study.json of the two runs and, where the
// runs measured bytes per stored token, accounting.json for one GPU's pool), then the seed
// table on w. Engines that count stores in tokens or blocks measure no bytes per token:
// with accountingOptional their accounting is skipped with a line on w saying why. It
// returns the files it wrote.
func WriteDemo(w io.Writer, dir string, eviction, control *runs.Run, accountingOptional bool) ([]string, error) {
	loaded := []*runs.Run{eviction, control}
	st, err := Summarize(loaded, dir, false)
	if err != nil {
		return nil, err
	}
	if _, err := runs.WriteJSON(filepath.Join(dir, "study.json"), st); err != nil {
		return nil, err
	}
	files := []string{"study.json"}
	acc, err := Accounting(loaded, PoolSpec{GPUs: 1}, dir)
	switch {
	case err != nil && accountingOptional:
		fmt.Fprintf(w, "\naccounting skipped: %v\n", err)
	case err != nil:
		return files, err
	default:
		if _, err := runs.WriteJSON(filepath.Join(dir, "accounting.json"), acc); err != nil {
			return files, err
		}
		files = append(files, "accounting.json")
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return files, err
	}
	return files, WriteSeedTable(w, eviction.Run, control.Run)
}
