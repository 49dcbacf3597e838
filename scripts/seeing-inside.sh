#!/usr/bin/env bash
# Seeing inside (README.md): Jaeger beside the gateway, the gateway
# exporting its traces to it. Jaeger is built once (scripts/jaeger.sh).
# Arguments go to mcpp-gateway.
#
#   scripts/seeing-inside.sh [mcpp-gateway flags]
#
# Jaeger's query API then answers on http://127.0.0.1:16686/api/traces
# (the binary built from its Go module carries no UI: Jaeger's release
# builds do, and take OTLP the same way: point OTEL_EXPORTER_OTLP_ENDPOINT
# at one of them instead).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/jaeger.sh)
config=$(mktemp)
cat >"$config" <<'YAML'
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry: {metrics: {level: none}, logs: {level: warn}}
extensions:
  jaeger_query:
    storage: {traces: mem}
    http: {endpoint: "127.0.0.1:16686"}
    grpc: {endpoint: "127.0.0.1:16685"}
  jaeger_storage:
    backends: {mem: {memory: {max_traces: 100000}}}
receivers:
  otlp:
    protocols: {grpc: {endpoint: "127.0.0.1:4317"}, http: {endpoint: "127.0.0.1:4318"}}
processors:
  batch: {}
exporters:
  jaeger_storage_exporter: {trace_storage: mem}
YAML
"$bin" --config "file:$config" &
jaeger=$!
trap 'kill $jaeger 2>/dev/null; rm -f "$config"' EXIT
echo "Jaeger: OTLP on 127.0.0.1:4317 (gRPC) and :4318 (HTTP), its query API on http://127.0.0.1:16686/api/traces" >&2
OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=${OTEL_SERVICE_NAME:-mcpp-gateway} \
	go run ./cmd/mcpp-gateway "$@"
