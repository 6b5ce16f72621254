"""The EKS add-on package: version pins, the add-on's configuration schema, the chart, and the tooling
(`igw addon`) that installs it through the EKS API.

Modules, one concern each:

- :mod:`igw.addon.pins` — every pinned version and name the add-on and its infrastructure use;
- :mod:`igw.addon.addon_version` — parsing and ordering of EKS add-on versions;
- :mod:`igw.addon.schemas` — generators for the chart's ``values.schema.json``, the EKS add-on
  configuration schema and the chart's copy of the CRD (all derived from ``schemas/``);
- :mod:`igw.addon.configuration` — local validation of ``configurationValues``;
- :mod:`igw.addon.chart` — Helm rendering, linting and packaging through helm-python-sdk;
- :mod:`igw.addon.eks_api` — the ONE seam between our code and the EKS add-on API;
- :mod:`igw.addon.operations` — create / update / delete / versions flows on top of that seam.
"""
