"""Per-tenant rate limits: token buckets on requests per second and on model tokens per minute.

- ``buckets``  the bucket arithmetic and the admission rule, shared by both backends
- ``backend``  the backend Protocol
- ``registry`` the ONE registry of backends (``local``, ``redis``)
- ``local``    in-process buckets (per gateway replica)
- ``redis_backend`` buckets in Redis shared by every replica (one atomic Lua script per decision)
- ``limiter``  what the guard calls: picks limits per tenant, applies the Redis-unavailable policy,
               turns refusals into 429 + ``Retry-After``, exports per-tenant counters
"""
