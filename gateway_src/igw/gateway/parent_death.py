"""A worker of ``igw serve --workers N`` stops when its parent is gone, however the parent ended.

The parent stops its workers when it is asked to stop and when one of them dies
(:mod:`igw.gateway.workers`), but a parent killed outright (``kill -9``, the OOM killer, a supervisor
that kills only the process it started) cannot: its workers used to keep serving the port,
unsupervised, and a restarted ``igw serve`` then bound the same port beside them (``SO_REUSEPORT``)
- half the connections went to the orphans and their old configuration. In a container whose first
process is ``igw`` the kernel ends the others with it; anywhere else nothing did.

Linux's ``PR_SET_PDEATHSIG`` makes the kernel send the worker SIGTERM when its parent dies, so the
worker drains and exits as after any SIGTERM. The call is one ``prctl`` through ``ctypes``: the
``python-prctl`` package wraps it but needs libcap's headers to build, for this one call. The
parent's death is tied to the thread that started the worker; the supervisor starts them from its
main thread, which lives as long as the parent does. A parent that died before the worker asked
(between its start and this call) is seen by the parent pid having changed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Final

from igw.errors import IgwGatewayError

PR_SET_PDEATHSIG: Final = 1
"""``<linux/prctl.h>``: deliver a signal to this process when its parent dies."""


class ParentGoneError(IgwGatewayError):
    """The worker's parent ended before the worker tied itself to it."""


def stop_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> bool:
    """Have ``signum`` sent to this process when ``parent_pid`` (its parent) dies.

    Returns whether the kernel took the request (``False`` off Linux, where nothing is armed); raises
    :class:`ParentGoneError` when the parent is already gone (this process's parent is no longer
    ``parent_pid``)."""
    armed = False
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signum), 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        armed = True
    if os.getppid() != parent_pid:  # checked after arming: a death from here on sends the signal
        raise ParentGoneError(f"the parent process (pid {parent_pid}) has already exited")
    return armed
