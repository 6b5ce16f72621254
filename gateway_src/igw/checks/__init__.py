"""Operator checks: ``igw preflight`` (will the gateway work?) and ``igw audit`` (is it safe?).

One framework serves both commands: every check is a small module with a stable ID and a
severity (:mod:`igw.checks.model`), listed once in :mod:`igw.checks.registry`. Checks read an
:class:`~igw.checks.inventory.Inventory` that any of three sources fills the same way - a live
cluster (``kubernetes`` client plus boto3), a directory of manifests, or ``cdk.out`` templates - so
the same check gives the same verdict wherever the facts come from. A fact a source cannot provide
is an explicit :class:`~igw.checks.inventory.Missing`, and a check that needs it is reported as
skipped with that reason: never as passed.
"""
