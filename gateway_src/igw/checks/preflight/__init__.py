"""Pre-flight checks: will the gateway work on this cluster? One module per check."""
