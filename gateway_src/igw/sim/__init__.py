"""The simulated GPU fleet: engine model, live HTTP model servers, fleet launcher, discrete-event simulator.

Modules (one concern each):

* :mod:`igw.sim.tokens` - the one tokenisation/prefix-hashing scheme shared by the DES and the live servers.
* :mod:`igw.sim.presets` - GPU/model deployment presets with their sources.
* :mod:`igw.sim.engine` - one model-server replica in virtual time (continuous batching, KV blocks, prefix
  cache, preemption, LoRA slots).
* :mod:`igw.sim.spec` - the typed fleet description (``FleetSpec`` / ``PodSpec``) and its YAML loader.
* :mod:`igw.sim.metrics_page` - the ``/metrics`` text page of each impersonated engine and version.
* :mod:`igw.sim.server` / :mod:`igw.sim.live` - live aiohttp model servers and the fleet that hosts them.
* :mod:`igw.sim.des` - the discrete-event fleet simulator driving a ``RoutingPolicy``.
* :mod:`igw.sim.workloads` - workload generators and trace replay.
"""
