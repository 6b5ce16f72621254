"""The ``igw`` command: one entry point, one module per sub-command (see ``registry``)."""
