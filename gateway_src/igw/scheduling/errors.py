"""Errors raised while building a scheduler from configuration.

Every problem carries the path of the offending field (``plugins[2].parameters.blockSize``) so an
operator can fix a weights block or an EndpointPickerConfig without reading code. Builders collect
all problems before raising, rather than stopping at the first one.
"""

from __future__ import annotations

from collections.abc import Sequence

from igw.errors import IgwSchedulingError


class SchedulerConfigError(IgwSchedulingError, ValueError):
    """A scheduler, plugin or EndpointPickerConfig could not be built; ``problems`` lists why."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("; ".join(self.problems))
