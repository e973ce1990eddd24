"""Bad URLs, wrong credentials, unreachable servers, missing buckets: one line naming the URL, nothing changed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.servers import TEST_BUCKET, free_port


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "agentsnap", "AWS_SECRET_ACCESS_KEY": "agentsnap"}
    return subprocess.run([sys.executable, "-m", "agentsnap_core", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def store_state(root: Path) -> dict[str, Any]:
    """Everything a failed remote command must leave alone: objects, refs, reflog, HEAD, config."""
    with Repo.open(root) as repo:
        objs = sorted(repo.objects.iter_oids())
        return {
            "objects": hashlib.sha256("".join(objs).encode()).hexdigest(),
            "refs": repo.refs.list_refs(),
            "reflog": len(repo.refs.reflog()),
            "head": repo.head(),
            "remotes": repo.refs.get_config("remotes"),
            "files": sorted(p.name for p in (root / ".agentsnap").iterdir()),
        }


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    repo = Repo.init(root)
    (root / "f.txt").write_text("hello\n")
    repo.snapshot("one")
    repo.close()
    return root


def _cases(pg: Any, s3: Any) -> dict[str, tuple[str, str, str]]:
    """name -> (url, secret that must not be printed, what the message must say)."""
    dead = free_port()
    return {
        "bad scheme": ("ftp://example.com/store", "", "unknown scheme 'ftp'"),
        "no bucket in url": ("s3://", "", "no bucket"),
        "wrong password": (pg.url.replace(pg.password, "wrong-pw-42"), "wrong-pw-42", "password authentication failed"),
        "postgres unreachable": (f"postgresql://bob:hunter2@127.0.0.1:{dead}/db", "hunter2", "cannot open store"),
        "s3 unreachable": (f"s3://b/p?endpoint=http://127.0.0.1:{dead}&secret=topsecret", "topsecret", "cannot open store"),
        "missing bucket": (f"s3://no-such-bucket-here/p?endpoint={s3.endpoint}", "", "bucket 'no-such-bucket-here' does not exist"),
        "unknown database": (pg.url.rsplit("/", 1)[0] + "/nodb", pg.password, 'database "nodb" does not exist'),
    }


@pytest.mark.parametrize(
    "case",
    ["bad scheme", "no bucket in url", "wrong password", "postgres unreachable", "s3 unreachable", "missing bucket",
     "unknown database"],
)  # fmt: skip
@pytest.mark.parametrize("verb", ["push", "fetch", "clone"])
def test_remote_failure_is_one_line_naming_the_url(
    verb: str, case: str, work: Path, tmp_path: Path, postgres_server: Any, s3_server: Any
) -> None:
    url, secret, says = _cases(postgres_server, s3_server)[case]
    before = store_state(work)
    if verb == "clone":
        proc = run_cli(tmp_path, "clone", url, "copy")
        assert not (tmp_path / "copy").exists()  # nothing half-made
    else:
        proc = run_cli(work, verb, url)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("agentsnap: error:") and says in lines[0]
    if secret:
        assert secret not in proc.stderr + proc.stdout
        assert "***" in lines[0]
    shown = url.split("?")[0].split("@")[-1] if "://" in url and url != "s3://" else url
    assert shown in lines[0], f"the message should name the URL: {lines[0]}"
    assert store_state(work) == before


def test_fetch_from_a_prefix_without_a_store_says_so(work: Path, s3_server: Any) -> None:
    url = f"s3://{TEST_BUCKET}/nothing-here-yet?endpoint={s3_server.endpoint}"
    before = store_state(work)
    proc = run_cli(work, "fetch", url)
    assert proc.returncode == 2 and "no agentsnap store here" in proc.stderr
    assert store_state(work) == before


def test_cli_push_clone_roundtrip_and_remote_list_masks_password(work: Path, tmp_path: Path, combined_url: str) -> None:
    assert run_cli(work, "remote", "add", "team", combined_url).returncode == 0
    listed = run_cli(work, "remote", "list")
    assert "agentsnap-test-pw" not in listed.stdout and "postgres:***@" in listed.stdout
    for habit in (["remote"], ["remote", "-v"]):  # (git's: it was click's usage text, exit 2)
        also = run_cli(work, *habit)
        assert also.returncode == 0 and also.stdout == listed.stdout, (habit, also.stdout, also.stderr)
    pushed = run_cli(work, "push", "team", "--json")
    assert pushed.returncode == 0, pushed.stderr
    again = run_cli(work, "push", "team")
    assert again.returncode == 0 and "0 object(s)" in again.stdout and "up to date" in again.stdout
    cloned = run_cli(tmp_path, "clone", combined_url, "copy")
    assert cloned.returncode == 0, cloned.stderr
    assert (tmp_path / "copy" / "f.txt").read_text() == "hello\n"
    assert "agentsnap-test-pw" not in cloned.stdout + cloned.stderr


def test_cli_non_fast_forward_push_is_refused_with_advice(work: Path, tmp_path: Path) -> None:
    url = (tmp_path / "remote").as_uri()
    assert run_cli(work, "push", url).returncode == 0
    assert run_cli(tmp_path, "clone", url, "other").returncode == 0
    (tmp_path / "other" / "g.txt").write_text("theirs\n")
    assert run_cli(tmp_path / "other", "snapshot", "-m", "theirs").returncode == 0
    assert run_cli(tmp_path / "other", "push").returncode == 0
    (work / "h.txt").write_text("ours\n")
    assert run_cli(work, "snapshot", "-m", "ours").returncode == 0
    before = store_state(work)
    refused = run_cli(work, "push", url)
    assert refused.returncode == 2
    assert "not a fast-forward" in refused.stderr and "agentsnap pull" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert store_state(work)["refs"] == before["refs"]
