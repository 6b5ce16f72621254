"""Tier 2: the global inference router (``igw global serve``) in front of tier-1 gateways.

- ``schema``    the ``GlobalRouterConfig`` contract (``schemas/globalrouterconfig.schema.json``), checks
- ``crd``       the CustomResourceDefinition generated from that schema
- ``config``    the typed, defaulted view of a validated document
- ``heartbeats`` reading tier-1 heartbeats from Redis (published by ``igw.gateway.heartbeat``)
- ``fleet``     one replica's view of the clusters: polling, health transitions, the plan per request
- ``health``    per-cluster drain / eject / slow-start state from heartbeats and request outcomes
- ``policy``    pure routing policy: which clusters, in which order, and why
- ``limits``    global rate limits per tenant and model, shared by all replicas through Redis
- ``metrics``   fleet metrics (Prometheus)
- ``server``    the OpenAI-compatible aiohttp application that routes and forwards requests
"""
