"""Renderers of a check run: ``table`` (rich), ``json`` (versioned schema), ``sarif`` (2.1.0), ``junit``."""
