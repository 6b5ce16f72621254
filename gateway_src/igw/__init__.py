"""igw: a GPU-aware inference gateway for LLM serving on EKS / SageMaker HyperPod.

Product core (what the gateway image ships; it never imports the tooling below):

- ``igw.errors``      the exception hierarchy: ``IgwError`` and one subtree per area.
- ``igw.config``      the InferenceGatewayConfig contract: loading, validation, defaults, versions.
- ``igw.scheduling``  the endpoint picker: filters -> scorers -> picker. Pure, no I/O; shared by the
                      gateway and the discrete-event simulator.
- ``igw.gateway``     the data plane: HTTP server, body-based routing, scraping, proxying.
- ``igw.security``    JWT authentication, authorization, rate limits, TLS.
- ``igw.launch``      the composition root of ``igw serve``: wires security into the gateway.

Tooling:

- ``igw.sim``         the simulated GPU fleet (engine model, live HTTP servers, discrete-event simulator).
- ``igw.bench``       the routing benchmark and the local demo.
- ``igw.perf``        component benchmarks (``igw perf NAME``).
- ``igw.addon``       the EKS add-on wrapper (create/update/delete/package).
- ``igw.checks``      pre-flight and security-audit checks.
- ``igw.cli``         the ``igw`` command, its sub-commands and all command-line parsing.

The layers are enforced by the import contracts in ``pyproject.toml`` (docs/architecture.md).
"""

__version__ = "0.1.0"
