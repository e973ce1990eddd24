"""LangChain runnables and chains snapshotted through langchain-core's own ``dumpd`` / ``load``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from agentsnap_core import Repo
from agentsnap_core.errors import AgentSnapError, InvalidInput

pytest.importorskip("langchain_core")

from agentsnap_langgraph.runnables import capture_runnable, restore_runnable  # noqa: E402
from lc_echo import EchoChatModel, make_chain  # noqa: E402

KEY = "sk-test-5f1e2d3c4b"
QUESTION = {"style": "brief", "question": "Capital of France?"}
TESTS = Path(__file__).parent

RESTORE = """
import json, sys
from agentsnap_core import Repo
from lc_echo import EchoChatModel
from agentsnap_langgraph.runnables import restore_runnable
repo = Repo.open(sys.argv[1])
chain = restore_runnable(repo, sys.argv[2], secrets_map={"ECHO_API_KEY": sys.argv[3]}, classes=[EchoChatModel])
print(json.dumps([type(chain).__name__, chain.invoke(json.loads(sys.argv[4]))]))
"""


def _every_stored_byte(root: Path, repo: Repo) -> bytes:
    raw = b"".join(repo.objects.get(oid)[1] for oid in repo.objects.iter_oids())
    return raw + b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_runnable_chain_restored_in_fresh_process_gives_same_output(tmp_path: Path) -> None:
    chain = make_chain(KEY)
    expected = chain.invoke(QUESTION)
    repo = Repo.init(tmp_path / "store")
    snap = capture_runnable(repo, chain, "prompt | model | parser")

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("ECHO_API_KEY", None)
    out = subprocess.run([sys.executable, "-c", RESTORE, str(tmp_path / "store"), snap.id[:12], KEY,
                          json.dumps(QUESTION)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["RunnableSequence", expected]
    assert expected == "bot> Be brief. | Capital of France?"


def test_runnable_secret_is_not_stored_and_must_be_resupplied(tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "store")
    snap = capture_runnable(repo, make_chain(KEY), "with a secret")

    assert KEY.encode() not in _every_stored_byte(tmp_path / "store", repo)
    assert repo.get(snap.id).manifest["meta"]["langchain_secrets"] == ["ECHO_API_KEY"]
    with pytest.raises(InvalidInput, match="ECHO_API_KEY"):
        restore_runnable(repo, snap.id, classes=[EchoChatModel])

    chain = restore_runnable(repo, snap.id, secrets_map={"ECHO_API_KEY": "sk-other"}, classes=[EchoChatModel])
    assert chain.steps[1].api_key.get_secret_value() == "sk-other"
    assert chain.invoke(QUESTION) == "bot> Be brief. | Capital of France?"


def test_runnable_load_is_restricted_to_langchain_core_by_default(tmp_path: Path) -> None:
    """A class outside langchain-core is refused unless the caller allows it."""
    repo = Repo.init(tmp_path / "store")
    snap = capture_runnable(repo, make_chain(KEY), "custom model")
    with pytest.raises(AgentSnapError, match="not allowed"):
        restore_runnable(repo, snap.id, secrets_map={"ECHO_API_KEY": KEY})


def test_runnable_core_only_chain_round_trips(tmp_path: Path) -> None:
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | RunnablePassthrough()
    repo = Repo.init(tmp_path / "store")
    snap = capture_runnable(repo, chain, "core only")
    back = restore_runnable(repo, snap.id)
    assert back.invoke({"q": "hi"}) == chain.invoke({"q": "hi"})


def test_runnable_not_serializable_is_refused_with_nothing_written(tmp_path: Path) -> None:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.runnables import RunnableLambda

    repo = Repo.init(tmp_path / "store")
    before = set(repo.objects.iter_oids())
    with pytest.raises(InvalidInput, match="RunnableLambda"):
        capture_runnable(repo, RunnableLambda(str.upper), "lambda")
    with pytest.raises(InvalidInput, match="RunnableLambda"):
        capture_runnable(repo, RunnableLambda(str.upper) | StrOutputParser(), "chain with a lambda")
    assert set(repo.objects.iter_oids()) == before
    assert repo.refs.list_snapshots() == []


def test_runnable_readme_example_runs(tmp_path: Path) -> None:
    readme = (TESTS.parent / "README.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", readme, re.S) if "capture_runnable" in c)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True"
