{{/*
Cross-field rules the schema cannot express (draft-06 has no if/then); each fails fast with the value's path.
*/}}
{{- define "igw.validate" -}}
{{- if and .Values.certManager.enabled (not .Values.certManager.selfSigned) (not .Values.certManager.issuerRef.name) }}
{{- fail "certManager.issuerRef.name is required when certManager.enabled is true and certManager.selfSigned is false" }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (ge (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) }}
{{- fail (printf "podDisruptionBudget.minAvailable (%v) must be below replicaCount (%v), or no node could ever be drained" .Values.podDisruptionBudget.minAvailable .Values.replicaCount) }}
{{- end }}
{{- if and (eq .Values.service.type "ClusterIP") .Values.service.tls.certificateArn }}
{{- fail "service.tls.certificateArn needs service.type LoadBalancer (the NLB terminates TLS)" }}
{{- end }}
{{- if eq (int .Values.gateway.managementPort) (int .Values.gateway.port) }}
{{- fail (printf "gateway.managementPort (%v) must differ from gateway.port: metrics and pod detail would be served to inference clients" .Values.gateway.managementPort) }}
{{- end }}
{{- if and .Values.podMonitor.enabled (not .Values.podMonitor.selector) }}
{{- fail "podMonitor.selector is required when podMonitor.enabled is true (the model server pods' labels)" }}
{{- end }}
{{- end }}
