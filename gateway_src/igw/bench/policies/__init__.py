"""Routing policies compared by the benchmark, all behind :class:`igw.scheduling.types.RoutingPolicy`.

The explicit registry of policy names is :mod:`igw.bench.policies.registry`.
"""
