"""Deployable units: network -> cluster -> platform -> inference (each depends on the one before)."""
