#!/usr/bin/env bash
# install-llamacpp.sh builds llama.cpp's llama-server once into a cache directory outside
# the clone and generates kvbench's deterministic test model next to it. It prints
#   KVBENCH_LLAMA_SERVER=<path>
#   KVBENCH_LLAMA_MODEL=<path>
# on stdout (everything else goes to stderr), so a caller can `eval "$(...)"` them.
# Re-running it reuses a finished build: a stamp file is written last, so an interrupted
# build is redone. See issue 6.
set -euo pipefail

NLC_VERSION="${KVBENCH_NODE_LLAMA_CPP_VERSION:-3.21.1}"
CACHE_ROOT="${KVBENCH_CACHE:-${HOME:-/root}/.cache/kvbench}"
JOBS="${KVBENCH_BUILD_JOBS:-2}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Bump with llamacpp.ModelFile whenever the generator's output changes.
MODEL_NAME="kvbench-testmodel-v1.gguf"

log() { echo "install-llamacpp: $*" >&2; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_packages() {
	local missing=()
	command -v cmake >/dev/null || missing+=(cmake)
	command -v ninja >/dev/null || missing+=(ninja-build)
	command -v g++ >/dev/null || missing+=(g++)
	command -v git >/dev/null || missing+=(git)
	command -v npm >/dev/null || missing+=(npm)
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Refresh package lists only when there are none or the install cannot find a package.
	if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
		as_root apt-get update -qq >&2
	fi
	if ! as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
		as_root apt-get update -qq >&2
		as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
	fi
}

# finished_dir prints a cache dir for this node-llama-cpp version whose build completed.
finished_dir() {
	local d
	for d in "$CACHE_ROOT"/llama.cpp-"$NLC_VERSION"-*/; do
		if [ -f "$d/.build-complete" ] && [ -x "$d/bin/llama-server" ]; then
			echo "${d%/}"
			return 0
		fi
	done
	return 1
}

fetch_package() { # $1: work dir; leaves the npm package's llama/ dir in $1/package/llama
	local work="$1"
	log "fetching node-llama-cpp@$NLC_VERSION"
	(cd "$work" && npm pack --silent "node-llama-cpp@$NLC_VERSION" >/dev/null)
	tar -xzf "$work/node-llama-cpp-$NLC_VERSION.tgz" -C "$work" package/llama
}

# clone_source clones the bundle into $2 unless it is there. The source sits in the cache
# dir, not a temp dir, so a rerun after an interrupted build keeps CMake's paths and
# ninja's finished objects; cloning to a temp name and renaming makes $2 complete or absent.
clone_source() { # $1: bundle, $2: target dir
	[ -d "$2" ] && return 0
	rm -rf "$2.tmp"
	git -c advice.detachedHead=false clone -q "$1" "$2.tmp"
	mv "$2.tmp" "$2"
}

build_server() { # $1: source tree, $2: cache dir
	local src="$1" dir="$2" build="$2/build"
	log "building llama-server in $build (log: $build.log)"
	local start=$SECONDS
	# GGML_NATIVE=ON crashes while loading on the CI CPU; pin a portable x86-64 feature set.
	cmake -S "$src" -B "$build" -G Ninja \
		-DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=OFF \
		-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
		-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
		-DLLAMA_OPENSSL=OFF -DLLAMA_LLGUIDANCE=OFF \
		>"$build.log" 2>&1 || { tail -n 30 "$build.log" >&2; return 1; }
	cmake --build "$build" --target llama-server -j"$JOBS" >>"$build.log" 2>&1 ||
		{ tail -n 30 "$build.log" >&2; return 1; }
	mkdir -p "$dir/bin"
	cp "$build/bin/llama-server" "$dir/bin/llama-server.tmp"
	mv "$dir/bin/llama-server.tmp" "$dir/bin/llama-server"
	cp "$src/models/ggml-vocab-qwen2.gguf" "$dir/ggml-vocab-qwen2.gguf"
	log "built llama-server in $((SECONDS - start)) s"
}

main() {
	mkdir -p "$CACHE_ROOT"
	local dir
	if dir="$(finished_dir)"; then
		log "reusing $dir"
	else
		install_packages
		WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvbench-llamacpp.XXXXXX")"
		trap 'rm -rf "$WORK"' EXIT
		local work="$WORK"
		fetch_package "$work"
		local tag
		tag="$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$work/package/llama/llama.cpp.info.json")"
		if [ -z "$tag" ]; then
			clone_source "$work/package/llama/gitRelease.bundle" "$work/src"
			tag="$(git -C "$work/src" rev-parse --short=12 HEAD)"
		fi
		dir="$CACHE_ROOT/llama.cpp-$NLC_VERSION-$tag"
		mkdir -p "$dir"
		rm -f "$dir/.build-complete"
		clone_source "$work/package/llama/gitRelease.bundle" "$dir/src"
		build_server "$dir/src" "$dir"
		git -C "$dir/src" rev-parse HEAD >"$dir/.build-complete.tmp"
		rm -rf "$dir/build" "$dir/src"
		# Written last: its presence means bin/ and the vocab are complete.
		mv "$dir/.build-complete.tmp" "$dir/.build-complete"
	fi

	local model="$dir/$MODEL_NAME"
	if [ ! -s "$model" ]; then
		command -v go >/dev/null || { log "go not found: needed to generate $model"; exit 1; }
		log "generating $model"
		(cd "$REPO_ROOT" && go run ./cmd/kvbench-testmodel -vocab "$dir/ggml-vocab-qwen2.gguf" -o "$model.tmp" >&2)
		mv "$model.tmp" "$model"
	fi

	echo "KVBENCH_LLAMA_SERVER=$dir/bin/llama-server"
	echo "KVBENCH_LLAMA_MODEL=$model"
}

main "$@"
