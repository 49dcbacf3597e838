{{/*
The gateway's flags, as a YAML list (toYaml quotes what needs it: a
--default-capabilities JSON list, say). The tests run these very
arguments as local gateways.
*/}}
{{- define "mcpp-gateway.args" -}}
{{- $v := .Values }}
{{- $a := list (printf "--listen=0.0.0.0:%d" (int $v.port)) (printf "--shutdown-timeout=%ds" (int $v.shutdownTimeoutSeconds)) (printf "--log-level=%s" $v.logLevel) (printf "--history=%d" (int $v.history.entries)) }}
{{- if gt (int $v.history.entries) 0 }}
{{- $a = concat $a (list (printf "--history-age=%s" $v.history.age) (printf "--history-bytes=%s" $v.history.bytes) "--history-dir=/data") }}
{{- end }}
{{- if gt (int $v.replicas) 1 }}
{{- $a = concat $a (list (printf "--cluster-name=%s" (include "mcpp-gateway.fullname" .)) (printf "--cluster-listen=0.0.0.0:%d" (int $v.clusterPort)) (printf "--routes=%s" (include "mcpp-gateway.routes" .))) }}
{{- if gt (int $v.history.entries) 0 }}
{{- $a = append $a (printf "--history-replicas=%s" (include "mcpp-gateway.historyReplicas" .)) }}
{{- end }}
{{- end }}
{{- with $v.auth.tokens.secretName }}
{{- $a = append $a (printf "--tokens=/etc/mcpp/tokens/%s" $v.auth.tokens.key) }}
{{- end }}
{{- with $v.auth.jwt.secret.secretName }}
{{- $a = append $a (printf "--jwt-secret-file=/etc/mcpp/jwt-secret/%s" $v.auth.jwt.secret.key) }}
{{- end }}
{{- with $v.auth.jwt.publicKeys.secretName }}
{{- $a = append $a (printf "--jwt-public-key-file=/etc/mcpp/jwt-public-keys/%s" $v.auth.jwt.publicKeys.key) }}
{{- end }}
{{- with $v.auth.jwt.jwksURL }}
{{- $a = append $a (printf "--jwt-jwks-url=%s" .) }}
{{- end }}
{{- with $v.auth.jwt.issuer }}
{{- $a = append $a (printf "--jwt-issuer=%s" .) }}
{{- end }}
{{- with $v.auth.jwt.audience }}
{{- $a = append $a (printf "--jwt-audience=%s" .) }}
{{- end }}
{{- with $v.auth.defaultCapabilities }}
{{- $a = append $a (printf "--default-capabilities=%s" .) }}
{{- end }}
{{- if $v.tls.secretName }}
{{- $a = concat $a (list "--tls-cert=/etc/mcpp/tls/tls.crt" "--tls-key=/etc/mcpp/tls/tls.key") }}
{{- end }}
{{- with $v.maxMemory }}
{{- $a = append $a (printf "--max-memory=%s" .) }}
{{- end }}
{{- range $v.extraArgs }}
{{- $a = append $a (toString .) }}
{{- end }}
{{- toYaml $a }}
{{- end }}
