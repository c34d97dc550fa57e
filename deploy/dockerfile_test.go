package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var pinnedImage = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9./_-]+(:[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64}$`)

// dockerfileFroms returns the image each FROM names (an ARG's default substituted, a
// stage's name kept), and the ARGs declared before the first FROM with their defaults.
func dockerfileFroms(text string) (froms []string, args map[string]string) {
	args = map[string]string{}
	stages := map[string]bool{}
	seenFrom := false
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "ARG":
			if name, def, ok := strings.Cut(f[1], "="); ok && !seenFrom {
				args[name] = def
			}
		case "FROM":
			seenFrom = true
			ref := f[1]
			if m := regexp.MustCompile(`^\$\{?([A-Z_]+)\}?$`).FindStringSubmatch(ref); m != nil {
				ref = args[m[1]]
			}
			if !stages[ref] {
				froms = append(froms, ref)
			}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				stages[f[3]] = true
			}
		}
	}
	return froms, args
}

// TestDockerfileIsTraceable: every base image is pinned by digest (a FROM by tag alone is
// refused), the build needs a VERSION and links it into the binary, and docs/nightly.md's build
// line passes git describe's output and each base image's digest.
func TestDockerfileIsTraceable(t *testing.T) {
	text := string(mustRead(t, "../Dockerfile"))
	froms, args := dockerfileFroms(text)
	if len(froms) != 3 {
		t.Fatalf("FROM images %v, want the build, nightly and default bases", froms)
	}
	for _, ref := range froms {
		if !pinnedImage.MatchString(ref) {
			t.Errorf("FROM %q is not pinned by digest (REGISTRY/NAME:TAG@sha256:<64 hex>)", ref)
		}
	}
	if _, ok := args["VERSION"]; ok {
		t.Error("VERSION has a default before the first FROM: an image could report it instead of its version")
	}
	for _, want := range []string{
		"ARG VERSION\n",
		`RUN test -n "${VERSION}" ||`,
		`-X github.com/anvil-serving/kvbench/internal/cli.BuildVersion=${VERSION}`,
		`LABEL org.opencontainers.image.version="${VERSION}"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if strings.Contains(text, "VERSION=devel") {
		t.Error("Dockerfile still defaults VERSION to devel")
	}
	readme := string(mustRead(t, "../docs/nightly.md"))
	build := regexp.MustCompile(`(?m)^docker build (?:.*\\\n)*.*`).FindAllString(readme, -1)
	if len(build) == 0 {
		t.Fatal("docs/nightly.md has no docker build line")
	}
	for _, b := range build {
		for _, want := range []string{"--build-arg VERSION=", "--build-arg GO_IMAGE=", "--build-arg NIGHTLY_BASE=", "--build-arg BASE="} {
			if !strings.Contains(b, want) {
				t.Errorf("docs/nightly.md's build line %q lacks %s", b, want)
			}
		}
	}
	if !strings.Contains(readme, "VERSION=$(git describe --tags --always --dirty)") {
		t.Error("docs/nightly.md's build does not take VERSION from git describe")
	}
}

// TestDockerfileCheckRefusesUnpinned: the parse and the pin check catch a FROM by tag.
func TestDockerfileCheckRefusesUnpinned(t *testing.T) {
	froms, _ := dockerfileFroms("ARG GO=golang:1.26-bookworm\nFROM ${GO} AS build\nFROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=build /a /a\nFROM build\n")
	if len(froms) != 2 {
		t.Fatalf("froms %v", froms)
	}
	for _, ref := range froms {
		if pinnedImage.MatchString(ref) {
			t.Errorf("%q passes as pinned", ref)
		}
	}
	if _, err := os.Stat("../Dockerfile"); err != nil {
		t.Fatal(err)
	}
}
