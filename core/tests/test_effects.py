"""The effects ledger: exactly-once tool calls across restore and fork (issue 3)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.cli import main as cli
from agentsnap_core.layers.effects import (
    EffectBlocked,
    EffectInDoubt,
    Effects,
    effect,
    wrap_tool,
)
from agentsnap_core.layers.effects_ledger import Ledger
from agentsnap_core.testing.effects import EffectsCase, MailAgent, Outbox, check_effects, reference_case
from click.testing import CliRunner


@pytest.fixture(autouse=True)
def effects_key_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own user config dir (where the key file is created); no key in the environment."""
    cfg = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY", raising=False)
    monkeypatch.delenv("AGENTSNAP_EFFECTS_KEY_FILE", raising=False)
    return cfg


@pytest.fixture
def repo(tmp_path: Path) -> Any:
    r = Repo.init(tmp_path / "work")
    yield r
    r.close()


def make_agent(fx: Effects, outbox: Outbox) -> MailAgent:
    @effect(name="send_email", session=fx, simulate=lambda to, body: {"status": "deferred"})
    def send_email(to: str, body: str) -> dict[str, Any]:
        return outbox.send(to, body)

    return MailAgent({"send_email": send_email})


def run_step(agent: MailAgent, fx: Effects, i: int, variant: str = "") -> None:
    with fx.step(i):
        agent.run_step(i, variant)


CHILD = textwrap.dedent(
    """
    import json, sys
    from agentsnap_core import Repo
    from agentsnap_core.layers.effects import Effects, effect, EffectDivergence
    from agentsnap_core.testing.effects import MailAgent, Outbox

    root, snap, outbox_path, variant, policy = sys.argv[1:6]
    repo = Repo.open(root)
    fx = Effects(repo, on_divergence=policy)
    box = Outbox(outbox_path)

    @effect(name="send_email", session=fx)
    def send_email(to, body):
        return box.send(to, body)

    agent = MailAgent({"send_email": send_email})
    repo.restore_into(agent, snap)
    out = {"error": None}
    try:
        with fx.step(agent.step):
            agent.run_step(agent.step, variant)
    except EffectDivergence as exc:
        out["error"] = type(exc).__name__ + ": " + str(exc)
    out["events"] = fx.events
    out["divergences"] = fx.divergences
    out["messages"] = agent.messages
    print("CHILD " + json.dumps(out, default=str))
    """
)


