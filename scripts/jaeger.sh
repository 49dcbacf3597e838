#!/usr/bin/env bash
# Prints the path of the Jaeger the tracing tests and seeing-inside.sh
# run, building it first when it is not there: Jaeger v2
# (github.com/jaegertracing/jaeger/cmd/jaeger, its Go module at the
# version below) as a tool of a throwaway module, since go install refuses
# its module (it has replace directives). It is kept outside the
# checkout, as Go keeps its caches, so that a fresh clone finds it: in
# $MCPP_JAEGER_BIN when set, else $XDG_CACHE_HOME/mcpp (~/.cache/mcpp).
# On an empty Go cache the build takes long (35 min on a loaded 2-core
# machine; BENCHMARKS.md): .ci/run builds it before the tests.
set -euo pipefail
version=v1.75.0
bin=${MCPP_JAEGER_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpp/jaeger-$version}
if [ ! -x "$bin" ]; then
	echo "building Jaeger $version into $bin (once)…" >&2
	start=$(date +%s)
	mod=$(mktemp -d)
	mkdir -p "$(dirname "$bin")"
	(cd "$mod" && go mod init x >/dev/null 2>&1 &&
		GOFLAGS=-mod=mod go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$version" &&
		GOFLAGS=-mod=mod go build -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
	rm -rf "$mod"
	mv "$bin.tmp" "$bin"
	echo "built Jaeger $version in $(($(date +%s) - start)) s" >&2
fi
echo "$bin"
