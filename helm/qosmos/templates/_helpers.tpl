{{/* Names: <fullname>-<component>, at most 63 characters. */}}
{{- define "qosmos.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "qosmos.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* (dict "root" . "component" "operator") */}}
{{- define "qosmos.component" -}}
{{- printf "%s-%s" (include "qosmos.fullname" .root) .component -}}
{{- end -}}

{{- define "qosmos.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: qosmos
{{ include "qosmos.selectorLabels" . }}
{{- end -}}

{{- define "qosmos.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qosmos.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of chart-wide objects (CRDs, cluster roles without a component). */}}
{{- define "qosmos.chartLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: qosmos
app.kubernetes.io/name: {{ include "qosmos.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The qosmos image of a component: (dict "root" . "image" .Values.operator.image).
A component that names its own repository uses only its own fields; otherwise .Values.image.
A digest wins over a tag; the tag defaults to the chart's appVersion.
*/}}
{{- define "qosmos.image" -}}
{{- $img := .root.Values.image -}}
{{- if and .image .image.repository -}}{{- $img = .image -}}{{- end -}}
{{- $tag := $img.tag | default .root.Chart.AppVersion -}}
{{- if $img.registry -}}{{ $img.registry }}/{{- end -}}
{{ $img.repository }}{{ if $img.digest }}@{{ $img.digest }}{{ else }}:{{ $tag }}{{ end }}
{{- end -}}

{{- define "qosmos.pullPolicy" -}}
{{- if and .image .image.pullPolicy -}}{{ .image.pullPolicy }}{{- else -}}{{ .root.Values.image.pullPolicy }}{{- end -}}
{{- end -}}

{{/* kube-scheduler's image; tag "" follows the cluster's version (v1.34.4-eks-... -> v1.34.4). */}}
{{- define "qosmos.schedulerImage" -}}
{{- $img := .Values.scheduler.image -}}
{{- $tag := $img.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- if $img.registry -}}{{ $img.registry }}/{{- end -}}
{{ $img.repository }}{{ if $img.digest }}@{{ $img.digest }}{{ else }}:{{ $tag }}{{ end }}
{{- end -}}

{{/* The Secret holding a TLS pair plus ca.crt: (dict "root" . "for" "extender"|"scheduler"|"metrics"). */}}
{{- define "qosmos.tlsSecret" -}}
{{- if eq .root.Values.tls.mode "secrets" -}}
{{- index .root.Values.tls.secrets .for -}}
{{- else -}}
{{- printf "%s-%s-tls" (include "qosmos.fullname" .root) .for -}}
{{- end -}}
{{- end -}}

{{/* The extender's Service DNS names (the certificate's SANs; the scheduler calls the .svc one). */}}
{{- define "qosmos.extenderHosts" -}}
{{- $svc := include "qosmos.component" (dict "root" . "component" "extender") -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.tls.clusterDomain) | toJson -}}
{{- end -}}

{{- define "qosmos.extenderURL" -}}
{{- printf "https://%s.%s.svc:%d" (include "qosmos.component" (dict "root" . "component" "extender")) .Release.Namespace (int .Values.extender.httpPort) -}}
{{- end -}}

{{/* A restricted container: non-root, read-only root, no capabilities. */}}
{{- define "qosmos.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A PodDisruptionBudget for a replicated component: (dict "root" . "component" "operator" "values" .Values.operator). */}}
{{- define "qosmos.pdb" -}}
{{- if and .values.podDisruptionBudget.enabled (gt (int .values.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "qosmos.component" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "qosmos.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .values.podDisruptionBudget.maxUnavailable }}
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "qosmos.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}
