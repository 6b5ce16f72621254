"""Constants shared by the CDK tests and their fixtures (importable; conftest.py only registers fixtures)."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "cdk" / "examples"
"""The example deployment configs users copy; each is synthesized by a session fixture."""

EXISTING_OIDC = "arn:aws:iam::111111111111:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE"
"""The OIDC provider ARN the existing-cluster example names."""