def run_child(repo: Repo, snap: str, outbox: Outbox, variant: str = "", policy: str = "raise") -> dict[str, Any]:
    """Restore ``snap`` in a new Python process and re-run the step the snapshot stopped in."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(repo.root), snap, str(outbox.path), variant, policy],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("CHILD ")][-1]
    return json.loads(line[len("CHILD ") :])


# ---------------------------------------------------------------------------------------------- must show
def test_fresh_process_restore_reissues_with_different_args_outbox_still_one_and_divergence_reported(
    repo: Repo, tmp_path: Path
) -> None:
    """run -> send -> snapshot -> restore in a fresh process -> call again with 'Hi Bob!' -> one email."""
    outbox = Outbox(tmp_path / "outbox.jsonl")
    fx = Effects(repo)
    agent = make_agent(fx, outbox)
    run_step(agent, fx, 0)
    with fx.step(1):  # the tool runs, then a checkpoint is written before the step completes
        agent.tools["send_email"](to="bob@example.com", body="Hi Bob, the report is ready")
        snap = repo.snapshot("mid tool loop", layers={"state": agent.state_dict()}, capture_world=False)
    assert len(outbox.emails()) == 1

    raised = run_child(repo, snap.id, outbox, variant="!", policy="raise")
    assert len(outbox.emails()) == 1
    assert raised["error"] and raised["error"].startswith("EffectDivergence")
    assert "main/1/send_email#0" in raised["error"] and "Hi Bob!" in raised["error"]

    replayed = run_child(repo, snap.id, outbox, variant="!", policy="replay")
    assert len(outbox.emails()) == 1
    assert replayed["events"] == [["replayed", "main/1/send_email#0"]]
    (div,) = replayed["divergences"]
    assert div["recorded"]["args"]["body"] == "Hi Bob, the report is ready"
    assert div["new"]["args"]["body"] == "Hi Bob! the report is ready"
    assert json.loads(replayed["messages"][-1]["content"]) == {"n": 1, "status": "sent"}  # the recorded result

    listed = CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "--raw", "--json"])
    notes = [e for e in json.loads(listed.output)["entries"] if e["kind"] == "note"]
    assert [n["note"] for n in notes] == ["divergence"] and notes[0]["key"] == "main/1/send_email#0"


def test_snapshot_before_send_restored_and_rerun_twice_sends_exactly_one(repo: Repo, tmp_path: Path) -> None:
    """The ledger follows real time: restoring to before the send does not un-send it."""
    outbox = Outbox(tmp_path / "outbox.jsonl")
    fx = Effects(repo)
    agent = make_agent(fx, outbox)
    run_step(agent, fx, 0)
    before = repo.capture(agent, "before the send")
    assert before.layers.get("effects") is None  # nothing recorded yet
    run_step(agent, fx, 1)
    assert len(outbox.emails()) == 1

    fx2 = Effects(repo)  # same process, new session
    again = make_agent(fx2, outbox)
    repo.restore_into(again, before.id)
    run_step(again, fx2, again.step)
    assert fx2.events == [("replayed", "main/1/send_email#0")]
    child = run_child(repo, before.id, outbox)  # and a brand-new process
    assert child["events"] == [["replayed", "main/1/send_email#0"]]
    assert len(outbox.emails()) == 1

    after = repo.snapshot("after", capture_world=False)
    led = Ledger.for_repo(repo).sync()
    assert after.layers["effects"]["count"] == len(led.entries) and after.layers["effects"]["head"] == led.head()


def test_fork_12_before_send_sends_nothing_until_one_branch_is_applied_then_exactly_one(
    repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fork -n 12`` (default policy defer): 0 emails; ``effects apply attempt-7``: 1; a second branch: still 1."""
    outbox = Outbox(tmp_path / "outbox.jsonl")
    fx = Effects(repo)
    agent = make_agent(fx, outbox)
    run_step(agent, fx, 0)
    snap = repo.capture(agent, "before the send")
    res = CliRunner().invoke(cli, ["-C", str(repo.root), "fork", snap.id, "-n", "12", "--json"])
    assert res.exit_code == 0, res.output
    branches = [f["branch"] for f in json.loads(res.output)["forks"]]
    assert len(branches) == 12
    for b in branches:
        bfx = Effects(repo, b)
        a = make_agent(bfx, outbox)
        repo.restore_into(a, snap.id)
        run_step(a, bfx, a.step)
        assert bfx.events[0][0] == "deferred"
        assert json.loads(a.messages[-1]["content"]) == {"status": "deferred"}  # the tool's simulated result
    assert outbox.emails() == []
    listing = json.loads(CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "--json"]).output)
    assert sorted({r["status"] for r in listing["effects"]}) == ["deferred"] and len(listing["effects"]) == 12

    tools = tmp_path / "mailtools.py"
    tools.write_text(
        "import os\nfrom agentsnap_core.layers.effects import effect\nfrom agentsnap_core.testing.effects import Outbox\n"
        "@effect(name='send_email')\ndef send_email(to, body):\n    return Outbox(os.environ['OUTBOX']).send(to, body)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OUTBOX", str(outbox.path))
    res = CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "apply", "attempt-7", "--import", "mailtools", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["applied"] == ["main/1/send_email#0"]
    assert len(outbox.emails()) == 1
    res = CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "apply", "attempt-3", "--import", "mailtools", "--json"])
    conflicts = json.loads(res.output)["conflicts"]
    assert conflicts and "both branches" in conflicts[0]["detail"]
    assert len(outbox.emails()) == 1
    again = CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "apply", "attempt-7", "--json"])
    assert json.loads(again.output)["applied"] == [] and len(outbox.emails()) == 1
    # main itself reaching the step later replays the applied email
    main_fx = Effects(repo)
    m = make_agent(main_fx, outbox)
    repo.restore_into(m, snap.id)
    run_step(m, main_fx, m.step)
    assert main_fx.events == [("replayed", "main/1/send_email#0")] and len(outbox.emails()) == 1
    assert repo.verify()["ok"]


