"""``igw operator``: the add-on as a Kubernetes operator (tooling layer, never imported by the core).

Every InferenceGatewayConfig becomes a gateway data plane in its namespace (:mod:`.dataplane`),
after the same admission as ``igw validate`` plus cross-object conflicts (:mod:`.admission`), with
a status like AWS's (:mod:`.status`) written by an idempotent pass (:mod:`.reconcile`) that kopf
runs (:mod:`.handlers`) while this replica holds the leader Lease (:mod:`.election`, :mod:`.runner`).
"""
