"""The simulated GPU fleet: engine model, live HTTP model servers, fleet launcher, discrete-event simulator.

Modules (one concern each; docs/simulator.md has the full guide):

* :mod:`igw.sim.tokens` - the one tokenisation / block-hashing scheme shared by the DES and live servers.
* :mod:`igw.sim.presets` - GPU/model deployment presets with their sources.
* :mod:`igw.sim.kv_cache` / :mod:`igw.sim.engine` - one replica in virtual time (continuous batching,
  KV blocks, prefix cache, preemption, LoRA slots).
* :mod:`igw.sim.spec` - the typed fleet description (``FleetSpec`` / ``PodSpec`` / ``FaultSpec``).
* :mod:`igw.sim.pod_stats` / :mod:`igw.sim.metrics_page` - the ``/metrics`` page per engine and version.
* :mod:`igw.sim.server` / :mod:`igw.sim.live` - live aiohttp model servers and ``run_fleet``.
* :mod:`igw.sim.request`, :mod:`igw.sim.workloads`, :mod:`igw.sim.conversations` - traffic.
* :mod:`igw.sim.des`, :mod:`igw.sim.decode_run`, :mod:`igw.sim.truth` - the discrete-event simulator,
  its exact fast-forward, and the oracle's view of a pod.

The ``igw sim`` verbs live in :mod:`igw.cli` (``sim_*``) and ``igw perf des`` in :mod:`igw.perf.des`.
"""
