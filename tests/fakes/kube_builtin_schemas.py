"""The schemas of some built-in kinds, from a small table: what ``kubectl explain`` reads from the
fake's ``/openapi/v3`` documents, and what the API server's strict decoding knows of their fields.

A real API server publishes every built-in kind's schema (``io.k8s.api.apps.v1.Deployment`` and the
types it references) and decodes a write into its Go type: a field the type lacks is dropped, with a
``Warning`` (``fieldValidation=Warn``, the default), silently (``Ignore``), or refused 400
(``Strict``, what ``kubectl apply``/``create`` send: ``Deployment in version "v1" cannot be handled
as a Deployment: strict decoding error: unknown field "spec.bogus"``). The fake published no schema
for them (``kubectl explain deploy`` failed: ``GVK ... not found in OpenAPI schema``) and stored
whatever a write carried, so a manifest with a typo'd field passed here and failed on a cluster.

The table lists, for each type modelled, every field the type has (Kubernetes 1.33) with its type
and a short description written for the fake. A field whose type is ``object`` (or ``[]object``) is
not modelled deeper: published as an object without properties, and nothing inside it is checked
(Deployment ``status``, a container's ``resources`` or ``securityContext``...). ``metadata`` is
``ObjectMeta`` as :mod:`tests.fakes.kube_openapi` publishes it, not checked here either.

The kinds modelled are those the operator writes: Deployment, Service, ConfigMap, Secret,
ServiceAccount, Event, Role, RoleBinding, PodDisruptionBudget, NetworkPolicy and (autoscaling/v2)
HorizontalPodAutoscaler; and StatefulSet and Pod (``kubectl explain``, ``apply --validate=strict``).

A field of the wrong JSON type (``replicas: "3"``, ``spec: []``, a number in a container's
``command``) fails the decoding whatever the validation directive: :func:`type_error` words it as
Go's JSON decoder does (``json: cannot unmarshal string into Go struct field
DeploymentSpec.spec.replicas of type int32``), checked for the fields the table types (not inside an
``object`` field, not ``int-or-string``, not ``metadata``).

Not modelled: the kinds not in :data:`KIND_TYPES` (no schema, nothing checked: DaemonSet, Job,
Ingress...), duplicate fields, base64 checks of a Secret's ``data``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableSequence
from typing import Any, Final

_CORE: Final = "io.k8s.api.core.v1"
_APPS: Final = "io.k8s.api.apps.v1"
_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1"
_RBAC: Final = "io.k8s.api.rbac.v1"
_POLICY: Final = "io.k8s.api.policy.v1"
_NETWORKING: Final = "io.k8s.api.networking.v1"
_AUTOSCALING: Final = "io.k8s.api.autoscaling.v2"
OBJECT_META_REF: Final = f"{_META}.ObjectMeta"

Field = tuple[str, str]
"""(type, description): ``string``, ``integer``, ``boolean``, ``object`` (not modelled deeper),
``map[string]string``, ``int-or-string``, ``ObjectMeta``, a type of the table by its full name, or
``[]`` and one of those."""

_TYPE_META: Final[dict[str, Field]] = {
    "apiVersion": ("string", "The versioned schema of this representation of the object."),
    "kind": ("string", "The REST resource this object represents, in CamelCase."),
}

TYPES: Final[dict[str, tuple[str, dict[str, Field]]]] = {
    f"{_APPS}.Deployment": (
        "Deployment enables declarative updates for Pods and ReplicaSets.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_APPS}.DeploymentSpec", "Specification of the desired behavior of the Deployment."),
            "status": ("object", "Most recently observed status of the Deployment."),
        },
    ),
    f"{_APPS}.DeploymentSpec": (
        "DeploymentSpec is the specification of the desired behavior of the Deployment.",
        {
            "replicas": ("integer", "Number of desired pods. Defaults to 1."),
            "selector": (
                f"{_META}.LabelSelector",
                "Label selector for pods; must match the template's labels.",
            ),
            "template": (f"{_CORE}.PodTemplateSpec", "Template describes the pods that will be created."),
            "strategy": ("object", "The deployment strategy used to replace existing pods with new ones."),
            "minReadySeconds": (
                "integer",
                "Minimum seconds a new pod is ready before it counts as available.",
            ),
            "revisionHistoryLimit": ("integer", "The number of old ReplicaSets to retain. Defaults to 10."),
            "paused": ("boolean", "Indicates that the deployment is paused."),
            "progressDeadlineSeconds": ("integer", "Maximum seconds for the deployment to make progress."),
        },
    ),
    f"{_APPS}.StatefulSet": (
        "StatefulSet represents a set of pods with consistent identities.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_APPS}.StatefulSetSpec", "Spec defines the desired identities of pods in this set."),
            "status": ("object", "The current status of Pods in this StatefulSet."),
        },
    ),
    f"{_APPS}.StatefulSetSpec": (
        "A StatefulSetSpec is the specification of a StatefulSet.",
        {
            "replicas": ("integer", "The desired number of replicas of the given Template. Defaults to 1."),
            "selector": (
                f"{_META}.LabelSelector",
                "A label query over pods that should match the replica count.",
            ),
            "template": (
                f"{_CORE}.PodTemplateSpec",
                "The object that describes the pod that will be created.",
            ),
            "volumeClaimTemplates": ("[]object", "Claims that pods are allowed to reference."),
            "serviceName": ("string", "The name of the service that governs this StatefulSet."),
            "podManagementPolicy": (
                "string",
                "How pods are created during scaling: OrderedReady or Parallel.",
            ),
            "updateStrategy": ("object", "The strategy used to update pods when the template changes."),
            "revisionHistoryLimit": ("integer", "The maximum number of revisions kept. Defaults to 10."),
            "minReadySeconds": (
                "integer",
                "Minimum seconds a new pod is ready before it counts as available.",
            ),
            "persistentVolumeClaimRetentionPolicy": (
                "object",
                "The lifecycle of persistent volume claims created from volumeClaimTemplates.",
            ),
            "ordinals": ("object", "The start ordinal of the replica indices."),
        },
    ),
    f"{_CORE}.Pod": (
        "Pod is a collection of containers that can run on a host.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_CORE}.PodSpec", "Specification of the desired behavior of the pod."),
            "status": ("object", "Most recently observed status of the pod."),
        },
    ),
    f"{_META}.LabelSelector": (
        "A label selector: the result of matchLabels and matchExpressions are ANDed.",
        {
            "matchLabels": ("map[string]string", "A map of {key,value} pairs, each an equality requirement."),
            "matchExpressions": ("[]object", "A list of label selector requirements."),
        },
    ),
    f"{_CORE}.PodTemplateSpec": (
        "PodTemplateSpec describes the data a pod should have when created from a template.",
        {
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_CORE}.PodSpec", "Specification of the desired behavior of the pod."),
        },
    ),
    f"{_CORE}.PodSpec": (
        "PodSpec is a description of a pod.",
        {
            "volumes": ("[]object", "Volumes that can be mounted by containers of the pod."),
            "initContainers": (f"[]{_CORE}.Container", "Containers run in order before the app containers."),
            "containers": (f"[]{_CORE}.Container", "Containers belonging to the pod. At least one."),
            "ephemeralContainers": ("[]object", "Ephemeral containers run in this pod for debugging."),
            "restartPolicy": ("string", "Restart policy for all containers within the pod."),
            "terminationGracePeriodSeconds": ("integer", "Seconds the pod needs to terminate gracefully."),
            "activeDeadlineSeconds": ("integer", "Seconds the pod may be active before it is failed."),
            "dnsPolicy": ("string", "How the pod's DNS is set up."),
            "nodeSelector": ("map[string]string", "Labels a node must have for the pod to fit on it."),
            "serviceAccountName": ("string", "The name of the ServiceAccount the pod runs as."),
            "serviceAccount": ("string", "Deprecated alias for serviceAccountName."),
            "automountServiceAccountToken": ("boolean", "Whether a service account token is mounted."),
            "nodeName": ("string", "Requests scheduling onto this node."),
            "hostNetwork": ("boolean", "Host networking requested for this pod."),
            "hostPID": ("boolean", "Use the host's pid namespace."),
            "hostIPC": ("boolean", "Use the host's ipc namespace."),
            "shareProcessNamespace": ("boolean", "Share a single process namespace between containers."),
            "securityContext": ("object", "Pod-level security attributes and common container settings."),
            "imagePullSecrets": ("[]object", "Secrets in the same namespace for pulling images."),
            "hostname": ("string", "The hostname of the pod."),
            "subdomain": ("string", "The subdomain of the pod's fully qualified hostname."),
            "affinity": ("object", "The pod's scheduling constraints."),
            "schedulerName": ("string", "The scheduler that dispatches the pod."),
            "tolerations": ("[]object", "The pod's tolerations."),
            "hostAliases": ("[]object", "Entries added to the pod's hosts file."),
            "priorityClassName": ("string", "The pod's priority class."),
            "priority": ("integer", "The priority value, set from the priority class."),
            "dnsConfig": ("object", "DNS parameters of the pod."),
            "readinessGates": ("[]object", "Conditions evaluated for the pod's readiness."),
            "runtimeClassName": ("string", "The RuntimeClass the pod runs with."),
            "enableServiceLinks": ("boolean", "Whether service information is injected as environment."),
            "preemptionPolicy": ("string", "The policy for preempting pods with lower priority."),
            "overhead": ("map[string]string", "Resource overhead of running the pod's sandbox."),
            "topologySpreadConstraints": ("[]object", "How the pods spread across topology domains."),
            "setHostnameAsFQDN": ("boolean", "The pod's hostname is its fully qualified domain name."),
            "os": ("object", "The OS of the pod's containers."),
            "hostUsers": ("boolean", "Use the host's user namespace."),
            "schedulingGates": ("[]object", "Gates that block scheduling the pod."),
            "resourceClaims": ("[]object", "Dynamic resources the pod claims."),
            "resources": ("object", "Total resources of the pod's containers (pod-level resources)."),
        },
    ),
    f"{_CORE}.Container": (
        "A single application container to run within a pod.",
        {
            "name": ("string", "Name of the container, unique within the pod (DNS_LABEL)."),
            "image": ("string", "Container image name."),
            "command": ("[]string", "Entrypoint array; the image's ENTRYPOINT when absent."),
            "args": ("[]string", "Arguments to the entrypoint; the image's CMD when absent."),
            "workingDir": ("string", "The container's working directory."),
            "ports": ("[]object", "Ports to expose from the container."),
            "envFrom": ("[]object", "Sources of environment variables."),
            "env": ("[]object", "Environment variables to set in the container."),
            "resources": ("object", "Compute resources required by this container."),
            "resizePolicy": ("[]object", "Resize policy of the container's resources."),
            "restartPolicy": ("string", "Restart behavior of an init container (Always: a sidecar)."),
            "volumeMounts": ("[]object", "Pod volumes to mount into the container's filesystem."),
            "volumeDevices": ("[]object", "Block devices the container uses."),
            "livenessProbe": ("object", "Periodic probe of container liveness."),
            "readinessProbe": ("object", "Periodic probe of container service readiness."),
            "startupProbe": ("object", "Probe that the pod has initialized."),
            "lifecycle": ("object", "Actions taken in response to container lifecycle events."),
            "terminationMessagePath": ("string", "Where the container's termination message is written."),
            "terminationMessagePolicy": ("string", "How the termination message is populated."),
            "imagePullPolicy": ("string", "Image pull policy: Always, Never or IfNotPresent."),
            "securityContext": ("object", "Security options the container runs with."),
            "stdin": ("boolean", "Allocate a buffer for stdin in the container runtime."),
            "stdinOnce": ("boolean", "Close the stdin channel after it has been opened once."),
            "tty": ("boolean", "Allocate a TTY for the container."),
        },
    ),
    f"{_CORE}.ConfigMap": (
        "ConfigMap holds configuration data for pods to consume.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "data": ("map[string]string", "Configuration data (UTF-8 values)."),
            "binaryData": ("map[string]string", "Binary configuration data (base64 values)."),
            "immutable": ("boolean", "If true, the data cannot be updated, only the object deleted."),
        },
    ),
    f"{_CORE}.Service": (
        "A named abstraction of a software service: a local port proxied to a set of pods.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_CORE}.ServiceSpec", "The behavior of the service."),
            "status": ("object", "Most recently observed status of the service."),
        },
    ),
    f"{_CORE}.ServiceSpec": (
        "ServiceSpec describes the attributes that a user creates on a service.",
        {
            "ports": (f"[]{_CORE}.ServicePort", "The ports exposed by this service."),
            "selector": ("map[string]string", "Routes traffic to pods whose labels match."),
            "clusterIP": ("string", "The IP address of the service."),
            "clusterIPs": ("[]string", "The IP addresses of the service."),
            "type": (
                "string",
                "How the service is exposed: ClusterIP, NodePort, LoadBalancer, ExternalName.",
            ),
            "externalIPs": ("[]string", "IPs for which nodes also accept traffic for this service."),
            "sessionAffinity": ("string", "ClientIP or None."),
            "loadBalancerIP": ("string", "Deprecated: the load balancer's IP."),
            "loadBalancerSourceRanges": ("[]string", "Client IP ranges a load balancer admits."),
            "externalName": ("string", "The DNS name an ExternalName service aliases."),
            "externalTrafficPolicy": ("string", "How external traffic is routed: Cluster or Local."),
            "healthCheckNodePort": ("integer", "The health check node port of a Local service."),
            "publishNotReadyAddresses": ("boolean", "Publish endpoints of pods that are not ready."),
            "sessionAffinityConfig": ("object", "Session affinity configuration."),
            "ipFamilies": ("[]string", "The IP families assigned to the service."),
            "ipFamilyPolicy": ("string", "The dual-stack-ness requested."),
            "allocateLoadBalancerNodePorts": (
                "boolean",
                "Whether node ports are allocated for a load balancer.",
            ),
            "loadBalancerClass": ("string", "The class of the load balancer implementation."),
            "internalTrafficPolicy": ("string", "How cluster-internal traffic is routed: Cluster or Local."),
            "trafficDistribution": ("string", "How traffic is distributed to the service's endpoints."),
        },
    ),
    f"{_CORE}.ServicePort": (
        "ServicePort contains information on a service's port.",
        {
            "name": ("string", "The name of the port within the service."),
            "protocol": ("string", "TCP, UDP or SCTP."),
            "appProtocol": ("string", "The application protocol of the port."),
            "port": ("integer", "The port exposed by the service."),
            "targetPort": ("int-or-string", "The port to access on the pods."),
            "nodePort": ("integer", "The port on each node for a NodePort or LoadBalancer service."),
        },
    ),
    f"{_CORE}.Secret": (
        "Secret holds secret data of a certain type.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "data": ("map[string]string", "Secret data (base64 values)."),
            "stringData": ("map[string]string", "Write-only secret data in plain text, merged into data."),
            "type": ("string", "Used to facilitate programmatic handling of secret data."),
            "immutable": ("boolean", "If true, the data cannot be updated, only the object deleted."),
        },
    ),
    f"{_CORE}.ServiceAccount": (
        "ServiceAccount binds together a name, a principal and a set of secrets.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "secrets": (f"[]{_CORE}.ObjectReference", "Secrets pods running as this account may use."),
            "imagePullSecrets": (
                f"[]{_CORE}.LocalObjectReference",
                "Secrets for pulling the images of pods that reference this account.",
            ),
            "automountServiceAccountToken": ("boolean", "Whether pods get an API token mounted."),
        },
    ),
    f"{_CORE}.ObjectReference": (
        "ObjectReference contains enough information to let you inspect or modify the referred object.",
        {
            "kind": ("string", "Kind of the referent."),
            "namespace": ("string", "Namespace of the referent."),
            "name": ("string", "Name of the referent."),
            "uid": ("string", "UID of the referent."),
            "apiVersion": ("string", "API version of the referent."),
            "resourceVersion": ("string", "Specific resourceVersion to which this reference is made."),
            "fieldPath": ("string", "A piece of the object, instead of the whole (a container)."),
        },
    ),
    f"{_CORE}.LocalObjectReference": (
        "A reference to an object in the same namespace.",
        {"name": ("string", "Name of the referent.")},
    ),
    f"{_CORE}.Event": (
        "Event is a report of an event somewhere in the cluster.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "involvedObject": (f"{_CORE}.ObjectReference", "The object this event is about."),
            "reason": ("string", "Short, machine understandable status of the transition."),
            "message": ("string", "A human-readable description of the status of this operation."),
            "source": (f"{_CORE}.EventSource", "The component reporting this event."),
            "firstTimestamp": ("string", "The time at which the event was first recorded."),
            "lastTimestamp": ("string", "The time at which the most recent occurrence was recorded."),
            "count": ("integer", "The number of times this event has occurred."),
            "type": ("string", "Type of this event (Normal, Warning)."),
            "eventTime": ("string", "Time when this Event was first observed (MicroTime)."),
            "series": ("object", "Data about the Event series this event represents."),
            "action": ("string", "What action was taken/failed regarding the involved object."),
            "related": (f"{_CORE}.ObjectReference", "Optional secondary object for more complex actions."),
            "reportingComponent": ("string", "Name of the controller that emitted this Event."),
            "reportingInstance": ("string", "ID of the controller instance."),
        },
    ),
    f"{_CORE}.EventSource": (
        "EventSource contains information for an event.",
        {
            "component": ("string", "Component from which the event is generated."),
            "host": ("string", "Node name on which the event is generated."),
        },
    ),
    f"{_RBAC}.Role": (
        "Role is a namespaced, logical grouping of PolicyRules.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "rules": (f"[]{_RBAC}.PolicyRule", "All the PolicyRules for this Role."),
        },
    ),
    f"{_RBAC}.PolicyRule": (
        "PolicyRule holds information that describes a policy rule.",
        {
            "verbs": ("[]string", "Verbs that apply to all the resources of this rule; '*' is all."),
            "apiGroups": ("[]string", "The API groups of the resources; '' is the core group."),
            "resources": ("[]string", "Resources this rule applies to; '*' is all."),
            "resourceNames": ("[]string", "An optional allow list of names."),
            "nonResourceURLs": ("[]string", "Partial URLs a user may access (ClusterRoles only)."),
        },
    ),
    f"{_RBAC}.RoleBinding": (
        "RoleBinding grants the permissions of a Role or ClusterRole to subjects, in a namespace.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "subjects": (f"[]{_RBAC}.Subject", "The objects the role applies to."),
            "roleRef": (f"{_RBAC}.RoleRef", "The Role or ClusterRole bound. Cannot be updated."),
        },
    ),
    f"{_RBAC}.Subject": (
        "Subject holds a reference to the object or user identity a role binding applies to.",
        {
            "kind": ("string", "User, Group or ServiceAccount."),
            "apiGroup": ("string", "The API group of the referenced subject."),
            "name": ("string", "Name of the object being referenced."),
            "namespace": ("string", "Namespace of the referenced object."),
        },
    ),
    f"{_RBAC}.RoleRef": (
        "RoleRef contains information that points to the role being used.",
        {
            "apiGroup": ("string", "The group of the resource being referenced."),
            "kind": ("string", "The type of resource being referenced."),
            "name": ("string", "The name of the resource being referenced."),
        },
    ),
    f"{_POLICY}.PodDisruptionBudget": (
        "PodDisruptionBudget limits the number of pods of a collection disrupted at once.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_POLICY}.PodDisruptionBudgetSpec", "The desired behavior of the budget."),
            "status": ("object", "Most recently observed status of the budget."),
        },
    ),
    f"{_POLICY}.PodDisruptionBudgetSpec": (
        "PodDisruptionBudgetSpec is a description of a PodDisruptionBudget.",
        {
            "minAvailable": ("int-or-string", "Pods that must remain available after an eviction."),
            "selector": (f"{_META}.LabelSelector", "Label query over the pods the budget covers."),
            "maxUnavailable": ("int-or-string", "Pods that may be unavailable after an eviction."),
            "unhealthyPodEvictionPolicy": ("string", "When unhealthy running pods may be evicted."),
        },
    ),
    f"{_NETWORKING}.NetworkPolicy": (
        "NetworkPolicy describes what network traffic is allowed for a set of pods.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_NETWORKING}.NetworkPolicySpec", "The desired behavior of this NetworkPolicy."),
        },
    ),
    f"{_NETWORKING}.NetworkPolicySpec": (
        "NetworkPolicySpec provides the specification of a NetworkPolicy.",
        {
            "podSelector": (f"{_META}.LabelSelector", "The pods the policy applies to."),
            "ingress": (f"[]{_NETWORKING}.NetworkPolicyIngressRule", "Ingress rules for the selected pods."),
            "egress": (f"[]{_NETWORKING}.NetworkPolicyEgressRule", "Egress rules for the selected pods."),
            "policyTypes": ("[]string", "Rule types the policy relates to: Ingress, Egress."),
        },
    ),
    f"{_NETWORKING}.NetworkPolicyIngressRule": (
        "Traffic allowed to the pods selected, if it matches both ports and from.",
        {
            "ports": (f"[]{_NETWORKING}.NetworkPolicyPort", "Ports accessible from the sources."),
            "from": (f"[]{_NETWORKING}.NetworkPolicyPeer", "Sources allowed to access the pods."),
        },
    ),
    f"{_NETWORKING}.NetworkPolicyEgressRule": (
        "Traffic allowed out of the pods selected, if it matches both ports and to.",
        {
            "ports": (f"[]{_NETWORKING}.NetworkPolicyPort", "Destination ports of outgoing traffic."),
            "to": (f"[]{_NETWORKING}.NetworkPolicyPeer", "Destinations of outgoing traffic."),
        },
    ),
    f"{_NETWORKING}.NetworkPolicyPort": (
        "NetworkPolicyPort describes a port to allow traffic on.",
        {
            "protocol": ("string", "TCP, UDP or SCTP."),
            "port": ("int-or-string", "A numerical or named port on the pods."),
            "endPort": ("integer", "The end of a port range starting at port."),
        },
    ),
    f"{_NETWORKING}.NetworkPolicyPeer": (
        "A peer to allow traffic to/from.",
        {
            "podSelector": (f"{_META}.LabelSelector", "Pods selected by label."),
            "namespaceSelector": (f"{_META}.LabelSelector", "Namespaces selected by label."),
            "ipBlock": (f"{_NETWORKING}.IPBlock", "A particular IP block."),
        },
    ),
    f"{_NETWORKING}.IPBlock": (
        "IPBlock describes a particular CIDR that is allowed to the pods selected.",
        {
            "cidr": ("string", "A CIDR such as 192.168.1.0/24."),
            "except": ("[]string", "CIDRs within cidr that are not allowed."),
        },
    ),
    f"{_AUTOSCALING}.HorizontalPodAutoscaler": (
        "HorizontalPodAutoscaler automatically manages the replica count of a scalable resource.",
        {
            **_TYPE_META,
            "metadata": ("ObjectMeta", "Standard object's metadata."),
            "spec": (f"{_AUTOSCALING}.HorizontalPodAutoscalerSpec", "The behavior of the autoscaler."),
            "status": ("object", "The current information about the autoscaler."),
        },
    ),
    f"{_AUTOSCALING}.HorizontalPodAutoscalerSpec": (
        "HorizontalPodAutoscalerSpec describes the desired functionality of the autoscaler.",
        {
            "scaleTargetRef": (
                f"{_AUTOSCALING}.CrossVersionObjectReference",
                "The resource whose replica count is scaled.",
            ),
            "minReplicas": ("integer", "The lower limit of the number of replicas."),
            "maxReplicas": ("integer", "The upper limit of the number of replicas."),
            "metrics": (f"[]{_AUTOSCALING}.MetricSpec", "The metrics used to compute the replica count."),
            "behavior": (
                f"{_AUTOSCALING}.HorizontalPodAutoscalerBehavior",
                "Scaling behavior of the target, up and down.",
            ),
        },
    ),
    f"{_AUTOSCALING}.CrossVersionObjectReference": (
        "CrossVersionObjectReference contains enough information to identify the referred resource.",
        {
            "kind": ("string", "Kind of the referent."),
            "name": ("string", "Name of the referent."),
            "apiVersion": ("string", "API version of the referent."),
        },
    ),
    f"{_AUTOSCALING}.MetricSpec": (
        "MetricSpec specifies how to scale based on a single metric.",
        {
            "type": ("string", "Object, Pods, Resource, ContainerResource or External."),
            "object": ("object", "A metric describing a single Kubernetes object."),
            "pods": ("object", "A metric describing each pod in the current scale target."),
            "resource": ("object", "A resource metric known to Kubernetes (requests and limits)."),
            "containerResource": ("object", "A resource metric of a single container in each pod."),
            "external": ("object", "A global metric not associated with any Kubernetes object."),
        },
    ),
    f"{_AUTOSCALING}.HorizontalPodAutoscalerBehavior": (
        "The scaling behavior of the target in both directions.",
        {
            "scaleUp": (f"{_AUTOSCALING}.HPAScalingRules", "Scaling policy for scaling up."),
            "scaleDown": (f"{_AUTOSCALING}.HPAScalingRules", "Scaling policy for scaling down."),
        },
    ),
    f"{_AUTOSCALING}.HPAScalingRules": (
        "HPAScalingRules configures the scaling behavior for one direction.",
        {
            "stabilizationWindowSeconds": ("integer", "Seconds past recommendations are considered."),
            "selectPolicy": ("string", "Which policy is used: Max, Min or Disabled."),
            "policies": (f"[]{_AUTOSCALING}.HPAScalingPolicy", "Policies that may be used while scaling."),
            "tolerance": ("string", "Tolerance on the ratio of current to desired metric value."),
        },
    ),
    f"{_AUTOSCALING}.HPAScalingPolicy": (
        "HPAScalingPolicy is a single policy which must hold true for a specified past interval.",
        {
            "type": ("string", "Pods or Percent."),
            "value": ("integer", "The amount of change permitted by the policy."),
            "periodSeconds": ("integer", "The window of time for which the policy should hold true."),
        },
    ),
}
"""Each type modelled: its description and every field it has."""

KIND_TYPES: Final[dict[tuple[str, str, str], str]] = {
    ("apps", "v1", "deployments"): f"{_APPS}.Deployment",
    ("apps", "v1", "statefulsets"): f"{_APPS}.StatefulSet",
    ("", "v1", "pods"): f"{_CORE}.Pod",
    ("", "v1", "configmaps"): f"{_CORE}.ConfigMap",
    ("", "v1", "services"): f"{_CORE}.Service",
    ("", "v1", "secrets"): f"{_CORE}.Secret",
    ("", "v1", "serviceaccounts"): f"{_CORE}.ServiceAccount",
    ("", "v1", "events"): f"{_CORE}.Event",
    ("rbac.authorization.k8s.io", "v1", "roles"): f"{_RBAC}.Role",
    ("rbac.authorization.k8s.io", "v1", "rolebindings"): f"{_RBAC}.RoleBinding",
    ("policy", "v1", "poddisruptionbudgets"): f"{_POLICY}.PodDisruptionBudget",
    ("networking.k8s.io", "v1", "networkpolicies"): f"{_NETWORKING}.NetworkPolicy",
    ("autoscaling", "v2", "horizontalpodautoscalers"): f"{_AUTOSCALING}.HorizontalPodAutoscaler",
}
"""The built-in resources with a schema here, by (group, version, plural)."""


_MERGE: Final = "merge"
PATCH_STRATEGIES: Final[dict[tuple[str, str], tuple[str, str]]] = {
    (f"{_CORE}.PodSpec", "volumes"): ("merge,retainKeys", "name"),
    (f"{_CORE}.PodSpec", "initContainers"): (_MERGE, "name"),
    (f"{_CORE}.PodSpec", "containers"): (_MERGE, "name"),
    (f"{_CORE}.PodSpec", "ephemeralContainers"): (_MERGE, "name"),
    (f"{_CORE}.PodSpec", "imagePullSecrets"): (_MERGE, "name"),
    (f"{_CORE}.PodSpec", "hostAliases"): (_MERGE, "ip"),
    (f"{_CORE}.PodSpec", "topologySpreadConstraints"): (_MERGE, "topologyKey"),
    (f"{_CORE}.PodSpec", "schedulingGates"): (_MERGE, "name"),
    (f"{_CORE}.PodSpec", "resourceClaims"): ("merge,retainKeys", "name"),
    (f"{_CORE}.Container", "ports"): (_MERGE, "containerPort"),
    (f"{_CORE}.Container", "env"): (_MERGE, "name"),
    (f"{_CORE}.Container", "volumeMounts"): (_MERGE, "mountPath"),
    (f"{_CORE}.Container", "volumeDevices"): (_MERGE, "devicePath"),
    (f"{_CORE}.ServiceSpec", "ports"): (_MERGE, "port"),
    (f"{_CORE}.ServiceAccount", "secrets"): (_MERGE, "name"),
}
"""The ``patchStrategy``/``patchMergeKey`` tags of the fields modelled (those
:mod:`tests.fakes.kube_strategic_merge` merges by), published as ``x-kubernetes-patch-strategy`` /
``x-kubernetes-patch-merge-key``: what ``kubectl apply`` computes its three-way patch from."""
_RETAIN_KEYS: Final[dict[tuple[str, str], str]] = {
    (f"{_APPS}.DeploymentSpec", "strategy"): "retainKeys",
}


def _ref(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}


def _property(type_name: str, description: str) -> dict[str, Any]:
    if type_name.startswith("[]"):
        item = _property(type_name[2:], "")
        item.pop("description", None)
        return {"type": "array", "description": description, "items": item}
    if type_name == "ObjectMeta":
        return _ref(OBJECT_META_REF, description)
    if type_name in TYPES:
        return _ref(type_name, description)
    if type_name == "map[string]string":
        return {
            "type": "object",
            "description": description,
            "additionalProperties": {"type": "string", "default": ""},
        }
    if type_name == "int-or-string":
        return {"description": description, "x-kubernetes-int-or-string": True}
    return {"type": type_name, "description": description}


def _gvk(type_name: str) -> list[dict[str, str]] | None:
    for (group, version, _plural), name in KIND_TYPES.items():
        if name == type_name:
            return [{"group": group, "version": version, "kind": name.rsplit(".", 1)[1]}]
    return None


def _referenced(type_name: str, seen: set[str]) -> None:
    if type_name in seen:
        return
    seen.add(type_name)
    for field_type, _description in TYPES[type_name][1].values():
        inner = field_type.removeprefix("[]")
        if inner in TYPES:
            _referenced(inner, seen)


def component_schemas(resource: tuple[str, str, str]) -> dict[str, dict[str, Any]]:
    """The ``components.schemas`` entries a resource's kind needs, as kube-openapi names them
    (``io.k8s.api.apps.v1.Deployment``), or none where the table has no schema for it."""
    top = KIND_TYPES.get(resource)
    if top is None:
        return {}
    names: set[str] = set()
    _referenced(top, names)
    schemas: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        description, fields = TYPES[name]
        schema: dict[str, Any] = {
            "type": "object",
            "description": description,
            "properties": {key: _property(*field) for key, field in fields.items()},
        }
        for key, prop in schema["properties"].items():
            if (name, key) in PATCH_STRATEGIES:
                strategy, merge_key = PATCH_STRATEGIES[name, key]
                prop["x-kubernetes-patch-merge-key"] = merge_key
                prop["x-kubernetes-patch-strategy"] = strategy
            elif (name, key) in _RETAIN_KEYS:
                prop["x-kubernetes-patch-strategy"] = _RETAIN_KEYS[name, key]
        gvk = _gvk(name)
        if gvk is not None:
            schema["x-kubernetes-group-version-kind"] = gvk
        schemas[name] = schema
    return schemas


_PLAIN_KEY: Final = re.compile(r"^[A-Za-z0-9_]+$")


def _unknown(type_name: str, value: Any, path: str, found: list[str]) -> Any:
    """``value`` without the fields ``type_name`` lacks; their paths appended to ``found``."""
    if type_name.startswith("[]"):
        if not isinstance(value, list):
            return value
        return [_unknown(type_name[2:], item, f"{path}[{index}]", found) for index, item in enumerate(value)]
    if type_name not in TYPES or not isinstance(value, dict):
        return value
    fields = TYPES[type_name][1]
    kept: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key not in fields:
            found.append(where if _PLAIN_KEY.match(key) else f"{path}[{key}]")
            continue
        kept[key] = _unknown(fields[key][0], item, where, found)
    return kept


def decoded(
    resource: tuple[str, str, str], body: Mapping[str, Any], dropped: MutableSequence[str]
) -> dict[str, Any]:
    """``body`` as the API server's decoding into the kind's type leaves it: the fields the type
    lacks dropped, each one's path (``spec.template.spec.containers[0].imagePullPolicyy``) appended to
    ``dropped``, in the order they appear. A resource with no schema here comes back as it is."""
    top = KIND_TYPES.get(resource)
    if top is None:
        return dict(body)
    found: list[str] = []
    result = _unknown(top, dict(body), "", found)
    dropped.extend(found)
    return dict(result)


_INT64_FIELDS: Final = frozenset(
    {(f"{_CORE}.PodSpec", "terminationGracePeriodSeconds"), (f"{_CORE}.PodSpec", "activeDeadlineSeconds")}
)
"""The integer fields modelled that are ``int64`` in Go; every other one is ``int32``."""
_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _go_type(type_name: str) -> str:
    """A field type of the table as Go's reflection prints it (``v1.DeploymentSpec``, ``[]v1.Container``)."""
    if type_name.startswith("[]"):
        return "[]" + _go_type(type_name[2:])
    if type_name == "ObjectMeta":
        return "v1.ObjectMeta"
    if type_name in TYPES:
        package, _, short = type_name.rpartition(".")
        return f"{package.rpartition('.')[2]}.{short}"
    return {"string": "string", "boolean": "bool", "map[string]string": "map[string]string"}[type_name]


