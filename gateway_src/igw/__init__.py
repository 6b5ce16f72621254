"""igw: a GPU-aware inference gateway for LLM serving on EKS / SageMaker HyperPod.

Sub-packages, one concern each:

- ``igw.config``      the InferenceGatewayConfig contract: loading, validation, defaults, versions.
- ``igw.scheduling``  the endpoint picker: filters -> scorers -> picker. Pure, no I/O; shared by the
                      gateway and the discrete-event simulator.
- ``igw.gateway``     the data plane: HTTP server, body-based routing, scraping, proxying.
- ``igw.security``    JWT authentication, authorization, rate limits, TLS.
- ``igw.sim``         the simulated GPU fleet (engine model, live HTTP servers, discrete-event simulator).
- ``igw.bench``       routing benchmark and the local demo.
- ``igw.addon``       the EKS add-on wrapper (create/update/delete/package).
- ``igw.checks``      pre-flight and security-audit checks.
- ``igw.cli``         the ``igw`` command and its sub-commands.
"""

__version__ = "0.1.0"
