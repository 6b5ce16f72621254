{{/*
Names and labels. Only .Release.Name and .Release.Namespace are used (EKS add-on rule).
*/}}
{{- define "igw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "igw.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "igw.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "igw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "igw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "igw.labels" -}}
helm.sh/chart: {{ include "igw.chart" . }}
{{ include "igw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: inference-gateway
{{- end }}

{{- define "igw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "igw.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "igw.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* TLS in the pod: the container serves HTTPS with the cert-manager certificate. */}}
{{- define "igw.podTls" -}}
{{- if .Values.certManager.enabled }}true{{- end }}
{{- end }}

{{- define "igw.portName" -}}
{{- if include "igw.podTls" . }}https{{ else }}http{{ end }}
{{- end }}

{{- define "igw.tlsSecretName" -}}
{{- printf "%s-tls" (include "igw.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "igw.issuerName" -}}
{{- if .Values.certManager.issuerRef.name }}
{{- .Values.certManager.issuerRef.name }}
{{- else }}
{{- printf "%s-selfsigned" (include "igw.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Namespace of the served InferenceGatewayConfig: its schedulers' model-server pods live there. */}}
{{- define "igw.configNamespace" -}}
{{- default .Release.Namespace .Values.gateway.config.namespace }}
{{- end }}

{{/* The spec served: the user's, plus spec.extensions.tlsTermination pointing at the cert-manager Secret
when the pod terminates TLS (unless the user set it). */}}
{{- define "igw.configSpec" -}}
{{- $spec := deepCopy .Values.gateway.config.spec }}
{{- if include "igw.podTls" . }}
{{- $extensions := dict }}
{{- if hasKey $spec "extensions" }}{{- $extensions = get $spec "extensions" }}{{- end }}
{{- if not (hasKey $extensions "tlsTermination") }}
{{- $_ := set $extensions "tlsTermination" (dict "certFile" "/etc/igw/tls/tls.crt" "keyFile" "/etc/igw/tls/tls.key") }}
{{- end }}
{{- $_ := set $spec "extensions" $extensions }}
{{- end }}
{{- toYaml $spec }}
{{- end }}

{{- define "igw.configFile" -}}
/etc/igw/config/inferencegatewayconfig.yaml
{{- end }}
