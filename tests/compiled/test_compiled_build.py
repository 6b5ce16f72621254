"""The opt-in mypyc build, built for real and run: it must decide and answer exactly as pure Python.

One build per test session (module fixture), of the subset of ``igw.compiled.COMPILED_MODULES`` the
checks below exercise - the scheduler with the scorers the default profile runs, and the request
path's body handling and forwarding - into a temporary copy of the checkout (never the checkout
itself). Skipped only when there is no C compiler. Then:

- the DES decisions of two scenarios are byte-identical between the compiled copy and this tree;
- the lean server's and the HTTP surface's tests (malformed bodies, error shapes, streaming,
  keep-alive) pass against the compiled copy, run by pytest in a process with ``PYTHONPATH`` at it;
- ``igw perf decide`` runs on it and says it measured compiled code;
- the hot paths leave no garbage in reference cycles there (``tests/gateway/test_garbage_cycles.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from igw.compiled import COMPILED_MODULES
from igw.config.paths import REPO_ROOT
from igw.perf.compiled_tree import build_compiled_tree

pytestmark = pytest.mark.timeout(1200)  # the first test waits for the C build (minutes on a busy machine)

TEST_MODULES = (
    "igw.scheduling.scheduler",
    "igw.scheduling.columns",
    "igw.scheduling.plugins.prefix_index",
    "igw.scheduling.plugins.queue_scorer",
    "igw.scheduling.plugins.kv_cache_scorer",
    "igw.gateway.request_body",
    "igw.gateway.inference",
    "igw.gateway.upstream",
    "igw.gateway.upstream_client",
    "igw.gateway.scrape_client",
    "igw.gateway.metrics_parser",
    "igw.gateway.page_template",
    "igw.gateway.scrape_share",
    "igw.gateway.lean_server",
    "igw.security.guard",
    "igw.security.verifier",
    "igw.security.token_cache",
    "igw.gateway.access_log",
)
LEFT_OUT = (
    "not ("
    + " or ".join(
        (
            # They reach into the code in ways compiled code does not follow (the behaviour they pin is
            # the same): a stand-in passed through cast(Any, ...) where compiled code checks the type at
            # run time; an object made with __new__ alone, whose native class runs __init__; methods and
            # module functions replaced by monkeypatch, which compiled callers bound at build time.
            "test_the_stream_writer_frames_chunks_and_refuses_a_closed_connection",
            "test_a_failing_after_response_callback_is_logged_and_the_rest_still_run",
            "test_the_lean_side_records_a_forwarded_answer_after_writing_it",
            "test_a_handler_failing_inside_a_started_stream_closes_the_connection",
            "test_the_inflight_registry_is_handed_the_handlers_task_on_the_lean_side",
        )
    )
    + ")"
)
"""The tests of ``tests/gateway/test_lean_server.py`` not run against the compiled copy."""
DES = """
import sys
from pathlib import Path
import igw.scheduling.scheduler
from igw.bench.capacity import FleetCapacity
from igw.bench.des_runner import DesOptions, run_des
from igw.bench.scenarios import SCENARIOS
print(igw.scheduling.scheduler.__file__)
print(igw.scheduling.scheduler.NATIVE_SUM)
print(type(igw.scheduling.scheduler._native_rows_of).__name__)
import igw.scheduling.columns, igw.scheduling.plugins.prefix_index
print(igw.scheduling.columns.NATIVE_RESCRAPED, igw.scheduling.plugins.prefix_index.NATIVE_WALK)
for name in ("mixed-fleet-8b", "shared-prefix-8b-high-cache"):
    options = DesOptions(
        policies=["gateway-default"], seeds=[1], duration_scale=0.02, decisions_out=Path(sys.argv[1])
    )
    run_des(SCENARIOS[name], options=options, capacity=FleetCapacity(per_type=(), requests_per_s=300.0))
