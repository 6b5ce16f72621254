{{/*
Cross-field rules the schema cannot express (draft-06 has no if/then); each fails fast with the value's path.
*/}}
{{- define "igw.validate" -}}
{{- if and .Values.certManager.enabled (not .Values.certManager.selfSigned) (not .Values.certManager.issuerRef.name) }}
{{- fail "certManager.issuerRef.name is required when certManager.enabled is true and certManager.selfSigned is false" }}
{{- end }}
{{- /* With autoscaling the HPA may hold the Deployment at minReplicas: the PDB must leave one of those evictable. */}}
{{- $floorPath := "replicaCount" }}
{{- $floor := .Values.replicaCount }}
{{- if and (eq .Values.mode "gateway") .Values.autoscaling.enabled }}
{{- include "igw.validateAutoscaling" . }}
{{- $floorPath = "autoscaling.minReplicas" }}
{{- $floor = .Values.autoscaling.minReplicas }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (ge (int .Values.podDisruptionBudget.minAvailable) (int $floor)) }}
{{- fail (printf "podDisruptionBudget.minAvailable (%v) must be below %s (%v), or no node could ever be drained" .Values.podDisruptionBudget.minAvailable $floorPath $floor) }}
{{- end }}
{{- if and (eq .Values.service.type "ClusterIP") .Values.service.tls.certificateArn }}
{{- fail "service.tls.certificateArn needs service.type LoadBalancer (the NLB terminates TLS)" }}
{{- end }}
{{- if eq (include "igw.managementPort" . | int) (int .Values.gateway.port) }}
{{- fail (printf "%s (%s) must differ from gateway.port: metrics and pod detail would be served to inference clients" (include "igw.managementPortPath" .) (include "igw.managementPort" .)) }}
{{- end }}
{{- /* Every igw serve flag the chart passes, and what sets it: argparse takes the last occurrence, so a
repeat in gateway.extraArgs would silently win over the chart's (the drain and stream grace would
outlast the grace period the chart checked them against). */}}
{{- $chartFlags := dict
  "--config" "the chart (the ConfigMap of gateway.config)"
  "--in-cluster" "the chart (configs and pods are read from the API server)"
  "--host" "the chart (0.0.0.0: the load balancer and the kubelet's probes reach the pod's address)"
  "--port" "gateway.port"
  "--management-port" (include "igw.managementPortPath" .)
  "--log-level" "gateway.logLevel"
  "--drain-seconds" "terminationGracePeriodSeconds/preStopSleepSeconds or gateway.config.spec.extensions.serverLimits.drainPeriod"
  "--stream-grace-seconds" "terminationGracePeriodSeconds/preStopSleepSeconds or gateway.config.spec.extensions.serverLimits.streamGrace"
  "--workers" "gateway.workers"
  "--worker-timeout" "gateway.workerTimeoutSeconds"
  "--emf-interval" "gateway.cloudWatch.emfIntervalSeconds"
  "--emf-endpoint" "gateway.cloudWatch.agent"
}}
{{- range $index, $arg := .Values.gateway.extraArgs }}
{{- $flag := regexReplaceAll "=.*$" (toString $arg) "" }}
{{- if hasKey $chartFlags $flag }}
{{- fail (printf "gateway.extraArgs[%d]: %s is set by %s; a second one would silently win over it" $index $flag (get $chartFlags $flag)) }}
{{- end }}
{{- end }}
{{- /* cert-manager's own limits (its webhook refuses the Certificate only at install): lifetime >= 1h, renewBefore >= 5m and < lifetime. */}}
{{- $duration := include "igw.goDurationSeconds" .Values.certManager.duration | float64 }}
{{- $renewBefore := include "igw.goDurationSeconds" .Values.certManager.renewBefore | float64 }}
{{- if lt $duration 3600.0 }}
{{- fail (printf "certManager.duration (%s) must be at least 1h: cert-manager refuses a shorter certificate lifetime" .Values.certManager.duration) }}
{{- end }}
{{- if lt $renewBefore 300.0 }}
{{- fail (printf "certManager.renewBefore (%s) must be at least 5m: cert-manager refuses a shorter renewal window" .Values.certManager.renewBefore) }}
{{- end }}
{{- if ge $renewBefore $duration }}
{{- fail (printf "certManager.renewBefore (%s) must be shorter than certManager.duration (%s): cert-manager would renew the certificate as soon as it is issued" .Values.certManager.renewBefore .Values.certManager.duration) }}
{{- end }}
{{- include "igw.validateResources" (dict "path" "resources" "resources" .Values.resources) }}
{{- include "igw.validateResources" (dict "path" "operator.resources" "resources" .Values.operator.resources) }}
{{- if and .Values.podMonitor.enabled (not .Values.podMonitor.selector) }}
{{- fail "podMonitor.selector is required when podMonitor.enabled is true (the model server pods' labels)" }}
{{- end }}
{{- if eq .Values.mode "gateway" }}
{{- /* The name of the gateway's Services: a DNS-1035 label (Helm takes release names such as 1gw or igw.prod). */}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" (include "igw.fullname" .)) }}
{{- fail (printf "the gateway's Service would be named %q (from %s), which the API server refuses: a Service name starts with a lower-case letter and holds only letters, digits and '-'; set fullnameOverride" (include "igw.fullname" .) (ternary "fullnameOverride" "the release name" (not (empty .Values.fullnameOverride)))) }}
{{- end }}
{{- include "igw.validateNotSelfSelecting" . }}
{{- include "igw.validateOwnAnnotations" . }}
{{- include "igw.validateExtraEnv" . }}
{{- else }}
{{- include "igw.validateGatewayEnv" . }}
{{- include "igw.validateLeaderElection" . }}
{{- end }}
{{- end }}

{{/*
Gateway mode only. podLabels may not set the chart's selector labels (the pod template held the key
twice: the Deployment's selector no longer matched its own pods). A scheduler whose modelSelector
the gateway's own pods satisfy (the chart's selector labels plus podLabels, when the served config's
model servers are discovered in the release namespace) makes the gateway route requests to itself.
The operator path refuses the same (admission rule gateway-pods-not-model-servers, on
spec.podDefaults.labels); here every label value is known, so the selector is evaluated exactly,
with Kubernetes' label-selector semantics.
*/}}
{{- define "igw.validateNotSelfSelecting" -}}
{{- range $key, $_ := (include "igw.selectorLabels" . | fromYaml) }}
{{- if hasKey ($.Values.podLabels | default dict) $key }}
{{- fail (printf "podLabels.%s: the chart sets this label on the gateway's pods itself (its Deployment, Service and PodDisruptionBudget select the pods by it); remove it from podLabels" $key) }}
{{- end }}
{{- end }}
{{- $config := .Values.gateway.config | default dict }}
{{- if eq (($config.namespace | default "") | default .Release.Namespace) .Release.Namespace }}
{{- $labels := dict }}
{{- range $key, $value := (.Values.podLabels | default dict) }}{{- $_ := set $labels $key (toString $value) }}{{- end }}
{{- range $key, $value := (include "igw.selectorLabels" . | fromYaml) }}{{- $_ := set $labels $key (toString $value) }}{{- end }}
{{- range $index, $scheduler := (($config.spec | default dict).schedulers | default list) }}
{{- $selector := $scheduler.modelSelector | default dict }}
{{- $matchLabels := $selector.matchLabels | default dict }}
{{- $expressions := $selector.matchExpressions | default list }}
{{- if or $matchLabels $expressions }}
{{- $selected := true }}
{{- range $key, $value := $matchLabels }}
{{- if not (and (hasKey $labels $key) (eq (get $labels $key) (toString $value))) }}{{- $selected = false }}{{- end }}
{{- end }}
{{- range $expressions }}
{{- $has := hasKey $labels .key }}
{{- $listed := and $has (has (get $labels .key) (.values | default list)) }}
{{- if and (eq .operator "Exists") (not $has) }}{{- $selected = false }}{{- end }}
{{- if and (eq .operator "DoesNotExist") $has }}{{- $selected = false }}{{- end }}
{{- if and (eq .operator "In") (not $listed) }}{{- $selected = false }}{{- end }}
{{- if and (eq .operator "NotIn") $listed }}{{- $selected = false }}{{- end }}
{{- end }}
{{- if $selected }}
{{- fail (printf "gateway.config.spec.schedulers[%d].modelSelector selects the gateway's own pods (their labels %s: the chart's selector labels plus podLabels), so the gateway would route requests to itself; change podLabels or the modelSelector" $index (toJson $labels)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Gateway mode with autoscaling.enabled. The ranges are also the values schema's (minReplicas >= 1, the
target 1..100), which Helm checks first; they are repeated here for installs that skip the schema
(helm --skip-schema-validation). maxReplicas below minReplicas the API server refuses only at install.
A utilization target needs the container's CPU request: the HPA measures CPU use as a percentage of
it, and without one it reports FailedGetResourceMetric and never scales.
*/}}
{{- define "igw.validateAutoscaling" -}}
{{- with .Values.autoscaling }}
{{- if lt (int .minReplicas) 1 }}
{{- fail (printf "autoscaling.minReplicas (%v) must be at least 1" .minReplicas) }}
{{- end }}
{{- if lt (int .maxReplicas) (int .minReplicas) }}
{{- fail (printf "autoscaling.maxReplicas (%v) must be at least autoscaling.minReplicas (%v)" .maxReplicas .minReplicas) }}
{{- end }}
{{- if or (lt (int .targetCPUUtilizationPercentage) 1) (gt (int .targetCPUUtilizationPercentage) 100) }}
{{- fail (printf "autoscaling.targetCPUUtilizationPercentage (%v) must be between 1 and 100 (percent of the CPU request)" .targetCPUUtilizationPercentage) }}
{{- end }}
{{- end }}
{{- $requests := (.Values.resources | default dict).requests | default dict }}
{{- if not (and (hasKey $requests "cpu") (gt (include "igw.quantity" (get $requests "cpu") | float64) 0.0)) }}
{{- fail "resources.requests.cpu is required when autoscaling.enabled is true: the HorizontalPodAutoscaler's CPU utilization is a percentage of the container's CPU request, and 0 or none gives it nothing to scale on" }}
{{- end }}
{{- end }}

{{/*
Each resource in limits must be at least its request (the API server refuses the pod otherwise, only
at install: the add-on went CREATE_FAILED). Called with dict "path" (the values path) "resources".
*/}}
{{- define "igw.validateResources" -}}
{{- $resources := .resources | default dict }}
{{- $requests := $resources.requests | default dict }}
{{- range $name, $limit := ($resources.limits | default dict) }}
{{- if hasKey $requests $name }}
{{- $request := get $requests $name }}
{{- if lt (include "igw.quantity" $limit | float64) (include "igw.quantity" $request | float64) }}
{{- fail (printf "%s.limits.%s (%v) is below %s.requests.%s (%v): a limit must be at least its request (the API server refuses the pod)" $.path $name $limit $.path $name $request) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Gateway mode. Annotation maps may not repeat a key the chart writes on the same object: the manifest
then holds the key twice, and Kubernetes' YAML decoding (Helm's and kubectl's) keeps the last one, so
service.annotations silently replaced service.scheme or the TLS policy the schema allow-lists, and
serviceAccount.annotations the IRSA role of serviceAccount.roleArn. The target-group attributes are
the exception: the chart joins the given ones to its deregistration delay, which stays its own.
*/}}
{{- define "igw.validateOwnAnnotations" -}}
{{- $given := .Values.service.annotations | default dict }}
{{- $sources := dict "service.beta.kubernetes.io/aws-load-balancer-scheme" "service.scheme" "service.beta.kubernetes.io/aws-load-balancer-ssl-cert" "service.tls.certificateArn" "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy" "service.tls.sslPolicy" }}
{{- $attributes := "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes" }}
{{- range $key, $_ := (include "igw.serviceAnnotations" . | fromYaml) }}
{{- if and (hasKey $given $key) (ne $key $attributes) }}
{{- $hint := "from service.type, service.tls and certManager.enabled" }}
{{- with get $sources $key }}{{- $hint = printf "set %s instead" . }}{{- end }}
{{- fail (printf "service.annotations.%s: the chart sets this annotation itself (%s); a second one would silently replace it" $key $hint) }}
{{- end }}
{{- end }}
{{- if regexMatch "(^|,)\\s*deregistration_delay\\.timeout_seconds=" (get $given $attributes | default "" | toString) }}
{{- fail (printf "service.annotations.%s: deregistration_delay.timeout_seconds is set by the chart from preStopSleepSeconds (the load balancer must deregister a pod while it still serves); give the other attributes only" $attributes) }}
{{- end }}
{{- if and .Values.serviceAccount.roleArn (hasKey (.Values.serviceAccount.annotations | default dict) "eks.amazonaws.com/role-arn") }}
{{- fail "serviceAccount.annotations.eks.amazonaws.com/role-arn: the chart sets this annotation from serviceAccount.roleArn; give the role once" }}
{{- end }}
{{- if hasKey (.Values.podAnnotations | default dict) "inference.sagemaker.aws.amazon.com/restart-config" }}
{{- fail "podAnnotations.inference.sagemaker.aws.amazon.com/restart-config: the chart sets this annotation itself (a digest of the served config's restart-only settings)" }}
{{- end }}
{{- end }}

{{/*
Gateway mode. gateway.extraEnv names must be unique and not the chart's own (POD_NAME, POD_NAMESPACE,
IGW_CPU_REQUEST_MILLICORES): a container's env is a list keyed by name (x-kubernetes-list-map-keys),
so the server-side apply an EKS add-on installs with refuses a name given twice ("duplicate entries
for key"), and a client-side apply silently ran with whichever came last.
*/}}
{{- define "igw.validateExtraEnv" -}}
{{- $seen := dict "POD_NAME" "the chart" "POD_NAMESPACE" "the chart" "IGW_CPU_REQUEST_MILLICORES" "the chart" }}
{{- range $index, $variable := (.Values.gateway.extraEnv | default list) }}
{{- $name := toString $variable.name }}
{{- with get $seen $name }}
{{- fail (printf "gateway.extraEnv[%d].name: %s is already set by %s; each variable may be given once (the API server's server-side apply refuses a name twice)" $index $name .) }}
{{- end }}
{{- $_ := set $seen $name (printf "gateway.extraEnv[%d]" $index) }}
{{- end }}
{{- end }}

{{/*
Operator mode. operator.gatewayEnv names must be unique and not the operator's own: the operator
(igw operator --gateway-env, igw/operator/dataplane.py RESERVED_ENV) refuses them and would not start.
*/}}
{{- define "igw.validateGatewayEnv" -}}
{{- $seen := dict "IGW_CPU_REQUEST_MILLICORES" "the operator" "OTEL_EXPORTER_OTLP_ENDPOINT" "operator.gatewayOtlpEndpoint (which also opens the NetworkPolicy to its port)" "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" "operator.gatewayOtlpEndpoint (which also opens the NetworkPolicy to its port; this one would win over it)" "AWS_EMF_AGENT_ENDPOINT" "gateway.cloudWatch.agent (which also opens the NetworkPolicy to its port)" "IGW_WORKER" "igw serve itself (the role it gives each worker it starts)" }}
{{- range $index, $variable := (.Values.operator.gatewayEnv | default list) }}
{{- $name := toString $variable.name }}
{{- with get $seen $name }}
{{- fail (printf "operator.gatewayEnv[%d].name: %s is already set by %s; each variable may be given once" $index $name .) }}
{{- end }}
{{- $_ := set $seen $name (printf "operator.gatewayEnv[%d]" $index) }}
{{- end }}
{{- end }}

{{/*
Operator mode. The leader election's durations: igw operator refuses a renew deadline not below the
lease duration or not above 1.2 x the retry period (the election library's rules) and would not start.
*/}}
{{- define "igw.validateLeaderElection" -}}
{{- with .Values.operator.leaderElection }}
{{- if ge (int .renewDeadlineSeconds) (int .leaseDurationSeconds) }}
{{- fail (printf "operator.leaderElection.renewDeadlineSeconds (%v) must be below operator.leaderElection.leaseDurationSeconds (%v): a standby could take the Lease while the leader still acts" .renewDeadlineSeconds .leaseDurationSeconds) }}
{{- end }}
{{- if le (mul 5 (int .renewDeadlineSeconds)) (mul 6 (int .retryPeriodSeconds)) }}
{{- fail (printf "operator.leaderElection.renewDeadlineSeconds (%v) must exceed 1.2 x operator.leaderElection.retryPeriodSeconds (%v): the leader must get more than one try to renew" .renewDeadlineSeconds .retryPeriodSeconds) }}
{{- end }}
{{- end }}
{{- end }}
