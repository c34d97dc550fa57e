# kvbench as a container: a static binary (CGO_ENABLED=0) on distroless, run as non-root.
#
#   docker build -t kvbench .                         # kvbench only (distroless static nonroot)
#   docker build --target nightly -t kvbench:nightly . # plus busybox sh, for deploy/kubernetes
#   docker run --rm kvbench run smoke --endpoint http://gpu-host:8000/v1 --out /tmp/results
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
	-o /out/kvbench ./cmd/kvbench \
	&& /out/kvbench version

# nightly: the same binary on distroless's debug variant, whose busybox sh runs the CronJob's
# script (run, then compare: two commands and their exit codes).
FROM gcr.io/distroless/static-debian12:debug-nonroot AS nightly
COPY --from=build /out/kvbench /usr/local/bin/kvbench
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/kvbench"]
CMD ["help"]

# The default image: nothing but the binary.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kvbench /usr/local/bin/kvbench
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/kvbench"]
CMD ["help"]
