"""``igw serve --workers N``: N gateway processes on one listening port, and the parent that runs them.

Sharing the port: every worker binds its own listening socket with ``SO_REUSEPORT``, so the kernel
spreads new connections over the workers by a hash of the connection, and each worker keeps its own
TLS context, connection limits and drain/grace shutdown exactly as a single process does (a shared
pre-bound socket would wake every worker for each connection and need the socket passed down). The
parent resolves the port once (``--port 0`` picks a free one) by binding - not listening - a
``SO_REUSEPORT`` socket that it holds for its lifetime, so all workers bind the same port.

Config: with ``--config-map`` the parent reads the ConfigMap into the config file once before it
starts the workers, and only worker 0 watches it afterwards (:attr:`WorkerRole.mirrors_config_map`).
Worker 0 checks that file every ``configReloadInterval`` and tells the others when it changed; they
reload it then (see ``ConfigReloader.follows``), so the workers apply a change together. The
``configMapRef`` EndpointPickerConfigs are worker 0's read too (:mod:`igw.gateway.picker_share`).

Discovery: worker 0 alone runs the discovery source (with ``--in-cluster``, its Pod and ConfigMap
watches) and relays every report to the others (see :mod:`igw.gateway.discovery_share`).

Scraping: worker 0 scrapes, the others follow its snapshots over a unix socket in a private
directory the parent creates (see :mod:`igw.gateway.scrape_share`); each worker keeps its own
in-flight ledger, and the workers tell each other their picks on the same channel (the prefix index
learns them, see :mod:`igw.gateway.pick_share`). ``/metrics`` of any worker answers for the whole host (see
:mod:`igw.gateway.worker_metrics`).

Start-up: worker 0 starts first and the others once it reports that its listeners are open
(:meth:`WorkerRole.report_started`, a byte on a pipe), so a start-up refusal (no cluster credentials,
a bad endpoints or TLS file, an option a worker refuses) is worker 0's alone: one message, and the
group exits with its code (2, or 1 for a listener) as one process does. A worker that exits with
one of those codes before it reported having started, after worker 0 did, ends the group with that
code too (worker 0 drains first). Before session s40 every worker printed the refusal and the group
exited 3, a refusal only worker 0 makes after the others' drain.

Lifecycle: every worker stops (SIGTERM from the kernel) when the parent is gone, whatever ended it
(:mod:`igw.gateway.parent_death`). SIGTERM or SIGINT to the parent is passed to every worker, which
drains (``/readyz`` 503 for ``--drain-seconds`` while serving, then ``--stream-grace-seconds`` for
in-flight requests) and exits; the parent exits 0 when all did. SIGHUP to the parent goes to
worker 0: a configuration check now (:class:`~igw.gateway.stop_signals.ReloadSignal`). Each worker
starts with SIGHUP blocked and handles one held back once it serves, so a hang-up of the whole
process group while a worker imports is a reload check, not its end (it was, and the group's, exit 3).
A worker the stop reaches while it
is still starting exits with 128 + the signal (or dies of it, before Python installs its handlers):
that too is the stop the parent asked for, not a failure (the parent exited 3 for it when the stop
came in the first second). A worker whose event loop stops beating for ``--worker-timeout`` is
killed (:mod:`igw.gateway.worker_heartbeat`). **A worker that dies on its own ends the group**: the
parent logs it (ERROR: index, pid, exit code or signal name, and the group's exit code), sends
SIGTERM to the others (they drain the same way), logs each one's end (:func:`_stop`) and exits with
:data:`EXIT_WORKER_DIED`, so the container restarts as a whole. A restart in place was not chosen:
worker 0 holds the scrape channel and the followers' snapshots would age while it restarts, and a
pod that silently runs with fewer workers than asked for hides the failure from the orchestrator.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from igw.errors import IgwGatewayError
from igw.gateway.log_buffer import LOCK_FILE_PREFIX
from igw.gateway.stop_signals import sighup_held
from igw.gateway.worker_count import MAX_WORKERS
from igw.gateway.worker_heartbeat import HeartbeatWatch

log = logging.getLogger("igw.gateway.workers")

WORKER_ENV: Final = "IGW_WORKER"
"""Set by the parent for each worker: ``{"index": i, "count": n, "dir": private directory, "parent":
its pid, "heartbeat_fd": the heartbeat pipe's write end}`` (:class:`WorkerRole`)."""
EXIT_WORKER_DIED: Final = 3
STOPPED_EXITS: Final = frozenset(
    {0}
    | {128 + sig for sig in (signal.SIGTERM, signal.SIGINT)}
    | {-sig for sig in (signal.SIGTERM, signal.SIGINT)}
)
"""A worker's exit codes that end a requested stop cleanly: drained and exited (0), or stopped
while it was starting (``igw`` exits 128 + the signal then, or the signal's default action ended it
before the interpreter had started ``igw``)."""
START_REFUSALS: Final = frozenset({1, 2})
"""A worker's exit codes that, before it reported having started, are a start-up refusal and become
the group's: ``igw serve`` exits 2 for a configuration or option it refuses, 1 for a listener it
cannot open (and Python for an error it did not catch), the codes one process exits with."""
STARTED_MARK: Final = b"!"
"""What a worker writes to its start pipe once its listeners are open (:meth:`WorkerRole.report_started`)."""
POLL_S: Final = 0.1
KILL_AFTER_S: Final = 10.0
"""Seconds past a worker's drain + grace budget before the parent kills it."""


SERVING_MARK: Final = "serving"
"""The file in the group's directory that the parent creates once every worker serves
(:meth:`WorkerRole.group_serving`)."""
SOCKET_PATH_MAX: Final = 107
"""The longest path a unix socket may have on Linux (``sun_path`` is 108 bytes with its NUL)."""
GROUP_DIRECTORY_PREFIX: Final = "igw-workers-"
_LONGEST_SOCKET_NAME: Final = len(f"/{GROUP_DIRECTORY_PREFIX}xxxxxxxx/metrics-{MAX_WORKERS - 1}.sock")
"""The group directory's name (``tempfile`` adds 8 characters) and its longest socket's, after the
temporary folder: :func:`socket_directory_parent` keeps the sum within :data:`SOCKET_PATH_MAX`."""


class WorkerSetupError(IgwGatewayError):
    """The worker group could not be set up (port reservation, bad worker environment)."""


def socket_directory_parent(temporary: str | None = None) -> str:
    """Where the group's socket directory goes: the temporary folder (``TMPDIR``), or ``/tmp`` when
    that one's path leaves no room for the sockets' (a deep ``TMPDIR``: every worker failed with
    ``OSError: AF_UNIX path too long`` and the group never started, before session s41). Raises
    :class:`WorkerSetupError` naming ``TMPDIR`` when neither has room or ``/tmp`` is not writable."""
    folder = temporary if temporary is not None else tempfile.gettempdir()
    if len(folder) + _LONGEST_SOCKET_NAME <= SOCKET_PATH_MAX:
        return folder
    if os.access("/tmp", os.W_OK | os.X_OK):
        log.info("igw serve: TMPDIR %r is too deep for the workers' unix sockets: using /tmp", folder)
        return "/tmp"
    raise WorkerSetupError(
        f"TMPDIR {folder!r} leaves no room for the workers' unix sockets (paths of at most "
        f"{SOCKET_PATH_MAX} characters) and /tmp is not writable: set TMPDIR to a folder of at most "
        f"{SOCKET_PATH_MAX - _LONGEST_SOCKET_NAME} characters"
    )


class PortUnavailableError(WorkerSetupError):
    """The group's port could not be bound (in use, not this host's address, no permission): the
    machine's state, reported as a single process reports a listener it cannot open (``igw serve``
    exits 1 for both, not the usage error's 2)."""


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """This process's place in a worker group."""

    index: int
    count: int
    directory: str
    """Private (0700) directory of the group's unix sockets."""
    parent: int | None = None
    """The supervising parent's pid: the worker stops when that process is gone
    (:mod:`igw.gateway.parent_death`); ``None`` ties it to no process."""
    heartbeat_fd: int | None = None
    """The write end of this worker's heartbeat pipe (:mod:`igw.gateway.worker_heartbeat`); ``None``:
    the parent watches no heartbeat."""
    started_fd: int | None = None
    """The write end of this worker's start pipe: :meth:`report_started` writes one byte to it once
    the worker's listeners are open (the parent starts the other workers after worker 0's); ``None``:
    nobody waits for it."""

    @property
    def leads_scraping(self) -> bool:
        return self.index == 0

    @property
    def mirrors_config_map(self) -> bool:
        """Whether this worker watches ``--config-map`` and writes the shared config file: one watch
        per pod on the API server, not one per worker; the others hot-reload the file it writes."""
        return self.index == 0

    @property
    def scrape_channel(self) -> str:
        return str(Path(self.directory) / "scrape.sock")

    @property
    def serving_mark(self) -> str:
        """The file the parent creates once every worker of the group has reported that it serves."""
        return str(Path(self.directory) / SERVING_MARK)

    def group_serving(self) -> bool:
        """Whether every worker of the group serves (:attr:`serving_mark` exists); always true for a
        role with no parent (nobody would create the mark). A worker's ``/readyz`` answers 503 until
        then: worker 0 serves seconds before the others (4 s for three workers on this machine), and
        before session s42 the pod was ready, and took its full share of traffic, on one worker."""
        if self.parent is None:
            return True
        return os.path.exists(self.serving_mark)

    @property
    def picker_configs(self) -> str:
        """Worker 0's read of the ``configMapRef`` picker configs (:mod:`igw.gateway.picker_share`)."""
        return str(Path(self.directory) / "picker-configs.json")

    def metrics_socket(self, index: int) -> str:
        return str(Path(self.directory) / f"metrics-{index}.sock")

    def report_started(self) -> None:
        """Tell the parent this worker has started (its listeners are open); called once (it closes
        the descriptor). The parent starts the other workers only after worker 0 has, and tells a
        worker that exits before it started from one that failed later (:func:`supervise`)."""
        fd = self.started_fd
        if fd is None:
            return
        with contextlib.suppress(OSError):  # the parent gone: the kernel's parent-death signal stops us
            os.write(fd, STARTED_MARK)
        with contextlib.suppress(OSError):
            os.close(fd)

    def leave(self) -> None:
        """At this worker's exit: remove the group's sockets and directory when the parent is gone. A
        parent that exits removes them itself; one killed outright cannot, and every such kill left a
        directory of dead sockets in the temporary directory."""
        if self.parent is None or os.getppid() == self.parent:
            return
        # The group's own sockets and files, then the directory if that left it empty: never a tree
        # named by an environment variable.
        files = (
            self.scrape_channel,
            self.serving_mark,
            self.picker_configs,
            self.picker_configs + ".partial",
        )
        locks = [str(path) for path in Path(self.directory).glob(f"{LOCK_FILE_PREFIX}*.lock")]
        for path in (*files, *locks, *(self.metrics_socket(i) for i in range(self.count))):
            with contextlib.suppress(OSError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)

    def to_env(self) -> str:
        doc: dict[str, object] = {"index": self.index, "count": self.count, "dir": self.directory}
        if self.parent is not None:
            doc["parent"] = self.parent
        if self.heartbeat_fd is not None:
            doc["heartbeat_fd"] = self.heartbeat_fd
        if self.started_fd is not None:
            doc["started_fd"] = self.started_fd
        return orjson.dumps(doc).decode()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> WorkerRole | None:
        raw = (os.environ if environ is None else environ).get(WORKER_ENV)
        if not raw:
            return None
        try:
            doc = orjson.loads(raw)
            parent = doc.get("parent")
            heartbeat_fd = doc.get("heartbeat_fd")
            started_fd = doc.get("started_fd")
            role = cls(
                index=int(doc["index"]),
                count=int(doc["count"]),
                directory=str(doc["dir"]),
                parent=None if parent is None else int(parent),
                heartbeat_fd=None if heartbeat_fd is None else int(heartbeat_fd),
                started_fd=None if started_fd is None else int(started_fd),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise WorkerSetupError(f"${WORKER_ENV} is not a worker role: {exc}") from exc
        if not 0 <= role.index < role.count:
            raise WorkerSetupError(f"${WORKER_ENV}: index {role.index} outside 0..{role.count - 1}")
        return role


def describe_exit(code: int) -> str:
    """A worker's exit status in words: ``exit code 1``, ``killed by SIGKILL`` (``Popen``'s negative
    code), ``exit code 143 (128 + SIGTERM)`` (how ``igw`` ends on a signal while starting)."""
    if code < 0:
        return f"killed by {_signal_name(-code)}"
    if code > 128 and _signal_name(code - 128) != str(code - 128):
        return f"exit code {code} (128 + {_signal_name(code - 128)})"
    return f"exit code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def refuse_a_taken_port(host: str, port: int) -> None:
    """Raise :class:`PortUnavailableError` when another socket is bound to ``host:port`` (port 0: none).

    ``SO_REUSEPORT`` lets any process of the same user bind a port whose sockets all set it, so a
    second ``igw serve --workers`` on a port another group serves used to start beside it, silently,
    and the kernel spread the connections over both groups and their configurations (a single
    process, which does not set it, is refused). A plain bind - no ``SO_REUSEPORT`` - conflicts with
    any socket on the port, and is what this checks before the group reserves it."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # A closed connection's TIME_WAIT is no owner.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            held = " (another process, perhaps another igw serve, is bound to it)"
            why = f"{exc.strerror or exc}{held if exc.errno == errno.EADDRINUSE else ''}"
            raise PortUnavailableError(f"cannot listen on {host}:{port}: {why}") from exc


def reserve_port(host: str, port: int) -> socket.socket:
    """Bind (without listening) a ``SO_REUSEPORT`` socket on ``host:port``; port 0 picks one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = exc.strerror or exc
        raise PortUnavailableError(
            f"cannot listen on {host}:{port}: {why} (binding with SO_REUSEPORT)"
        ) from exc
    return sock


def supervise(
    count: int,
    *,
    host: str,
    port: int,
    worker_command: Callable[[int, int | None], Sequence[str]],
    stop_budget_s: float,
    management_port: int | None = None,
    stuck_after_s: float | None,
) -> int:
    """Run ``count`` workers (``worker_command(port, management_port)`` each) until SIGTERM/SIGINT or
    one dies.

    ``management_port``: the management listener's port (:mod:`igw.gateway.management`), reserved
    like ``port`` so that every worker binds the same one (0 picks a free one); ``None``: none.
    ``stuck_after_s``: kill a worker whose event loop has not beaten for that long, which ends the
    group (:mod:`igw.gateway.worker_heartbeat`); ``None``: no heartbeats.

    Worker 0 starts first, the others once it has reported that it serves
    (:meth:`WorkerRole.report_started`): whatever a worker refuses at start (credentials, a file, an
    option, the configuration's settings) worker 0 refuses alone, with its one message and its exit
    code, as a single process would, and no other worker starts (before session s40 every worker
    printed the refusal, and the group exited 3 after the others' drain).

    Returns 0 after a requested stop in which every worker ended cleanly (:data:`STOPPED_EXITS`); the
    exit code of a worker that ended before it had started when that is one of
    :data:`START_REFUSALS` (a start-up refusal, as one process reports it); else
    :data:`EXIT_WORKER_DIED`.
    """
    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    refuse_a_taken_port(host, port)
    if management_port is not None:
        refuse_a_taken_port(host, management_port)
    reservation = reserve_port(host, port)
    bound_port: int = reservation.getsockname()[1]
    try:
        management = None if management_port is None else reserve_port(host, management_port)
    except WorkerSetupError:
        reservation.close()
        raise
    bound_management: int | None = None if management is None else management.getsockname()[1]
    group: _Group | None = None

    reload_held = False

    def pass_reload(signum: int, frame: object) -> None:
        """SIGHUP: worker 0 checks the configuration file now and tells the others when it changed
        (:class:`~igw.gateway.stop_signals.ReloadSignal`); without this handler it ended the parent
        at once (exit -1), silently, and its workers drained on the kernel's parent-death signal.
        One before worker 0 exists is passed on when it does."""
        nonlocal reload_held
        if stop_requested:
            return
        if group is None or not group.workers:
            reload_held = True
            return
        # Sent even while worker 0 starts: it holds SIGHUP blocked until it serves (_Group.spawn),
        # and checks the file then (one that came before that was ignored: a file changed after
        # worker 0 had read it waited for the next configReloadInterval).
        first = group.workers[0]
        if first.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                first.send_signal(signal.SIGHUP)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, pass_reload)
    # Blocked since igw started (serve's HOLDS_HANGUP): one held back runs pass_reload now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    try:
        parent = socket_directory_parent()
        with tempfile.TemporaryDirectory(prefix=GROUP_DIRECTORY_PREFIX, dir=parent) as directory:
            os.chmod(directory, 0o700)
            group = running = _Group(
                list(worker_command(bound_port, bound_management)), count, directory, stuck_after_s
            )
            running.spawn()  # worker 0; the others once it has started (_wait)
            if reload_held:  # a SIGHUP before worker 0 existed: it holds this one until it serves
                pass_reload(signal.SIGHUP, None)

            where = f"{host}:{bound_port}" + (
                "" if bound_management is None else f", management port {bound_management}"
            )

            def all_spawned() -> None:
                log.info(
                    "igw serve: %d workers (pids %s) on %s: worker 0 serves, the others are starting",
                    count,
                    " ".join(str(w.pid) for w in running.workers),
                    where,
                )

            def all_serving(seconds: float) -> None:
                try:  # the workers' /readyz answers 200 from now on (WorkerRole.group_serving)
                    Path(directory, SERVING_MARK).touch()
                except OSError as exc:
                    log.error("igw serve: cannot mark the group serving (its /readyz stays 503): %s", exc)
                what = "igw serve: all %d workers serve on %s (the group started in %.1fs)"
                log.info(what, count, where, seconds)

            died = _wait(group, lambda: stop_requested, all_spawned, all_serving)
            refused = died is not None and group.refused(died)
            if died is not None and (not refused or len(group.workers) > 1):
                index = group.workers.index(died)
                what = "refused to start" if refused else "ended"
                ends = died.returncode if refused else EXIT_WORKER_DIED
                log.error(
                    "worker %d (pid %d) %s (%s): stopping all workers; the group exits %d "
                    "(no worker is restarted in place: the container restarts whole)",
                    index,
                    died.pid,
                    what,
                    describe_exit(died.returncode),
                    ends,
                )
            codes = _stop(group.workers, stop_budget_s + KILL_AFTER_S, logged=died)
            if refused and died is not None:
                return died.returncode
            if died is not None or not all(code in STOPPED_EXITS for code in codes):
                return EXIT_WORKER_DIED
            return 0
    finally:
        if group is not None:
            group.close()
        for sig, handler in previous.items():
            # After a requested stop a supervisor's repeated SIGTERM must not end the process (the
            # previous action may be the default, which did: exit -15 instead of 0): ignored from here.
            signal.signal(sig, signal.SIG_IGN if stop_requested else handler)
        reservation.close()
        if management is not None:
            management.close()


class _Group:
    """The parent's side of the workers: their processes, start pipes and heartbeat watch."""

    def __init__(self, command: list[str], count: int, directory: str, stuck_after_s: float | None) -> None:
        self.command = command
        self.count = count
        self.directory = directory
        self.workers: list[subprocess.Popen[bytes]] = []
        self.watch = (
            None
            if stuck_after_s is None
            else HeartbeatWatch([], started_at=time.monotonic(), stuck_after_s=stuck_after_s)
        )
        self._started_reads: list[int | None] = []
        """Each worker's start pipe (read end), ``None`` once it has reported or closed."""
        self._started: list[bool] = []

    def spawn(self) -> None:
        """Start the next worker, with its heartbeat pipe (when watched) and its start pipe."""
        index = len(self.workers)
        beat_read = beat_fd = None
        if self.watch is not None:
            beat_read, beat_fd = os.pipe()  # not inherited (PEP 446) but for pass_fds
        started_read, started_fd = os.pipe()
        os.set_blocking(started_read, False)
        self._started_reads.append(started_read)
        self._started.append(False)
        role = WorkerRole(
            index,
            self.count,
            self.directory,
            parent=os.getpid(),
            heartbeat_fd=beat_fd,
            started_fd=started_fd,
        )
        env = {**os.environ, WORKER_ENV: role.to_env()}
        passed = (started_fd,) if beat_fd is None else (beat_fd, started_fd)
        try:
            # SIGHUP blocked in the worker until it serves (ReloadSignal.release_held): a hang-up of
            # the whole process group while it imported ended it (no handler yet), and the group
            # with it (exit 3). One for this process meanwhile is handled after the start.
            with sighup_held():
                self.workers.append(subprocess.Popen(self.command, env=env, pass_fds=passed))
        finally:
            for fd in passed:
                os.close(fd)  # the worker holds them now: their ends show when the worker is gone
        if beat_read is not None and self.watch is not None:
            self.watch.add(beat_read, started_at=time.monotonic())

    def started(self, index: int) -> bool:
        """Whether worker ``index`` has reported that it started (read from its start pipe)."""
        fd = self._started_reads[index]
        if fd is not None:
            try:
                chunk = os.read(fd, 16)
            except BlockingIOError:
                return self._started[index]
            self._started[index] = self._started[index] or STARTED_MARK in chunk
            if self._started[index] or not chunk:  # reported, or closed without reporting
                os.close(fd)
                self._started_reads[index] = None
        return self._started[index]

    def refused(self, worker: subprocess.Popen[bytes]) -> bool:
        """Whether ``worker`` (exited) ended before it started with a start-up refusal's code."""
        return not self.started(self.workers.index(worker)) and worker.returncode in START_REFUSALS

    def close(self) -> None:
        for w in self.workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        if self.watch is not None:
            self.watch.close()
        for fd in self._started_reads:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._started_reads = []


def _wait(
    group: _Group,
    stopping: Callable[[], bool],
    all_spawned: Callable[[], None],
    all_serving: Callable[[float], None],
) -> subprocess.Popen[bytes] | None:
    """Until a stop is requested (None) or a worker exits on its own or is killed as stuck (that
    worker). Starts workers 1..N-1 once worker 0 has started (``all_spawned`` is told then), and tells
    ``all_serving`` the seconds since the start once every worker has reported that it serves.

    Why two lines: the first (the workers' pids) comes when the others are only starting, seconds
    before they serve on a loaded machine; it was the group's only line, so an operator could not
    tell from the log when the whole group served (session s41)."""
    workers = group.workers
    began = time.monotonic()
    serving = False
    while not stopping():
        for w in workers:
            if w.poll() is not None:
                return w
        if len(workers) < group.count and group.started(0):
            while len(workers) < group.count:
                group.spawn()
            all_spawned()
        if not serving and len(workers) == group.count and all(map(group.started, range(group.count))):
            serving = True
            all_serving(time.monotonic() - began)
        watch = group.watch
        if watch is not None:
            for index, silent in watch.stuck(time.monotonic()):
                stuck = workers[index]
                log.error(
                    "worker %d (pid %d) sent no heartbeat for %.1fs: its event loop is stuck; killing it",
                    index,
                    stuck.pid,
                    silent,
                )
                stuck.kill()
                stuck.wait()
                return stuck
        time.sleep(POLL_S)
    return None


def _stop(
    workers: list[subprocess.Popen[bytes]],
    budget_s: float,
    *,
    logged: subprocess.Popen[bytes] | None = None,
) -> list[int]:
    """SIGTERM every running worker, wait up to ``budget_s``, kill the rest; their exit codes.

    One line for each worker's end (but ``logged``'s, the worker whose death started the stop, which
    the caller has logged): INFO for a clean stop (:data:`STOPPED_EXITS`), WARNING for any other
    status, ERROR for one killed after ``budget_s``; each says what the parent does next. Before
    session s49 the parent logged no worker's exit during a stop, so a worker that crashed while
    draining, or ended on a signal from outside, left no trace at the parent."""
    for w in workers:
        if w.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                w.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + budget_s
    codes = []
    for index, w in enumerate(workers):
        try:
            code = w.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.kill()
            code = w.wait()
            killed = True
        else:
            killed = False
        codes.append(code)
        if w is logged:
            continue
        left = sum(1 for other in workers[index + 1 :] if other.poll() is None)
        then = f"waiting for {left} more" if left else "every worker has ended"
        if killed:
            log.error(
                "worker %d (pid %d) did not stop within %gs of the stop: killed; %s",
                index,
                w.pid,
                budget_s,
                then,
            )
        elif code in STOPPED_EXITS:
            log.info("worker %d (pid %d) stopped with %s; %s", index, w.pid, describe_exit(code), then)
        else:
            log.warning(
                "worker %d (pid %d) ended during the stop with %s, not a clean stop; %s",
                index,
                w.pid,
                describe_exit(code),
                then,
            )
    return codes