def _json_kind(value: Any) -> str:
    """The JSON value's kind as ``encoding/json``'s ``UnmarshalTypeError`` names it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "number"


def _mismatch(type_name: str, value: Any, int_type: str) -> str | None:
    """Why ``value`` cannot be decoded into a field of ``type_name``, as the ``cannot unmarshal ...``
    phrase's value and Go type, or ``None`` where it can (``null`` decodes into anything)."""
    if value is None:
        return None
    kind = _json_kind(value)
    if type_name == "integer":
        if kind != "number":
            return f"{kind} into {int_type}"
        low, high = _INT_RANGES[int_type]
        if not isinstance(value, int) or not low <= value <= high:
            return f"number {value} into {int_type}"
        return None
    if type_name in ("object", "[]object", "int-or-string"):
        return None  # not modelled deeper (intstr's own decoder is not modelled either)
    expected = {"string": "string", "boolean": "bool", "map[string]string": "object"}.get(
        type_name, "array" if type_name.startswith("[]") else "object"
    )
    return None if kind == expected else f"{kind} into {_go_type(type_name)}"


def _first_type_error(type_name: str, value: Any, path: str) -> str | None:
    """The first field (document order) whose value does not fit its Go type, worded as
    ``encoding/json`` does: the innermost struct, the JSON path without list indices, the Go type."""
    if type_name.startswith("[]"):
        if isinstance(value, list):
            for item in value:
                found = _first_type_error(type_name[2:], item, path)
                if found:
                    return found
        return None
    if type_name not in TYPES or not isinstance(value, dict):
        return None
    struct = type_name.rpartition(".")[2]
    for key, item in value.items():
        field = TYPES[type_name][1].get(key)
        if field is None:
            continue
        where = f"{path}.{key}" if path else key
        int_type = "int64" if (type_name, key) in _INT64_FIELDS else "int32"
        mismatch = _mismatch(field[0], item, int_type)
        if mismatch is None and field[0] == "map[string]string" and isinstance(item, dict):
            bad = next((v for v in item.values() if v is not None and not isinstance(v, str)), None)
            if bad is not None:
                mismatch = f"{_json_kind(bad)} into string"
        inner = field[0].removeprefix("[]")
        if mismatch is None and inner != field[0] and inner not in TYPES and isinstance(item, list):
            mismatch = next(filter(None, (_mismatch(inner, entry, int_type) for entry in item)), None)
        if mismatch is not None:
            value_kind, _, go_type = mismatch.partition(" into ")
            return (
                f"json: cannot unmarshal {value_kind} into Go struct field {struct}.{where} of type {go_type}"
            )
        found = _first_type_error(field[0], item, where)
        if found:
            return found
    return None


def type_error(resource: tuple[str, str, str], body: Mapping[str, Any]) -> str | None:
    """Why decoding ``body`` into the resource's Go type fails on a field of the wrong JSON type
    (``replicas: "3"``, ``spec: []``), as the API server's JSON decoder words it (``json: cannot
    unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32``); ``None`` when
    every field modelled fits, or the resource has no schema here."""
    top = KIND_TYPES.get(resource)
    return None if top is None else _first_type_error(top, body, "")
