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
app.kubernetes.io/name: {{ include "igw.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
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

{{/*
Gateway mode: the management listener's port, one value for every place that names it (igw serve
--management-port, the container port, the management Service, the NetworkPolicy).
gateway.config.spec.extensions.management.port wins when the served config sets it (the config is the
contract igw serve reads); gateway.managementPort is only the default. igw.managementPortPath names
the value it came from, for error messages.
*/}}
{{- define "igw.managementPort" -}}
{{- $management := ((((.Values.gateway.config | default dict).spec | default dict).extensions | default dict).management | default dict) }}
{{- if hasKey $management "port" }}{{- int $management.port }}{{- else }}{{- int .Values.gateway.managementPort }}{{- end }}
{{- end }}

{{- define "igw.managementPortPath" -}}
{{- $management := ((((.Values.gateway.config | default dict).spec | default dict).extensions | default dict).management | default dict) }}
{{- if hasKey $management "port" }}gateway.config.spec.extensions.management.port{{- else }}gateway.managementPort{{- end }}
{{- end }}

{{/*
The annotations the chart itself sets on the gateway Service, as YAML: the AWS Load Balancer
Controller's NLB with IP targets, from service.type, service.scheme, service.tls.* and
certManager.enabled. service.annotations may not repeat one (igw.validateOwnAnnotations): a key
written twice is decoded last-one-wins, so it silently replaced the chart's value.
*/}}
{{- define "igw.serviceAnnotations" -}}
{{- if eq .Values.service.type "LoadBalancer" }}
service.beta.kubernetes.io/aws-load-balancer-type: external
service.beta.kubernetes.io/aws-load-balancer-nlb-target-type: ip
service.beta.kubernetes.io/aws-load-balancer-scheme: {{ .Values.service.scheme | quote }}
{{- if .Values.service.tls.certificateArn }}
service.beta.kubernetes.io/aws-load-balancer-ssl-cert: {{ .Values.service.tls.certificateArn | quote }}
service.beta.kubernetes.io/aws-load-balancer-ssl-ports: {{ include "igw.portName" . | quote }}
service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy: {{ .Values.service.tls.sslPolicy | quote }}
service.beta.kubernetes.io/aws-load-balancer-backend-protocol: {{ if include "igw.podTls" . }}ssl{{ else }}tcp{{ end }}
{{- end }}
service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol: {{ include "igw.portName" . | upper | quote }}
service.beta.kubernetes.io/aws-load-balancer-healthcheck-path: /readyz
service.beta.kubernetes.io/aws-load-balancer-target-group-attributes: {{ printf "deregistration_delay.timeout_seconds=%v" .Values.preStopSleepSeconds | quote }}
{{- end }}
{{- end }}

{{- define "igw.configFile" -}}
/etc/igw/config/inferencegatewayconfig.yaml
{{- end }}

{{/* Seconds in a Go duration (time.ParseDuration, what cert-manager reads: 1h30m, 2160h, 0.5h, 100ms), as a float. */}}
{{- define "igw.goDurationSeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|h|m|s)" (toString .) -1 }}
{{- $unit := regexFind "(ns|us|µs|ms|h|m|s)$" . }}
{{- $total = addf $total (mulf (trimSuffix $unit .) (get $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/* A Kubernetes quantity (500m, 2, 1.5Gi, 64Mi, 1k) as a float in its base unit, for comparisons. */}}
{{- define "igw.quantity" -}}
{{- $factors := dict "" 1.0 "m" 0.001 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 }}
{{- $text := toString . }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $text }}
{{- mulf $number (get $factors (trimPrefix $number $text)) }}
{{- end }}

{{/* Seconds in a Gateway API duration (GEP-2257: 1-4 groups of digits and h, m, s or ms), as a float. */}}
{{- define "igw.durationSeconds" -}}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(ms|h|m|s)" . -1 }}
{{- if hasSuffix "ms" . }}{{- $total = addf $total (divf (trimSuffix "ms" .) 1000) }}
{{- else if hasSuffix "h" . }}{{- $total = addf $total (mulf (trimSuffix "h" .) 3600) }}
{{- else if hasSuffix "m" . }}{{- $total = addf $total (mulf (trimSuffix "m" .) 60) }}
{{- else }}{{- $total = addf $total (trimSuffix "s" .) }}{{- end }}
{{- end }}
{{- $total }}
{{- end }}

{{/* The operator pod's terminationGracePeriodSeconds, from operator.leaderElection; the operator's
igw.operator.runner.termination_grace_s computes the same. After SIGTERM the leader stops kopf
(10 s at most), joins its handler threads (5 s), waits for its API calls (each ends by the renew
deadline it saw: max(5, renewDeadlineSeconds)), then releases the Lease (a renewal in flight, the read,
the write: 3 x 0.75 x retryPeriodSeconds); rounded up, plus 5 s for the exit. Shorter, the kubelet
kills it before the release and the standby waits out the whole lease. */}}
{{- define "igw.operatorTerminationGrace" -}}
{{- $election := .Values.operator.leaderElection }}
{{- $calls := maxf 5 (float64 $election.renewDeadlineSeconds) }}
{{- $release := mulf 2.25 (float64 $election.retryPeriodSeconds) }}
{{- add (int64 (ceil (addf 15 $calls $release))) 5 }}
{{- end }}

{{/* Gateway-mode shutdown timing as JSON {drain, grace, termination}; the operator's
igw.operator.shutdown_timing computes the same. preStop sleep, then the drain (serverLimits.drainPeriod,
else 5 s) not-ready while serving, then the stream grace (serverLimits.streamGrace, else what
terminationGracePeriodSeconds leaves), then 10 s to end what is left. A configured drain or grace is
kept and the grace period raised to cover it. */}}
{{- define "igw.shutdownTiming" -}}
{{- $limits := dig "extensions" "serverLimits" (dict) .Values.gateway.config.spec }}
{{- $preStop := float64 .Values.preStopSleepSeconds }}
{{- $termination := float64 .Values.terminationGracePeriodSeconds }}
{{- $drain := 5.0 }}
{{- if hasKey $limits "drainPeriod" }}{{- $drain = include "igw.durationSeconds" $limits.drainPeriod | float64 }}{{- end }}
{{- $grace := 0.0 }}
{{- if hasKey $limits "streamGrace" }}
{{- $grace = include "igw.durationSeconds" $limits.streamGrace | float64 }}
{{- else }}
{{- $grace = subf $termination $preStop $drain 10 }}
{{- if and (lt $grace 0.0) (not (hasKey $limits "drainPeriod")) }}
{{- fail "terminationGracePeriodSeconds: must be at least preStopSleepSeconds + 15 (drain and shutdown)" }}
{{- end }}
{{- $grace = maxf $grace 0 }}
{{- end }}
{{- $termination = maxf $termination (ceil (addf $preStop $drain $grace 10)) }}
{{- dict "drain" $drain "grace" $grace "termination" (int64 $termination) | toJson }}
{{- end }}

{{/*
Gateway mode: a digest of the served configuration igw serve reads only when it starts
(igw.config.restart_only.RESTART_ONLY: serverLimits, tlsTermination, management, globalHeartbeat),
empty when none is set. On the pod template, so a helm upgrade that changes one rolls the pods; a hot
reload would keep the running values. serverLimits.maxBodyBytesHeld is left out: the hot reload
applies it (LIVE_SERVER_LIMITS). tests/addon/test_chart_served_config.py keeps the lists equal to
the Python ones.
*/}}
{{- define "igw.restartConfig" -}}
{{- $extensions := (include "igw.configSpec" . | fromYaml).extensions | default dict }}
{{- $restart := dict }}
{{- range $name := list "serverLimits" "tlsTermination" "management" "globalHeartbeat" }}
{{- if hasKey $extensions $name }}{{- $_ := set $restart $name (get $extensions $name) }}{{- end }}
{{- end }}
{{- if kindIs "map" $restart.serverLimits }}
{{- $limits := omit $restart.serverLimits "maxBodyBytesHeld" }}
{{- if $limits }}{{- $_ := set $restart "serverLimits" $limits }}{{- else }}{{- $_ := unset $restart "serverLimits" }}{{- end }}
{{- end }}
{{- if $restart }}{{- toJson $restart | sha256sum | trunc 16 }}{{- end }}
{{- end }}

{{/*
Gateway mode: the Redis ports the served configuration connects to, comma-separated (empty: none):
shared rate limits' (spec.extensions.rateLimits with the redis backend) and the global heartbeat
store's (spec.extensions.globalHeartbeat), each its URL's port or 6379. The NetworkPolicy opens
them, as igw operator's does (igw.operator.dataplane._redis_ports).
*/}}
{{- /*
The HTTPS ports gateway mode's NetworkPolicy opens: 443, the port of the JWT provider's
remoteJWKS.uri and, with extensions.authorization.oidcDiscovery, of its issuer (as operator mode).
*/ -}}
{{- define "igw.httpsPorts" -}}
{{- $spec := include "igw.configSpec" . | fromYaml }}
{{- $ports := list "443" }}
{{- $provider := (($spec.auth | default dict).jwt | default dict).provider | default dict }}
{{- if kindIs "map" $provider }}
{{- $urls := list (($provider.remoteJWKS | default dict).uri | default "") }}
{{- $authorization := (($spec.extensions | default dict).authorization | default dict) }}
{{- if eq (toString (get $authorization "oidcDiscovery")) "true" }}
{{- $urls = append $urls ($provider.issuer | default "") }}
{{- end }}
{{- range $url := $urls }}
{{- if $url }}
{{- $port := regexFind ":[0-9]+$" (urlParse $url).host | trimPrefix ":" | default "443" }}
{{- $ports = append $ports $port }}
{{- end }}
{{- end }}
{{- end }}
{{- $ports | uniq | join "," }}
{{- end }}

{{- define "igw.redisPorts" -}}
{{- $extensions := (include "igw.configSpec" . | fromYaml).extensions | default dict }}
{{- $urls := list }}
{{- $limits := get $extensions "rateLimits" | default dict }}
{{- if eq (get $limits "backend" | default "") "redis" }}
{{- $urls = append $urls ((get $limits "redis" | default dict).url | default "redis://127.0.0.1:6379/0") }}
{{- end }}
{{- with get $extensions "globalHeartbeat" }}
{{- $urls = append $urls ((get . "redis" | default dict).url | default "redis://127.0.0.1:6379/0") }}
{{- end }}
{{- $ports := list }}
{{- range $url := $urls }}
{{- $parsed := urlParse $url }}
{{- if ne $parsed.scheme "unix" }}
{{- $port := regexFind ":[0-9]+$" $parsed.host | trimPrefix ":" | default "6379" }}
{{- $ports = append $ports $port }}
{{- end }}
{{- end }}
{{- $ports | uniq | sortAlpha | join "," }}
{{- end }}
