{{/* Names and labels of the operator (mode: operator). */}}
{{- define "igw.operatorName" -}}
{{- printf "%s-operator" (include "igw.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "igw.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "igw.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "igw.operatorLabels" -}}
helm.sh/chart: {{ include "igw.chart" . }}
{{ include "igw.operatorSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: inference-gateway
{{- end }}

{{/*
What the operator does in a watched namespace, verb by verb (igw/operator/kube.py and kopf):
read, create, replace (update) and delete each data-plane kind: it deletes the HorizontalPodAutoscaler
it made once a spec stops asking for one, and adopts the orphans `kubectl delete --cascade=orphan`
leaves when the config is applied again, a replace that sets their owner reference, which the
OwnerReferencesPermissionEnforcement admission plugin (hardened and OpenShift clusters) admits only
from a caller that may delete the object ("cannot set an ownerRef on a resource you can't delete").
The operator already holds update on these kinds, which can rewrite them wholly; delete adds only
their removal. With networkPolicy.enabled: false only read and delete the
gateways' NetworkPolicies (it deletes the ones it made before, and makes none); list pods for status; post Events; for
spec.tls: {} read, create, replace and delete cert-manager Certificates, read their Secrets and delete
the one of a Certificate it deletes, and list the Secrets carrying its labels (the orphan sweep of
configs deleted while no operator ran; igw/operator/tls.py KUBE_ACCESS), and read the one Issuer
(here) or ClusterIssuer (in the ClusterRole) operator.tlsIssuer names, while a Certificate waits for
it, to report it missing or not Ready (that name only); none of that with
operator.autoTls: false (RBAC cannot narrow Secrets to the operator's own, so the switch is the way
to take cluster-wide Secret access away).
Roles and RoleBindings: get/create/update only, without resourceNames: the operator creates one of
each per InferenceGatewayConfig, named after it (`<name>-gateway`), so no fixed name exists, and
RBAC cannot restrict `create` by name anyway; `update` puts back an edited one and, with `delete`,
adopts an orphan.
No bind/escalate: it can only grant what it holds itself.
Every data-plane object carries an owner reference to its InferenceGatewayConfig with
blockOwnerDeletion: true, which the OwnerReferencesPermissionEnforcement admission plugin (hardened and
OpenShift clusters) admits only from a caller that may update the owner's finalizers subresource: hence
update on inferencegatewayconfigs/finalizers (the operator never writes that subresource itself).
It must itself hold the read access it grants the gateway pods' Role (pods, ConfigMaps), or the API
server refuses to create that Role (RBAC escalation prevention).
*/}}
{{- define "igw.operatorNamespacedRules" -}}
- apiGroups: ["inference.sagemaker.aws.amazon.com"]
  resources: ["inferencegatewayconfigs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["inference.sagemaker.aws.amazon.com"]
  resources: ["inferencegatewayconfigs/status"]
  verbs: ["patch"]
- apiGroups: ["inference.sagemaker.aws.amazon.com"]
  resources: ["inferencegatewayconfigs/finalizers"]
  verbs: ["update"]
- apiGroups: ["inference.networking.x-k8s.io"]
  resources: ["inferenceobjectives", "inferencemodelrewrites"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["inference.networking.x-k8s.io"]
  resources: ["inferenceobjectives/status", "inferencemodelrewrites/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  {{- if .Values.networkPolicy.enabled }}
  verbs: ["get", "create", "update", "delete"]
  {{- else }}
  verbs: ["get", "delete"]
  {{- end }}
{{- if .Values.operator.autoTls }}
- apiGroups: ["cert-manager.io"]
  resources: ["certificates"]
  verbs: ["get", "create", "update", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "delete"]
- apiGroups: ["cert-manager.io"]
  resources: ["issuers"]
  resourceNames: [{{ include "igw.operatorIssuerName" . | quote }}]
  verbs: ["get"]
{{- end }}
{{- end }}

{{- /*
The NAME of operator.tlsIssuer (KIND/NAME): the one Issuer or ClusterIssuer the operator reads while a
Certificate waits, to report it missing or not Ready (igw/operator/tls.py issuer_problem).
*/}}
{{- define "igw.operatorIssuerName" -}}
{{- splitList "/" .Values.operator.tlsIssuer | last -}}
{{- end }}
