"""The one exception hierarchy: every error igw raises on purpose derives from :class:`IgwError`.

Callers catch a whole area with one subtree (``except IgwConfigError``) or everything igw raises with
:class:`IgwError`, while exceptions that are not igw's own (a library's ``OSError``, a bug's
``TypeError``) still propagate. Concrete classes keep their historic built-in base as a second base
(``class ConfigError(IgwConfigError, ValueError)``), so ``except ValueError`` written before the
hierarchy existed keeps working.

This module is the bottom layer of the package: it imports nothing from igw, and every layer may
import it.
"""

from __future__ import annotations

__all__ = [
    "IgwConfigError",
    "IgwError",
    "IgwGatewayError",
    "IgwSchedulingError",
    "IgwSecurityError",
    "IgwToolingError",
]


class IgwError(Exception):
    """Base of every exception defined in igw."""


class IgwConfigError(IgwError):
    """Configuration could not be read, validated or built (:mod:`igw.config`)."""


class IgwSchedulingError(IgwError):
    """A scheduler or one of its plugins could not be built (:mod:`igw.scheduling`)."""


class IgwGatewayError(IgwError):
    """The data plane refused or failed a request, or could not start (:mod:`igw.gateway`, launch)."""


class IgwSecurityError(IgwError):
    """A token, key, JWKS fetch or rate-limit backend failed (:mod:`igw.security`)."""


class IgwToolingError(IgwError):
    """An operator or developer tool failed: simulator, benchmark, checks, add-on wrapper."""
