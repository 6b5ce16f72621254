"""Every exception class defined in igw derives from :class:`igw.errors.IgwError`, in its area's subtree."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import igw
from igw.config.errors import ConfigError
from igw.errors import (
    IgwConfigError,
    IgwError,
    IgwGatewayError,
    IgwSchedulingError,
    IgwSecurityError,
    IgwToolingError,
)
from igw.scheduling.errors import SchedulerConfigError
from igw.sim.spec import SpecError

SUBTREE_BY_PACKAGE: dict[str, type[IgwError]] = {
    "igw.config": IgwConfigError,
    "igw.scheduling": IgwSchedulingError,
    "igw.gateway": IgwGatewayError,
    "igw.launch": IgwGatewayError,
    "igw.security": IgwSecurityError,
    "igw.global_router": IgwGatewayError,
}
"""Packages not listed here are tooling (sim, bench, perf, checks, addon, cli, ...)."""


def _exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(igw.__path__, prefix="igw."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == module.__name__ and issubclass(obj, BaseException):
                found.append(obj)
    return found


EXCEPTIONS = _exception_classes()


def _expected_subtree(module_name: str) -> type[IgwError]:
    for package, subtree in SUBTREE_BY_PACKAGE.items():
        if module_name == package or module_name.startswith(package + "."):
            return subtree
    return IgwToolingError


def test_the_walk_finds_the_known_exceptions() -> None:
    names = {cls.__qualname__ for cls in EXCEPTIONS}
    assert {"ConfigError", "SchedulerConfigError", "GuardDenied", "TokenRejected", "SpecError"} <= names
    assert len(EXCEPTIONS) >= 30


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
def test_every_exception_derives_from_its_areas_subtree(cls: type[BaseException]) -> None:
    subtree = _expected_subtree(cls.__module__)
    if cls.__module__ == "igw.errors":
        assert issubclass(cls, IgwError)
        return
    if issubclass(cls, IgwConfigError):
        return  # any area may reject its own configuration with a config error
    assert issubclass(cls, subtree), (
        f"{cls.__module__}.{cls.__qualname__} must derive from {subtree.__name__}"
    )


def test_builtin_bases_are_kept_for_existing_handlers() -> None:
    assert issubclass(ConfigError, ValueError)
    assert issubclass(SchedulerConfigError, ValueError)
    assert issubclass(SpecError, ValueError)
