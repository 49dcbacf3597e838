{{/* The chart's name. */}}
{{- define "mcpp-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's name for its objects: the release's own when it holds the
chart's name. At most 52 characters, so that a pod's name
(FULLNAME-ORDINAL) and the headless service's (FULLNAME-headless) stay
DNS labels.
*/}}
{{- define "mcpp-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless service through which the nodes find each other. */}}
{{- define "mcpp-gateway.headless" -}}
{{- printf "%s-headless" (include "mcpp-gateway.fullname" .) }}
{{- end }}

{{- define "mcpp-gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "mcpp-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mcpp-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpp-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* http or https: the scheme of the gateway's port. */}}
{{- define "mcpp-gateway.scheme" -}}
{{- if .Values.tls.secretName }}https{{ else }}http{{ end }}
{{- end }}

{{/* The copies of the history: history.replicas, or 3 or the cluster's size. */}}
{{- define "mcpp-gateway.historyReplicas" -}}
{{- if gt (int .Values.history.replicas) 0 }}
{{- int .Values.history.replicas }}
{{- else }}
{{- min 3 (int .Values.replicas) }}
{{- end }}
{{- end }}

{{/*
The cluster's route URLs: every pod of the StatefulSet by its DNS name
under the headless service (a node may list itself; NATS skips it).
*/}}
{{- define "mcpp-gateway.routes" -}}
{{- $full := include "mcpp-gateway.fullname" . }}
{{- $domain := printf "%s.%s.svc.%s" (include "mcpp-gateway.headless" .) .Release.Namespace .Values.clusterDomain }}
{{- $routes := list }}
{{- range $i := until (int .Values.replicas) }}
{{- $routes = append $routes (printf "nats-route://%s-%d.%s:%d" $full $i $domain (int $.Values.clusterPort)) }}
{{- end }}
{{- join "," $routes }}
{{- end }}

{{/* Refusals of values that cannot work, each naming the value. */}}
{{- define "mcpp-gateway.validate" -}}
{{- if lt (int .Values.replicas) 1 }}
{{- fail "replicas must be at least 1" }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int .Values.shutdownTimeoutSeconds) 9) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least shutdownTimeoutSeconds (%d) + 10: the drain, then the history's last writes and NATS's stop" (int .Values.terminationGracePeriodSeconds) (int .Values.shutdownTimeoutSeconds)) }}
{{- end }}
{{- if lt (int .Values.shutdownTimeoutSeconds) 1 }}
{{- fail "shutdownTimeoutSeconds must be at least 1" }}
{{- end }}
{{- if lt (int .Values.history.entries) 0 }}
{{- fail "history.entries must be 0 (off) or more" }}
{{- end }}
{{- if and (eq (int .Values.history.entries) 0) (gt (int .Values.history.replicas) 0) }}
{{- fail "history.replicas needs history on (history.entries above 0)" }}
{{- end }}
{{- if or (lt (int .Values.history.replicas) 0) (gt (int .Values.history.replicas) 5) }}
{{- fail "history.replicas must be 0 (automatic: 3, or the cluster's size) to 5" }}
{{- end }}
{{- if gt (int (include "mcpp-gateway.historyReplicas" .)) (int .Values.replicas) }}
{{- fail (printf "history.replicas (%s) cannot exceed replicas (%d): each copy is on its own node" (include "mcpp-gateway.historyReplicas" .) (int .Values.replicas)) }}
{{- end }}
{{- end }}
