package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

//go:generate go test -run TestCLIDocIsCurrent -update .

const cliDoc = "../../docs/cli.md"

// commandHelp returns what 'kvbench ARGS... -h' prints: the usage line, the example and the
// flags as the flag package prints their definitions.
func commandHelp(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, code := runCLI(t, append(args, "-h")...)
	if code != cli.ExitOK {
		t.Fatalf("kvbench %s -h: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return out
}

// cliReference renders docs/cli.md from the command table: kvbench's help, then each
// command's -h output (and its subcommands', which its help names as 'kvbench CMD SUB -h'),
// so the page is the flag definitions themselves, however the commands build them.
func cliReference(t *testing.T) string {
	t.Helper()
	names := make([]string, 0, len(cli.Commands))
	for n := range cli.Commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# kvbench command reference\n\n")
	b.WriteString("Generated from the commands' flag definitions (`go generate ./cmd/kvbench`, which runs\n")
	b.WriteString("`go test ./cmd/kvbench -run TestCLIDocIsCurrent -update`); do not edit by hand. Exit codes and\n")
	b.WriteString("what the outputs hold: [running.md](running.md).\n\n")
	fmt.Fprintf(&b, "```text\n$ kvbench --help\n%s```\n", commandHelp(t))
	sub := regexp.MustCompile(`'kvbench (\S+) (\S+) -h'`)
	for _, n := range names {
		help := commandHelp(t, n)
		summary := cli.Commands[n].Summary
		fmt.Fprintf(&b, "\n## kvbench %s\n\n%s%s.\n\n```text\n%s```\n", n, strings.ToUpper(summary[:1]), summary[1:], help)
		for _, m := range sub.FindAllStringSubmatch(help, -1) {
			if m[1] != n {
				continue
			}
			fmt.Fprintf(&b, "\n### kvbench %s %s\n\n```text\n%s```\n", n, m[2], commandHelp(t, n, m[2]))
		}
	}
	return b.String()
}

// TestCLIDocIsCurrent: docs/cli.md is what the commands' -h print today; -update (or go
// generate) rewrites it.
func TestCLIDocIsCurrent(t *testing.T) {
	want := cliReference(t)
	if !strings.Contains(want, "### kvbench trace analyze") || !strings.Contains(want, "-endpoint string") {
		t.Fatalf("the reference lacks a subcommand or run's flags:\n%s", want)
	}
	if *update {
		if err := os.WriteFile(cliDoc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is stale: run go generate ./cmd/kvbench (first difference at line %d)", cliDoc, firstDiffLine(string(got), want))
	}
}

// firstDiffLine is the 1-based line at which a and b first differ.
func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// TestDocsLinksResolve: every relative link of the repository's Markdown pages names a file
// or directory that exists, and every #anchor into a Markdown page names one of its headings.
func TestDocsLinksResolve(t *testing.T) {
	root := "../.."
	var pages []string
	for _, dir := range []string{".", "docs", "scenarios"} {
		found, err := filepath.Glob(filepath.Join(root, dir, "*.md"))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, found...)
	}
	if len(pages) < 8 {
		t.Fatalf("%d Markdown pages: the docs moved", len(pages))
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A path in backquotes that names one of the repository's top-level code directories
	// must exist: a package that moved leaves no stale path behind in the docs.
	repoPath := regexp.MustCompile("`((?:harness|internal|cmd|sim|scenarios|prompts|deploy)/[A-Za-z0-9_./-]*[A-Za-z0-9_])/?`")
	checked := 0
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			checked++
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !hasAnchor(t, file, anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s", page, target, file, anchor)
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(string(data), -1) {
			if strings.ContainsAny(m[1], "*<") {
				continue // a pattern, not a path
			}
			checked++
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("%s: `%s` does not exist", page, m[1])
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found")
	}
}

// hasAnchor reports whether a heading of the Markdown file has GitHub's anchor name.
func hasAnchor(t *testing.T, file, anchor string) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile("[^a-z0-9 _-]")
	for _, line := range strings.Split(string(data), "\n") {
		if h := strings.TrimLeft(line, "#"); len(h) < len(line) && strings.HasPrefix(h, " ") {
			name := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
			if name == anchor {
				return true
			}
		}
	}
	return false
}

// TestDocsHoldNoCopyOfNightlyScript: the README and docs/nightly.md link
// deploy/kubernetes/nightly.sh, docs/nightly.md names each of its settings, and no Markdown
// page copies four of its lines in a row, so there is one text to keep right: the file the
// CronJob runs and the nightly tests run.
func TestDocsHoldNoCopyOfNightlyScript(t *testing.T) {
	script := strings.Split(nightlyScript(t), "\n")
	pages := map[string]string{}
	for _, glob := range []string{"../../*.md", "../../docs/*.md", "../../scenarios/*.md"} {
		found, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range found {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			pages[p] = string(data)
		}
	}
	for page, link := range map[string]string{"../../README.md": "(deploy/kubernetes/nightly.sh)", "../../docs/nightly.md": "(../deploy/kubernetes/nightly.sh)"} {
		if !strings.Contains(pages[page], link) {
			t.Errorf("%s does not link %s", page, link)
		}
	}
	// The page names every setting the script reads, by its environment variable.
	flags := regexp.MustCompile(`(?m)^\t--([a-z-]+)\) `).FindAllStringSubmatch(strings.Join(script, "\n"), -1)
	if len(flags) < 5 {
		t.Fatalf("nightly.sh's flags: %v", flags)
	}
	for _, f := range flags {
		if env := strings.ToUpper(strings.ReplaceAll(f[1], "-", "_")); !strings.Contains(pages["../../docs/nightly.md"], "`"+env+"`") {
			t.Errorf("docs/nightly.md does not name nightly.sh's setting %s (--%s)", env, f[1])
		}
	}
	for i := 0; i+4 <= len(script); i++ {
		chunk := strings.Join(script[i:i+4], "\n")
		if len(strings.TrimSpace(chunk)) < 40 {
			continue // blank or trivial lines say nothing of a copy
		}
		for page, text := range pages {
			if strings.Contains(text, chunk) {
				t.Errorf("%s copies nightly.sh's lines %d-%d; link the file instead", page, i+1, i+4)
			}
		}
	}
}

// TestDocsReadmeIsTheFrontDoor: the README stays a front door (at most 300 lines, the
// reference lives in docs/), links the docs index, and keeps the two quick-start commands
// verbatim in a shell block: CI and users run them as written.
func TestDocsReadmeIsTheFrontDoor(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if n := strings.Count(readme, "\n"); n > 300 {
		t.Errorf("README.md has %d lines, at most 300: move reference sections to docs/", n)
	}
	if !strings.Contains(readme, "(docs/README.md)") {
		t.Error("README.md does not link docs/README.md, the index of docs/")
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, -1)
	for _, cmd := range []string{"go run ./cmd/kvbench demo", "go test ./..."} {
		found := false
		for _, b := range block {
			for _, line := range strings.Split(b[1], "\n") {
				found = found || strings.HasPrefix(line, cmd+" ") || line == cmd
			}
		}
		if !found {
			t.Errorf("README.md's shell blocks lack the quick-start command %q", cmd)
		}
	}
}

// TestDocsIndexListsEveryPage: docs/README.md links every page of docs/.
func TestDocsIndexListsEveryPage(t *testing.T) {
	index, err := os.ReadFile("../../docs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if name := filepath.Base(p); name != "README.md" && !strings.Contains(string(index), "]("+name+")") {
			t.Errorf("docs/README.md does not link %s", name)
		}
	}
}
