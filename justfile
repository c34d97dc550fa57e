# Mirrors the README's commands; `just` is optional, the go commands work alone.

# Run the whole job on the embedded engine (no GPU).
demo:
    go run ./cmd/kvbench demo

# The test suite, as CI runs it.
test:
    go test ./...

# Formatting, vet and a short fuzz of the scenario loader.
lint:
    test -z "$(gofmt -l $(git ls-files '*.go'))"
    go vet ./...
    go test -run '^$' -fuzz FuzzParse -fuzztime 5s ./scenarios

# Build the kvbench binary into ./kvbench.
build:
    go build -o kvbench ./cmd/kvbench

# Everything CI does, llama.cpp build included.
ci:
    bash .ci/run
