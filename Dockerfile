# kvbench as a container: a static binary (CGO_ENABLED=0) on distroless, run as non-root.
#
# A traceable image says what it was built from: VERSION (the image has no .git to read it
# from) is what `kvbench version`, every run record and kvbench_run_info report, and the
# build refuses to run without it; the base images are pinned by digest, which no later
# push to their tags can move. Build it so (docs/nightly.md, "Container and CronJob"):
#
#   VERSION=$(git describe --tags --always --dirty)
#   digest() { docker buildx imagetools inspect "$1" --format '{{.Manifest.Digest}}'; }
#   docker build --target nightly -t registry.example.com/kvbench:$VERSION-nightly \
#     --build-arg VERSION=$VERSION \
#     --build-arg GO_IMAGE=docker.io/library/golang:1.26-bookworm@$(digest golang:1.26-bookworm) \
#     --build-arg NIGHTLY_BASE=gcr.io/distroless/static-debian12:debug-nonroot@$(digest gcr.io/distroless/static-debian12:debug-nonroot) \
#     --build-arg BASE=gcr.io/distroless/static-debian12:nonroot@$(digest gcr.io/distroless/static-debian12:nonroot) .
#
# (--target nightly adds distroless's busybox sh, for deploy/kubernetes; without --target,
# the image is nothing but the binary.) The defaults below are PLACEHOLDER digests, all
# zeros: this repository's CI reaches no image registry to resolve or check a digest, so it
# records none it could not vouch for. Pass the current digests as above, or replace the
# defaults with them in a commit; a build with a placeholder fails at the pull, and
# package deploy's test refuses a FROM without a digest.
ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm@sha256:0000000000000000000000000000000000000000000000000000000000000000
ARG NIGHTLY_BASE=gcr.io/distroless/static-debian12:debug-nonroot@sha256:0000000000000000000000000000000000000000000000000000000000000000
ARG BASE=gcr.io/distroless/static-debian12:nonroot@sha256:0000000000000000000000000000000000000000000000000000000000000000

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION
RUN test -n "${VERSION}" || { echo "build with --build-arg VERSION=\$(git describe --tags --always --dirty): an image must say what it was built from" >&2; exit 1; }
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/anvil-serving/kvbench/internal/cli.BuildVersion=${VERSION}" \
	-o /out/kvbench ./cmd/kvbench \
	&& /out/kvbench version

# nightly: the same binary on distroless's debug variant, whose busybox sh runs the CronJob's
# script (run, then compare: two commands and their exit codes).
FROM ${NIGHTLY_BASE} AS nightly
ARG VERSION
LABEL org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/kvbench /usr/local/bin/kvbench
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/kvbench"]
CMD ["help"]

# The default image: nothing but the binary.
FROM ${BASE}
ARG VERSION
LABEL org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/kvbench /usr/local/bin/kvbench
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/kvbench"]
CMD ["help"]
