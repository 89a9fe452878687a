{{/*
The chart reads its objects from config/ (a link to the repository's config/, the kustomize
install), so that both installs have one source: these helpers put such an object in the
release's namespace and, where asked, turn cluster-wide grants into one namespace's.
*/}}

{{/* Labels the chart adds to every object (config/'s own labels stay). */}}
{{- define "ray-operator.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The namespaces the operator watches, one a line; none: all namespaces. */}}
{{- define "ray-operator.watchNamespaces" -}}
{{- if .Values.watchNamespace -}}
{{- range .Values.watchNamespace }}
{{ required "watchNamespace entries must be namespace names" . }}
{{- end -}}
{{- else if .Values.singleNamespaceInstall -}}
{{ .Release.Namespace }}
{{- end -}}
{{- end -}}

{{/* "true" when the webhooks are served: never with singleNamespaceInstall (their
configurations are cluster-scoped). */}}
{{- define "ray-operator.webhooksOn" -}}
{{- if and .Values.webhooks.enabled (not .Values.singleNamespaceInstall) -}}
{{- if not (has .Values.webhooks.certSource (list "self-managed" "cert-manager")) -}}
{{- fail (printf "webhooks.certSource must be self-managed or cert-manager, not %q" .Values.webhooks.certSource) -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* `kubernetes` or `none`: singleNamespaceInstall cannot have the reviews `kubernetes` needs. */}}
{{- define "ray-operator.metricsAuth" -}}
{{- if .Values.singleNamespaceInstall -}}
none
{{- else if has .Values.metrics.auth (list "kubernetes" "none") -}}
{{ .Values.metrics.auth }}
{{- else -}}
{{- fail (printf "metrics.auth must be kubernetes or none, not %q" .Values.metrics.auth) -}}
{{- end -}}
{{- end -}}

{{/* The batch scheduler's name, from KubeRay's `batchScheduler.name` or its deprecated
`batchScheduler.enabled` (volcano); both at once is refused, as KubeRay refuses it. */}}
{{- define "ray-operator.batchScheduler" -}}
{{- if and .Values.batchScheduler.enabled .Values.batchScheduler.name -}}
{{- fail "batchScheduler.enabled (deprecated: volcano) and batchScheduler.name are both set; set name only" -}}
{{- else if .Values.batchScheduler.enabled -}}
volcano
{{- else if .Values.batchScheduler.name -}}
{{- if not (has .Values.batchScheduler.name (list "volcano" "yunikorn" "scheduler-plugins" "kai-scheduler")) -}}
{{- fail (printf "batchScheduler.name must be volcano, yunikorn, scheduler-plugins or kai-scheduler, not %q" .Values.batchScheduler.name) -}}
{{- end -}}
{{ .Values.batchScheduler.name }}
{{- end -}}
{{- end -}}

{{/* Whether feature gate `gate` is set to true in .Values.featureGates: (list $ "Gate"). */}}
{{- define "ray-operator.gateOn" -}}
{{- $root := index . 0 -}}
{{- range $root.Values.featureGates -}}
{{- if and (eq .name (index $ 1)) .enabled -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The objects of config file `path` (one or more YAML documents), each as a YAML document:
  root: the top context; path: under config/;
  namespace: the namespace of the namespaced objects;
  asRole: turn a ClusterRole into a Role and a ClusterRoleBinding into a RoleBinding (in
          `namespace`), as config/namespaced does;
  kinds: only objects of these kinds (default: all).
ServiceAccount subjects are given the release's namespace (config/ says `system`).
*/}}
{{- define "ray-operator.fromConfig" -}}
{{- $root := .root -}}
{{- $text := $root.Files.Get (printf "config/%s" .path) -}}
{{- if not $text -}}
{{- fail (printf "the chart has no config/%s: is charts/ray-operator/config a link to config/?" .path) -}}
{{- end -}}
{{- $clusterScoped := list "ClusterRole" "ClusterRoleBinding" "MutatingWebhookConfiguration" "ValidatingWebhookConfiguration" "Namespace" "CustomResourceDefinition" -}}
{{- range $document := regexSplit "(?m)^---[ \t]*$" $text -1 -}}
{{- $object := fromYaml $document -}}
{{- if and $object.kind (or (not $.kinds) (has $object.kind ($.kinds | default list))) -}}
{{- if $.asRole -}}
{{- if eq $object.kind "ClusterRole" -}}
{{- $_ := set $object "kind" "Role" -}}
{{- else if eq $object.kind "ClusterRoleBinding" -}}
{{- $_ := set $object "kind" "RoleBinding" -}}
{{- $_ := set $object.roleRef "kind" "Role" -}}
{{- end -}}
{{- end -}}
{{- if not (has $object.kind $clusterScoped) -}}
{{- $_ := set $object.metadata "namespace" $.namespace -}}
{{- end -}}
{{- range $object.subjects -}}
{{- if eq .kind "ServiceAccount" -}}
{{- $_ := set . "namespace" $root.Release.Namespace -}}
{{- end -}}
{{- end -}}
{{- $_ := set $object.metadata "labels" (merge (dict) ($object.metadata.labels | default dict) (include "ray-operator.labels" $root | fromYaml)) }}
---
{{ toYaml $object }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The grants of config file `path` (a role and, where there is one, its binding): cluster-wide,
or, when the operator watches given namespaces (`namespaces`, a list), a Role and RoleBinding
in each of them only.
*/}}
{{- define "ray-operator.grants" -}}
{{- if .namespaces -}}
{{- range $namespace := .namespaces -}}
{{ include "ray-operator.fromConfig" (dict "root" $.root "path" $.path "namespace" $namespace "asRole" true) }}
{{- end -}}
{{- else -}}
{{ include "ray-operator.fromConfig" (dict "root" .root "path" .path "namespace" .root.Release.Namespace) }}
{{- end -}}
{{- end -}}

{{/* The labels of a monitoring object (list: the root context, its additionalLabels, config/'s
labels): `metrics.release` as `release`, the extra labels, config/'s and the chart's. */}}
{{- define "ray-operator.monitoringLabels" -}}
{{- $root := index . 0 -}}
{{- $release := dict -}}
{{- with $root.Values.metrics.release }}{{ $_ := set $release "release" . }}{{ end -}}
{{- toYaml (merge (dict) (index . 1) $release (index . 2) (include "ray-operator.labels" $root | fromYaml)) -}}
{{- end -}}
