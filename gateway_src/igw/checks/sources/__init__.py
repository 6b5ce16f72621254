"""Where facts come from: a live cluster, a manifest directory, or ``cdk.out`` templates."""
