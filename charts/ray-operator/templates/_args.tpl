{{/*
The arguments of `ray-operator run`, as a YAML list: in config/manager's order (config/namespaced's
with singleNamespaceInstall), then what the values add.
*/}}
{{- define "ray-operator.args" -}}
{{- if .Values.watchNamespace }}
{{- range .Values.watchNamespace }}
- --namespace={{ . }}
{{- end }}
{{- else if .Values.singleNamespaceInstall }}
{{- /* Its own namespace, whatever the release's is called (as config/namespaced). */}}
- --namespace=$(POD_NAMESPACE)
{{- end }}
{{- if .Values.leaderElectionEnabled }}
- --leader-elect
{{- else }}
{{- if gt (int .Values.replicas) 1 }}
{{- fail "leaderElectionEnabled=false needs replicas: 1 (every replica would reconcile)" }}
{{- end }}
- --no-leader-elect
{{- end }}
- --lease-name=ray-operator-leader
- --lease-namespace=$(POD_NAMESPACE)
- --health-addr=:8082
- --metrics-addr=:8080
- --metrics-auth={{ include "ray-operator.metricsAuth" . }}
{{- if include "ray-operator.webhooksOn" . }}
- --webhook-port=9443
{{- else }}
- --no-webhooks
{{- end }}
{{- $encoders := dict "json" "json" "console" "text" }}
{{- if not (hasKey $encoders .Values.logging.stdoutEncoder) }}
{{- fail (printf "logging.stdoutEncoder must be json or console, not %q" .Values.logging.stdoutEncoder) }}
{{- end }}
- --log-format={{ get $encoders .Values.logging.stdoutEncoder }}
- --log-level={{ .Values.logging.level | upper }}
{{- with .Values.reconcileConcurrency }}
- --max-concurrent-reconciles={{ int . }}
{{- end }}
{{- with include "ray-operator.batchScheduler" . }}
- --batch-scheduler={{ . }}
{{- end }}
{{- with .Values.featureGates }}
{{- $gates := list }}
{{- range . }}
{{- $gates = append $gates (printf "%s=%t" (required "featureGates entries need a name" .name) (.enabled | default false)) }}
{{- end }}
- --feature-gates={{ join "," $gates }}
{{- end }}
{{- with .Values.rayServeGraph }}
{{- with .allowedHosts }}
- --serve-graph-allowed-hosts={{ join "," . }}
{{- end }}
{{- if .allowLoopback }}
- --serve-graph-allow-loopback
{{- end }}
{{- with .maxConcurrentFetches }}
- --serve-graph-max-concurrent-fetches={{ int . }}
{{- end }}
{{- with .maxConcurrentFetchesPerNamespace }}
- --serve-graph-max-concurrent-fetches-per-namespace={{ int . }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