"""


def _c_compiler() -> str | None:
    configured = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(configured) or shutil.which("cc")


@pytest.fixture(scope="module")
def compiled_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if _c_compiler() is None:
        pytest.skip("no C compiler: the mypyc build cannot run here")
    root, _ = build_compiled_tree(tmp_path_factory.mktemp("compiled"), TEST_MODULES)
    return root


def _run(tree: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_test_subset_is_listed() -> None:
    assert set(TEST_MODULES) <= set(COMPILED_MODULES)


def test_des_decisions_are_byte_identical_to_pure_python(compiled_tree: Path, tmp_path: Path) -> None:
    decisions = {}
    for label, tree in (("pure", REPO_ROOT / "gateway_src"), ("compiled", compiled_tree)):
        out = tmp_path / f"{label}.jsonl"
        done = _run(tree, "-c", DES, str(out))
        assert done.returncode == 0, done.stderr[-3000:]
        loaded_from, native_sum, rows_loops, native_loops = done.stdout.splitlines()[:4]
        assert loaded_from.endswith(".py") == (label == "pure"), loaded_from
        assert native_sum == str(label == "compiled")  # the compiled weighted sum decides there
        assert (rows_loops == "function") == (label == "pure")  # and the rows' loops are native there
        assert native_loops == f"{label == 'compiled'} {label == 'compiled'}"  # rescraped, prefix walk
        decisions[label] = out.read_bytes()
    assert decisions["pure"].count(b"\n") > 100
    assert decisions["compiled"] == decisions["pure"]


def test_the_tests_tell_a_compiled_module_from_an_interpreted_one(compiled_tree: Path) -> None:
    """``tests.compiled.tree.compiled``, which the tests that cannot run compiled skip by, sees the
    build's modules as compiled and the others as sources."""
    probe = (
        "from tests.compiled.tree import compiled as c\n"
        "print(c('igw.scheduling.scheduler'), c('igw.compiled'))"
    )
    done = _run(compiled_tree, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_the_native_score_rows_match_the_generated_kernel_when_compiled(compiled_tree: Path) -> None:
    test = (
        "tests/scheduling/test_pick_fast_paths.py::test_the_native_score_rows_are_the_generated_kernel_s_rows"
    )
    probe = _run(compiled_tree, "-c", "import igw.scheduling.scheduler as m; print(m.__file__)")
    assert probe.returncode == 0, probe.stderr
    assert not probe.stdout.splitlines()[0].endswith(".py"), probe.stdout
    done = _run(compiled_tree, "-m", "pytest", test, "-p", "no:cacheprovider", "-q")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_lean_server_and_error_shapes_hold_when_compiled(compiled_tree: Path) -> None:
    probe = _run(
        compiled_tree,
        "-c",
        "import igw.gateway.inference as m; print(m.__file__)",
    )
    assert probe.returncode == 0, probe.stderr
    assert not probe.stdout.splitlines()[0].endswith(".py"), probe.stdout
    tests = ["tests/gateway/test_lean_server.py", "tests/gateway/test_http_surface.py"]
    done = _run(compiled_tree, "-m", "pytest", *tests, "-k", LEFT_OUT, "-p", "no:cacheprovider", "-q")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_upstream_and_scrape_paths_hold_when_compiled(compiled_tree: Path) -> None:
    """Both clients' connections are asyncio protocols by their methods, so that they compile to
    native classes (a subclass of ``asyncio.Protocol`` stays interpreted, and with it every call the
    loop and httptools make into it); their suites (TLS on asyncio and uvloop included), the page
    parser's, the page template's and the scrape relay's pass on the compiled copy. Left out: the
    test that wraps ``_Connection.data_received`` with monkeypatch, which a native class does not
    allow, and the one that lowers the relay's line bound by monkeypatch (a ``Final`` constant is
    built into the compiled code)."""
    probe = (
        "import igw.gateway.upstream_client as u, igw.gateway.scrape_client as s\n"
        "print(u.__file__.endswith('.py'), s.__file__.endswith('.py'))\n"
        "print(hasattr(u._Connection, '__dict__') and '__weakref__' in u._Connection.__dict__,"
        " hasattr(s._Connection, '__dict__') and '__weakref__' in s._Connection.__dict__)"
    )
    done = _run(compiled_tree, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False", "False"], done.stdout
    tests = [
        f"tests/gateway/{name}.py"
        for name in (
            "test_upstream_client",
            "test_scrape_client",
            "test_metrics_parser",
            "test_metrics_parser_hints",
            "test_metrics_parser_small",
            "test_page_template",
            "test_scrape_share",
        )
    ]
    left_out = "not (first_body_bytes_reach_a_callback or cannot_read_ends_the_channel)"
    done = _run(compiled_tree, "-m", "pytest", *tests, "-k", left_out, "-p", "no:cacheprovider", "-q")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_hot_paths_leave_no_reference_cycles_when_compiled(compiled_tree: Path) -> None:
    """Requests (plain, streamed, guarded, cut short) and scrapes leave no garbage in reference cycles
    on the compiled copy either (``tests/gateway/test_garbage_cycles.py``): compiled by mypyc, nested
    functions that refer to one another share an environment that holds them, a cycle per call the
    interpreted code does not make (``parse_page`` kept each parsed page that way until session s40)."""
    probe = (
        "import igw.gateway.metrics_parser as m, igw.gateway.scrape_client as s, igw.gateway.upstream as u\n"
        "print(m.__file__.endswith('.py'), s.__file__.endswith('.py'), u.__file__.endswith('.py'))"
    )
    done = _run(compiled_tree, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False"], done.stdout
    test = "tests/gateway/test_garbage_cycles.py"
    done = _run(compiled_tree, "-m", "pytest", test, "-p", "no:cacheprovider", "-q")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_verified_token_cache_holds_when_compiled(compiled_tree: Path) -> None:
    """The cache's bounds (expiry, max age, key set, eviction, stale keys) through the compiled guard,
    verifier and cache. Left out: the two tests that count digests by replacing the cache's
    ``_key``, which a native class does not allow."""
    probe = _run(compiled_tree, "-c", "import igw.security.token_cache as m; print(m.__file__)")
    assert probe.returncode == 0, probe.stderr
    assert not probe.stdout.splitlines()[0].endswith(".py"), probe.stdout
    left_out = "not (without_digesting or hot_tokens_are_bounded)"
    test = "tests/security/test_token_cache.py"
    selected = ("-m", "pytest", test, "-k", left_out, "-p", "no:cacheprovider", "-q")
    listed = _run(compiled_tree, *selected, "--collect-only")
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    count = int(listed.stdout.split(f"{test}: ")[1].split()[0])  # the selection, as pytest counts it
    assert count >= 9, listed.stdout  # the file's tests but the two left out (more as tests are added)
    done = _run(compiled_tree, *selected)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.split()[0] == "." * count, done.stdout[-2000:]  # every selected test ran and passed


def test_the_access_lines_rounding_and_fields_hold_when_compiled(compiled_tree: Path) -> None:
    """The access log's ``_rounded`` (native float arithmetic in the compiled build) gives what
    ``round`` gives, and the line's fields come out byte for byte as the generic rule states them."""
    probe = _run(compiled_tree, "-c", "import igw.gateway.access_log as m; print(m.__file__)")
    assert probe.returncode == 0, probe.stderr
    assert not probe.stdout.splitlines()[0].endswith(".py"), probe.stdout
    tests = "tests/gateway/test_access_log_lines.py"
    done = _run(
        compiled_tree, "-m", "pytest", tests, "-k", "rounded or generic_rule", "-p", "no:cacheprovider"
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed, 1 skipped" in done.stdout, done.stdout[-2000:]  # the skipped one counts round calls


def test_perf_decide_says_it_measured_compiled_code(compiled_tree: Path) -> None:
    done = _run(compiled_tree, "-m", "igw.cli.main", "perf", "decide", "--endpoints", "16", "--picks", "50")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"code measured: mypyc-compiled: {len(TEST_MODULES)} of {len(COMPILED_MODULES)}" in done.stdout
    assert "not measured (compiled classes cannot be wrapped)" in done.stdout
