"""The ``InferenceGatewayConfig`` contract in Python.

``schemas/`` is the source of truth; this package reads it (:mod:`.schema`), validates documents
against it (:mod:`.validate`, :mod:`.rules`), turns valid ones into the typed model (:mod:`.build`,
:mod:`.model`), loads files (:mod:`.loader`, :mod:`.documents`), generates the CRD and other derived
files (:mod:`.crd`, :mod:`.generated_files`), and evaluates model-server requirements
(:mod:`.versions`).
"""
