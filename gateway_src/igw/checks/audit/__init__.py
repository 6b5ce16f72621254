"""Audit checks: TLS, JWT, exposure, workload hardening, IAM, rate limits, tenancy - one module each."""