def test_crash_between_intent_and_result_is_in_doubt_until_resolved(repo: Repo, tmp_path: Path) -> None:
    """A process killed mid-call leaves an intent: the next call raises EffectInDoubt; resolve settles it."""
    outbox = Outbox(tmp_path / "outbox.jsonl")
    code = textwrap.dedent(
        """
        import os, sys
        from agentsnap_core import Repo
        from agentsnap_core.layers.effects import Effects, effect
        from agentsnap_core.testing.effects import Outbox
        repo = Repo.open(sys.argv[1]); fx = Effects(repo); box = Outbox(sys.argv[2])
        @effect(session=fx)
        def send_email(to, body):
            if sys.argv[3] == "after":
                box.send(to, body)
            os._exit(9)  # killed between the intent and the result
        with fx.step(int(sys.argv[4])):
            send_email("bob@example.com", "hi")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for when, step in (("after", 1), ("before", 2)):
        proc = subprocess.run([sys.executable, "-c", code, str(repo.root), str(outbox.path), when, str(step)], env=env, timeout=300)
        assert proc.returncode == 9
    assert len(outbox.emails()) == 1

    fx = Effects(repo)

    @effect(session=fx)
    def send_email(to: str, body: str) -> dict[str, Any]:
        return outbox.send(to, body)

    for step in (1, 2):
        with fx.step(step), pytest.raises(EffectInDoubt) as err:
            send_email("bob@example.com", "hi")
        assert err.value.key == f"main/{step}/send_email#0" and "effects resolve" in str(err.value)
    rows = json.loads(CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "--json"]).output)["effects"]
    assert [r["status"] for r in rows] == ["in-doubt", "in-doubt"]

    runner = CliRunner()
    assert runner.invoke(cli, ["-C", str(repo.root), "effects", "resolve", "main/1/send_email#0", "--done", "--result", '{"n": 1}']).exit_code == 0
    assert runner.invoke(cli, ["-C", str(repo.root), "effects", "resolve", "main/2/send_email#0", "--retry"]).exit_code == 0
    bad = runner.invoke(cli, ["-C", str(repo.root), "effects", "resolve", "main/1/send_email#0", "--retry"])
    assert bad.exit_code == 2 and "not in doubt" in bad.output
    with fx.step(1):
        assert send_email("bob@example.com", "hi") == {"n": 1}
    with fx.step(2):
        assert send_email("bob@example.com", "hi")["status"] == "sent"
    assert len(outbox.emails()) == 2  # one per position, never a duplicate
    with fx.step(2):
        send_email("bob@example.com", "hi")
    assert len(outbox.emails()) == 2


# ---------------------------------------------------------------------------------------------- behaviour
def test_only_irreversible_effects_are_guarded_by_default(repo: Repo) -> None:
    fx = Effects(repo)
    calls: list[str] = []

    @effect(kind="pure", session=fx)
    def add(a: int, b: int) -> int:
        calls.append("add")
        return a + b

    @effect(kind="idempotent", session=fx)
    def put(k: str) -> str:
        calls.append("put")
        return k

    with fx.step(0):
        add(1, 2), add(1, 2), put("x"), put("x")
    assert calls == ["add", "add", "put", "put"]
    assert Ledger.for_repo(repo).sync().entries == []


def test_idempotent_tool_marked_guarded_reruns_when_in_doubt(repo: Repo) -> None:
    fx = Effects(repo)
    calls: list[int] = []

    @effect(kind="idempotent", guard=True, session=fx)
    def upsert(k: str) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # dies mid-call: the intent stays without a result
        return len(calls)

    with fx.step(0), pytest.raises(KeyboardInterrupt):
        upsert("a")
    fresh = Effects(repo)
    with fresh.step(0):
        assert effect(upsert.__wrapped__, kind="idempotent", guard=True, session=fresh, name="upsert")("a") == 2
    with Effects(repo).step(0) as again:
        assert effect(upsert.__wrapped__, kind="idempotent", guard=True, session=again, name="upsert")("a") == 2
    assert len(calls) == 2


def test_tool_exception_is_recorded_as_failed_and_the_position_can_run_again(repo: Repo, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.jsonl")
    fx = Effects(repo)
    fail = [True]

    @effect(session=fx)
    def send_email(to: str, body: str) -> dict[str, Any]:
        if fail[0]:
            raise ConnectionError("smtp down")
        return outbox.send(to, body)

    with fx.step(0), pytest.raises(ConnectionError):
        send_email("a", "b")
    fail[0] = False
    with fx.step(0):
        send_email("a", "b")
    with fx.step(0):
        send_email("a", "b")
    assert len(outbox.emails()) == 1
    statuses = [e.get("ok") for e in Ledger.for_repo(repo).sync().entries if e["kind"] == "result"]
    assert statuses == [False, True]


def test_user_supplied_key_wins_over_the_position(repo: Repo, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.jsonl")
    fx = Effects(repo)

    @effect(session=fx, key=lambda order, amount: f"charge-{order}")
    def charge(order: str, amount: int) -> dict[str, Any]:
        return outbox.send(order, str(amount))

    with fx.step(0):
        charge("A1", 10)
    with fx.step(5):
        assert charge("A1", 10)["n"] == 1  # another step, same user key: replayed
        charge("B2", 3)
    assert [e["to"] for e in outbox.emails()] == ["A1", "B2"]
    assert {r["key"] for r in Ledger.for_repo(repo).sync().rows()} == {"user:charge-A1", "user:charge-B2"}


def test_divergence_policy_run_performs_the_new_call_once(repo: Repo, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.jsonl")
    for body, expected in (("v1", 1), ("v2", 2), ("v2", 2), ("v1", 2)):
        fx = Effects(repo, on_divergence="run")

        @effect(session=fx, name="send_email")
        def send_email(to: str, body: str) -> dict[str, Any]:
            return outbox.send(to, body)

        with fx.step(0):
            send_email("bob", body)
        assert len(outbox.emails()) == expected


def test_block_policy_refuses_irreversible_calls_and_can_be_changed(repo: Repo, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.jsonl")
    snap = repo.snapshot("s", capture_world=False)
    (f,) = repo.fork(snap.id, 1, prefix="try", effects_policy="block")
    fx = Effects(repo, f["branch"])
    agent = make_agent(fx, outbox)
    with pytest.raises(EffectBlocked) as err:
        run_step(agent, fx, 1)
    assert "policy" in str(err.value)
    assert CliRunner().invoke(cli, ["-C", str(repo.root), "effects", "policy", f["branch"], "allow"]).exit_code == 0
    run_step(make_agent(fx, outbox), fx, 1)
    assert len(outbox.emails()) == 1


def test_async_tools_and_the_context_manager_form(repo: Repo, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.jsonl")
    fx = Effects(repo)

    @effect(session=fx)
    async def send_async(to: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        return outbox.send(to, "async")

    async def go() -> Any:
        with fx.step(0):
            return await send_async("ann")

    assert asyncio.run(go())["n"] == 1
    assert asyncio.run(go())["n"] == 1  # replayed
    for _ in range(2):
        with fx.step(1), fx.call("post", {"url": "https://example.com/hook"}) as call:
            if call.run:
                call.result = outbox.send("hook", "posted")
        assert call.result["n"] == 2
    assert len(outbox.emails()) == 2


def test_wrap_tool_guards_framework_shaped_tools_without_importing_frameworks(repo: Repo, tmp_path: Path) -> None:
    """Duck-typed shapes of LangChain tools (func), CrewAI (_run), AutoGen FunctionTool (_func),
    LangGraph ToolNode (tools_by_name) and MCP sessions (call_tool); no framework is imported."""
    outbox = Outbox(tmp_path / "o.jsonl")

    class LangChainLike:
        name = "lc_send"

        def __init__(self) -> None:
            self.func = lambda to: outbox.send(to, "lc")

        def invoke(self, args: dict[str, Any]) -> Any:
            return self.func(**args)

    class CrewLike:
        name = "crew_send"

        def _run(self, to: str) -> Any:
            return outbox.send(to, "crew")

        def run(self, **kw: Any) -> Any:
            return self._run(**kw)

    class AutoGenLike:
        name = "ag_send"

        def __init__(self) -> None:
            async def f(to: str) -> Any:
                return outbox.send(to, "autogen")

            self._func = f

        async def run_json(self, args: dict[str, Any], cancellation_token: Any = None) -> Any:
            return await self._func(**args)

    class ToolNodeLike:
        def __init__(self) -> None:
            self.tools_by_name = {"lc_send": LangChainLike()}

    class McpLike:
        def __init__(self) -> None:
            self.calls: list[str] = []

        async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
            self.calls.append(name)
            return outbox.send(arguments["to"], f"mcp:{name}")

    fx = Effects(repo)
    lc, crew, ag, node, mcp = LangChainLike(), CrewLike(), AutoGenLike(), ToolNodeLike(), McpLike()
    for t in (lc, crew, ag, node, mcp):
        assert wrap_tool(t, fx) is t
    for _ in range(2):
        with fx.step(0):
            lc.invoke({"to": "a"})
            crew.run(to="b")
            asyncio.run(ag.run_json({"to": "c"}))
            node.tools_by_name["lc_send"].invoke({"to": "d"})
            asyncio.run(mcp.call_tool("send", {"to": "e"}))
    assert [e["body"] for e in outbox.emails()] == ["lc", "crew", "autogen", "lc", "mcp:send"]
    keys = [r["key"] for r in Ledger.for_repo(repo).sync().rows()]
    assert keys == ["main/0/lc_send#0", "main/0/crew_send#0", "main/0/ag_send#0", "main/0/lc_send#1", "main/0/send#0"]


def test_large_results_are_store_blobs_that_gc_keeps(repo: Repo) -> None:
    fx = Effects(repo)
    big = os.urandom(300_000)

    @effect(session=fx)
    def fetch_report() -> bytes:
        return big

    with fx.step(0):
        fetch_report()
    (ref,) = Ledger.for_repo(repo).sync().blob_ids()
    assert repo.objects.has(ref)
    repo.gc(grace_seconds=0)
    with Effects(repo).step(0) as fresh:
        assert effect(fetch_report.__wrapped__, session=fresh, name="fetch_report")() == big
    assert repo.verify()["ok"]


def test_unguarded_session_is_required_for_irreversible_tools() -> None:
    @effect
    def send(to: str) -> str:
        return to

    with pytest.raises(Exception, match="no effects session is active"):
        send("x")


def test_cli_lists_entries_with_status_and_snapshot_view(repo: Repo, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.jsonl")
    fx = Effects(repo)
    agent = make_agent(fx, outbox)
    run_step(agent, fx, 1)
    snap = repo.snapshot("one", capture_world=False)
    run_step(agent, fx, 2)
    runner = CliRunner()
    text = runner.invoke(cli, ["-C", str(repo.root), "effects"])
    assert text.exit_code == 0 and "done      main/1/send_email#0" in text.output
    at = json.loads(runner.invoke(cli, ["-C", str(repo.root), "effects", snap.id[:12], "--json"]).output)
    assert [r["key"] for r in at["effects"]] == ["main/1/send_email#0"]
    assert at["count"] == snap.layers["effects"]["count"]
    ok = runner.invoke(cli, ["-C", str(repo.root), "effects", "verify"])
    assert ok.exit_code == 0 and "chain verifies" in ok.output


# ---------------------------------------------------------------------------------------------- conformance kit
def test_conformance_kit_reference_agent_passes(tmp_path: Path) -> None:
    report = check_effects(reference_case(), tmp_path)
    assert report.passed, str(report)
    assert [r.name for r in report.results] == [
        "send_once", "restore_mid_loop", "restore_twice", "divergent_args", "fork_inherits", "fork_defers", "ledger_verifies",
    ]


def test_conformance_kit_fails_an_adapter_that_does_not_guard_its_tool(tmp_path: Path) -> None:
    def make_unguarded(send: Any, fx: Effects) -> MailAgent:
        return MailAgent({"send_email": lambda to, body: send(to, body)})

    case = EffectsCase("unguarded", make_unguarded, lambda a, i, v: a.run_step(i, v))
    report = check_effects(case, tmp_path)
    assert not report.passed
    assert "restore_mid_loop" in report.failed()


# ---------------------------------------------------------------------------------------------- merge engine
def _fork_and_run(repo: Repo, snap: Any, outbox: Outbox, n: int, policy: str = "defer") -> list[str]:
    branches = [f["branch"] for f in repo.fork(snap.id, n, effects_policy=policy)]
    for b in branches:
        bfx = Effects(repo, b)
        a = make_agent(bfx, outbox)
        repo.restore_into(a, snap.id)
        run_step(a, bfx, a.step)
        repo.snapshot(f"{b} sent", ref=f"refs/heads/{b}", layers={"state": a.state_dict()}, capture_world=False)
    return branches


def test_fork_12_then_merge_one_branch_with_the_merge_engine_sends_exactly_one(repo: Repo, tmp_path: Path) -> None:
    """``merge attempt-7`` (a fast-forward) runs its deferred email; merging a sibling after it runs nothing."""
    from agentsnap_core.operations.merge import merge

    outbox = Outbox(tmp_path / "outbox.jsonl")
    fx = Effects(repo)
    agent = make_agent(fx, outbox)
    run_step(agent, fx, 0)
    snap = repo.capture(agent, "before the send")
    branches = _fork_and_run(repo, snap, outbox, 12)
    assert outbox.emails() == []
    first = merge(repo, branches[6])
    assert first.status == "fast-forward"
    assert len(outbox.emails()) == 1
    second = merge(repo, branches[2])
    assert second.status == "merged"
    assert len(outbox.emails()) == 1
    assert any("effects" in n for n in second.notes)
    rows = {r["key"]: r for r in Ledger.for_repo(repo).sync().rows()}
    assert rows["main/1/send_email#0"]["status"] == "done"
    assert sum(r["status"] == "applied" for r in rows.values()) == 1
    assert sum(r["status"] == "conflict" for r in rows.values()) == 1
    rep = repo.verify()
    assert rep["ok"] and rep["effects"]["status"] == "ok"
    merged = repo.get("HEAD")
    assert merged.layers["effects"]["count"] == rep["effects"]["entries"]  # the merge snapshot binds the grown chain


def test_merge_flags_an_irreversible_effect_that_ran_on_both_branches(repo: Repo, tmp_path: Path) -> None:
    from agentsnap_core.operations.merge import merge

    outbox = Outbox(tmp_path / "outbox.jsonl")
    fx = Effects(repo)
    agent = make_agent(fx, outbox)
    run_step(agent, fx, 0)
    snap = repo.capture(agent, "before the send")
    (branch,) = _fork_and_run(repo, snap, outbox, 1, policy="allow")
    run_step(agent, fx, 1)
    repo.capture(agent, "main sent too")
    assert len(outbox.emails()) == 2  # policy allow: both lines really sent
    result = merge(repo, branch, strategy="ours")  # both agents' states changed: keep ours
    assert result.status == "merged"
    assert any("ran on both branches" in n for n in result.notes), result.notes
    notes = [e for e in Ledger.for_repo(repo).sync().entries if e.get("note") == "ran-on-both"]
    assert notes and notes[0]["other"] == "main/1/send_email#0"
    assert len(outbox.emails()) == 2


def test_parallel_calls_of_one_tool_match_their_recorded_calls_in_any_order(repo: Repo, tmp_path: Path) -> None:
    """Tools run in parallel may finish in another order after a restore: calls match by arguments first."""
    outbox = Outbox(tmp_path / "o.jsonl")
    fx = Effects(repo)

    @effect(session=fx, name="send_email")
    def send_email(to: str, body: str) -> dict[str, Any]:
        return outbox.send(to, body)

    with fx.step(3):
        a, b = send_email("ann", "A"), send_email("bob", "B")
    with Effects(repo).step(3) as again:
        guarded = effect(send_email.__wrapped__, session=again, name="send_email")
        assert guarded("bob", "B") == b and guarded("ann", "A") == a
        assert again.divergences == [] and [s for s, _ in again.events] == ["replayed", "replayed"]
    assert len(outbox.emails()) == 2


def test_a_call_running_in_another_process_is_reported_in_flight_not_rerun(repo: Repo, tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "o.jsonl")
    started, release = tmp_path / "started", tmp_path / "release"
    code = textwrap.dedent(
        """
        import sys, time, pathlib
        from agentsnap_core import Repo
        from agentsnap_core.layers.effects import Effects, effect
        from agentsnap_core.testing.effects import Outbox
        repo = Repo.open(sys.argv[1]); fx = Effects(repo); box = Outbox(sys.argv[2])
        started, release = pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
        @effect(session=fx)
        def send_email(to, body):
            started.write_text("1")
            while not release.exists():
                time.sleep(0.01)
            return box.send(to, body)
        with fx.step(0):
            send_email("bob", "hi")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.Popen([sys.executable, "-c", code, str(repo.root), str(outbox.path), str(started), str(release)], env=env)
    try:
        for _ in range(30000):
            if started.exists() or child.poll() is not None:
                break
            time.sleep(0.01)
        assert started.exists()
        fx = Effects(repo)

        @effect(session=fx)
        def send_email(to: str, body: str) -> dict[str, Any]:
            return outbox.send(to, body)

        with fx.step(0), pytest.raises(EffectInDoubt) as err:
            send_email("bob", "hi")
        assert err.value.in_flight and "running right now" in str(err.value)
        release.write_text("go")
        assert child.wait(timeout=300) == 0
        with Effects(repo).step(0) as again:
            assert effect(send_email.__wrapped__, session=again, name="send_email")("bob", "hi")["n"] == 1
        assert len(outbox.emails()) == 1
    finally:
        if child.poll() is None:
            child.kill()


APPLY_CHILD = textwrap.dedent(
    """
    import json, sys, time, pathlib
    from agentsnap_core import Repo
    from agentsnap_core.layers.effects import apply_deferred, Effects, effect, EffectInDoubt
    from agentsnap_core.testing.effects import Outbox
    root, outbox, go, mode, branch = sys.argv[1:6]
    repo = Repo.open(root); box = Outbox(outbox)
    while not pathlib.Path(go).exists():
        time.sleep(0.005)
    if mode == "apply":
        rep = apply_deferred(repo, branch, tools={"send_email": box.send})
        print("CHILD " + json.dumps({"applied": rep["applied"], "conflicts": len(rep["conflicts"]), "in_doubt": rep["in_doubt"]}))
    else:
        fx = Effects(repo)
        @effect(session=fx)
        def send_email(to, body):
            return box.send(to, body)
        try:
            with fx.step(5):
                send_email("bob", "same position")
            print("CHILD " + json.dumps({"events": fx.events}))
        except EffectInDoubt as exc:
            print("CHILD " + json.dumps({"in_flight": exc.in_flight}))
    """
)


@pytest.mark.parametrize("mode", ["apply", "call"])
def test_concurrent_processes_never_duplicate_an_effect(repo: Repo, tmp_path: Path, mode: str) -> None:
    """Four processes apply four sibling forks (or call one position) at once: exactly one email."""
    outbox = Outbox(tmp_path / "outbox.jsonl")
    fx = Effects(repo)
    agent = make_agent(fx, outbox)
    run_step(agent, fx, 0)
    snap = repo.capture(agent, "before the send")
    branches = _fork_and_run(repo, snap, outbox, 4) if mode == "apply" else ["main"] * 4
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        subprocess.Popen([sys.executable, "-c", APPLY_CHILD, str(repo.root), str(outbox.path), str(go), mode, b],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for b in branches
    ]
    go.write_text("go")
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        outs.append(json.loads([x for x in stdout.splitlines() if x.startswith("CHILD ")][-1][6:]))
    assert len(outbox.emails()) == 1, outs
    if mode == "apply":
        assert sum(len(o["applied"]) for o in outs) == 1
        assert sum(o["conflicts"] for o in outs) + sum(len(o["in_doubt"]) for o in outs) == 3
    else:
        ran = [o for o in outs if o.get("events") and o["events"][0][0] == "run"]
        assert len(ran) == 1
    assert repo.verify()["ok"]
