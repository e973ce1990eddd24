"""``agentsnap ui`` server (issue 14): token, read-only, ids only, paged queries, the JSON the page draws."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentsnap_core import Repo
from agentsnap_core.testing.servers import free_port
from agentsnap_core.ui import UIServer, make_server
from agentsnap_core.ui.demo import UIStore, build_ui_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UIStore]:
    base = tmp_path_factory.mktemp("ui")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(base / "config"))  # the effects key of this store only
        mp.delenv("AGENTSNAP_EFFECTS_KEY", raising=False)
        mp.delenv("AGENTSNAP_EFFECTS_KEY_FILE", raising=False)
        st = build_ui_store(base / "work")
        (base / "secret.txt").write_text("TOPSECRET-outside-the-store\n")
        yield st
        st.repo.close()


@pytest.fixture(scope="module")
def server(store: UIStore) -> Iterator[UIServer]:
    srv = make_server(store.repo, port=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def request(
    srv: UIServer, path: str, *, token: str | None = "", method: str = "GET", host: str | None = None
) -> tuple[int, bytes]:
    """A raw request (the path is sent exactly as given, no normalisation)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{srv.port}"}
    if token is not None:
        headers["X-Agentsnap-Token"] = token or srv.token
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


def get_json(srv: UIServer, path: str) -> Any:
    status, body = request(srv, path)
    assert status == 200, body
    return json.loads(body)


# ---------------------------------------------------------------------------------------------- must show
def test_requests_without_the_token_are_refused(server: UIServer, store: UIStore) -> None:
    pages = ["/", "/index.html", "/static/app.js", "/static/app.css", "/api/refs", "/api/graph",
             f"/api/snapshots/{store.merged}", f"/api/snapshots/{store.merged}/layers/trace",
             f"/api/diff/{store.base}/{store.merged}"]
    for page in pages:
        status, body = request(server, page, token=None)
        assert status == 403, page
        assert store.merged not in body.decode() and b"haiku" not in body
        assert request(server, page, token="not-the-token")[0] == 403
        wrong = server.token[:-1] + ("y" if server.token.endswith("x") else "x")  # (one character off, always)
        wrong_query = page + ("&" if "?" in page else "?") + "token=" + wrong
        assert request(server, wrong_query, token=None)[0] == 403
        assert request(server, page)[0] == 200, page  # the header form
    # the URL printed for the browser carries it as ?token=
    status, body = request(server, "/?token=" + server.token, token=None)
    assert status == 200 and server.token in body.decode()  # the page passes it on to its own requests
    assert re.fullmatch(rf"http://127\.0\.0\.1:{server.port}/\?token=[A-Za-z0-9_-]{{32}}", server.url)
    # one token per server: a second server gets another
    other = make_server(store.repo, port=0)
    try:
        assert other.token != server.token and other.server_address[0] == "127.0.0.1"
    finally:
        other.server_close()


def test_a_foreign_host_header_is_refused_even_with_the_token(server: UIServer) -> None:
    """A page on another origin that rebinds its DNS name to 127.0.0.1 sends its own Host."""
    assert request(server, "/api/refs", host=f"evil.example:{server.port}")[0] == 403
    assert request(server, "/api/refs", host=f"localhost:{server.port}")[0] == 200


def test_path_parameters_cannot_read_outside_the_store(server: UIServer, store: UIStore) -> None:
    blob = next(e[4] for e in store.repo.world_entries(store.merged) if e[0] == "poem.txt")  # an object, not a snapshot
    sid = store.merged
    attacks = [
        "/static/../pyproject.toml",
        "/static/..%2f..%2f..%2fpyproject.toml",
        "/static/%2e%2e/%2e%2e/cli.py",
        "/static/index.html/../../../../secret.txt",
        "/static/api.py",
        "/../../secret.txt",
        "//etc/passwd",
        "/api/snapshots/..%2f..%2f..%2fsecret.txt",
        "/api/snapshots/../../secret.txt",
        "/api/snapshots/%2e%2e",
        "/api/snapshots/%2Fetc%2Fpasswd",
        f"/api/snapshots/{blob}",
        f"/api/snapshots/{sid}/layers/..%2f..%2f..%2fsecret.txt",
        f"/api/snapshots/{sid}/layers/../../../secret.txt",
        f"/api/snapshots/{sid}/layers/notalayer",
        f"/api/snapshots/{sid}/layers/%2Fetc%2Fpasswd",
        f"/api/diff/{sid}/..%2f..%2fsecret.txt",
        f"/api/diff/{sid}/{blob}",
        "/api/diff/HEAD/main",
        "/api/graph?branch=../../../secret.txt",
        "/api/graph?branch=%2Fetc%2Fpasswd",
        "/api/graph?limit=-1",
        "/api/graph?limit=100000",
        "/api/graph?cursor=abc",
        "/api/graph?cursor=99999999999999999999999",
        f"/api/snapshots/{sid}/layers/world?offset=-5",
    ]
    for path in attacks:
        status, body = request(server, path)
        assert status in (400, 404), (path, status)
        text = body.decode()
        assert "TOPSECRET" not in text and "root:" not in text and "[project]" not in text, path
        assert json.loads(text)["error"], path
    # the same ids, valid, are answered
    assert get_json(server, f"/api/snapshots/{sid[:10]}")["id"] == sid


def test_an_unexpected_error_is_a_500_and_the_server_keeps_serving(
    server: UIServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentsnap_core.ui import api

    def broken(repo: Repo) -> Any:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(api, "refs", broken)
    status, body = request(server, "/api/refs")
    assert status == 500 and b"secret detail" not in body and json.loads(body)["error"].startswith("internal error")
    monkeypatch.undo()
    assert request(server, "/api/refs")[0] == 200


def test_the_server_is_read_only(server: UIServer, store: UIStore) -> None:
    before = store.repo.refs.list_refs()
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/api/refs", f"/api/snapshots/{store.merged}", "/"):
            assert request(server, path, method=method)[0] == 405
    assert store.repo.refs.list_refs() == before


# ---------------------------------------------------------------------------------------------- the data
def test_graph_has_forks_merges_tags_agents_sizes(server: UIServer, store: UIStore) -> None:
    page = get_json(server, "/api/graph")
    nodes = {n["id"]: n for n in page["nodes"]}
    assert set(nodes) == {store.base, store.attempt_1, store.attempt_2, store.main_side, store.merged}
    assert page["next"] is None
    merged = nodes[store.merged]
    assert merged["parents"] == [store.main_side, store.attempt_1]
    assert {(r["kind"], r["name"]) for r in merged["refs"]} == {("branch", "main"), ("tag", "chosen")}
    assert {(r["kind"], r["name"]) for r in nodes[store.base]["refs"]} == {("tag", "v0")}
    children_of_base = [n for n in nodes.values() if store.base in n["parents"]]
    assert len(children_of_base) == 3  # the fork point: two attempts and main
    assert nodes[store.attempt_2]["agent"] == "writer-b" and nodes[store.attempt_2]["thread"] == "t-2"
    assert nodes[store.attempt_2]["size"] == {"files": 3, "bytes": nodes[store.attempt_2]["size"]["bytes"], "messages": 3}
    assert nodes[store.attempt_2]["message"] == "draft B"
    # the undo snapshots restore takes are there on request
    with_undo = get_json(server, "/api/graph?undo=1")["nodes"]
    assert len(with_undo) > len(nodes) and all(n["id"] in {x["id"] for x in with_undo} for n in nodes.values())


def test_graph_filters_by_branch_agent_and_thread(server: UIServer, store: UIStore) -> None:
    def ids(q: str) -> set[str]:
        return {n["id"] for n in get_json(server, "/api/graph?" + q)["nodes"]}

    assert ids("branch=attempt-2") == {store.attempt_2, store.base}
    assert ids("branch=main") == {store.merged, store.main_side, store.attempt_1, store.base}
    assert ids("agent=writer-a") == {store.attempt_1}
    assert ids("thread=t-2") == {store.attempt_2}
    assert ids("thread=t-1&agent=reviewer") == {store.main_side}
    assert ids("branch=attempt-1&agent=writer-b") == set()
    assert request(server, "/api/graph?branch=no-such-branch")[0] == 404


def test_snapshot_layers(server: UIServer, store: UIStore) -> None:
    d = get_json(server, f"/api/snapshots/{store.attempt_2}")
    assert d["layers"] == ["effects", "state", "trace", "world"] and d["meta"] == {"thread_id": "t-2"}
    state = get_json(server, f"/api/snapshots/{store.attempt_2}/layers/state")
    assert state["value"] == {"step": 2, "goal": "haiku", "draft": "B", "mood": "dark"}
    trace = get_json(server, f"/api/snapshots/{store.attempt_2}/layers/trace")
    assert [m["content"] for m in trace["items"]][-1] == "Draft B: only one finds sea." and trace["total"] == 3
    first = get_json(server, f"/api/snapshots/{store.attempt_2}/layers/world?limit=2")
    rest = get_json(server, f"/api/snapshots/{store.attempt_2}/layers/world?offset={first['next']}&limit=2")
    assert first["total"] == 3 and rest["next"] is None
    assert [f["path"] for f in first["items"] + rest["items"]] == ["extra.md", "notes.txt", "poem.txt"]
    fx = get_json(server, f"/api/snapshots/{store.attempt_2}/layers/effects")
    assert [(r["tool"], r["status"]) for r in fx["items"]] == [("send_email", "deferred")]
    env = get_json(server, f"/api/snapshots/{store.attempt_2}/layers/env")
    assert isinstance(env["value"], dict)


def test_diff_per_layer(server: UIServer, store: UIStore) -> None:
    d = get_json(server, f"/api/diff/{store.attempt_2}/{store.merged}")
    world = d["layers"]["world"]
    assert world["modified"] == ["notes.txt", "poem.txt"] and world["deleted"] == ["extra.md"]
    assert "-only one finds sea\n" in world["patches"]["poem.txt"] and "+both reach the same sea\n" in world["patches"]["poem.txt"]
    trace = d["layers"]["trace"]
    assert trace["common"] == 2 and [m["content"] for m in trace["only_a"]] == ["Draft B: only one finds sea."]
    assert "Draft A: both reach the same sea." in [m["content"] for m in trace["only_b"]]
    state = {r["key"]: r for r in d["layers"]["state"]["rows"]}
    assert state["draft"] == {"key": "draft", "op": "changed", "a": "B", "b": "A"}
    assert state["mood"]["op"] == "removed" and state["reviewed"]["op"] == "added"
    effects = {r["tool"] + ":" + r["key"].split("/")[0]: r for r in d["layers"]["effects"]["items"]}
    assert effects["send_email:attempt-2@1"]["a"] == "deferred"
    (team,) = [r for r in d["layers"]["effects"]["items"] if r["key"].startswith("main")]
    assert team["a"] is None and team["b"] == "done"  # sent on main after attempt-2 was taken


def test_graph_pages_read_only_their_own_snapshots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page costs about `limit` manifest reads, however large the store; the pages add up to the index."""
    repo = Repo.init(tmp_path / "big")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for i in range(150):
        repo.snapshot(f"step {i}", agent=f"agent-{i % 3}", capture_world=False, trace=[], layers={"state": {"i": i}})
    srv = make_server(repo, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    reads = {"n": 0}
    real_get = repo.objects.get

    def counting_get(oid: str) -> Any:
        reads["n"] += 1
        return real_get(oid)

    monkeypatch.setattr(repo.objects, "get", counting_get)
    try:
        seen: list[str] = []
        cursor: int | None = 0
        while cursor is not None:
            reads["n"] = 0
            page = get_json(srv, f"/api/graph?limit=20&cursor={cursor}")
            assert len(page["nodes"]) <= 20 and reads["n"] <= 21
            seen += [n["id"] for n in page["nodes"]]
            cursor = page["next"]
        assert seen == [r.id for r in repo.refs.list_snapshots()]
        reads["n"] = 0
        page = get_json(srv, "/api/graph?limit=10&agent=agent-1")
        assert [n["agent"] for n in page["nodes"]] == ["agent-1"] * 10
        assert reads["n"] <= 11  # rows of other agents are skipped from the index, unread
    finally:
        srv.shutdown()
        srv.server_close()
        repo.close()


# ---------------------------------------------------------------------------------------------- the command
def test_cli_serves_on_loopback_with_a_token_until_interrupted(store: UIStore) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsnap_core", "ui", "--no-open", "--port", "0"],
        cwd=store.repo.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(r"agentsnap ui: http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+)\n", line)
        assert m, line
        port, token = int(m[1]), m[2]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", f"/api/refs?token={token}")
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["branches"]["main"] == store.merged
        conn.request("GET", "/api/refs")
        resp = conn.getresponse()
        assert resp.status == 403
        resp.read()
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_cli_port_in_use_is_one_line_error(store: UIStore) -> None:
    busy = make_server(store.repo, port=free_port())
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "agentsnap_core", "ui", "--no-open", "--port", str(busy.port)],
            cwd=store.repo.root, capture_output=True, text=True, timeout=60,
        )
    finally:
        busy.server_close()
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"agentsnap: error: port {busy.port} on 127.0.0.1 is in use; pick another with --port, or 0 for any"


def test_cli_opens_the_printed_url_in_a_browser(store: UIStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --no-open the browser gets exactly the URL printed (token included); Ctrl-C stops cleanly."""
    import webbrowser

    from agentsnap_core.cli import main
    from agentsnap_core.ui.server import UIServer as Server
    from click.testing import CliRunner

    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)

    def interrupted(self: Server, poll_interval: float = 0.5) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Server, "serve_forever", interrupted)
    result = CliRunner().invoke(main, ["-C", str(store.repo.root), "ui"])
    assert result.exit_code == 0, result.output
    printed = result.output.splitlines()[0].removeprefix("agentsnap ui: ")
    assert opened == [printed] and "?token=" in printed


def test_large_diffs_are_cut_to_a_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentsnap_core.ui import api

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    root = tmp_path / "w"
    repo = Repo.init(root)
    try:
        for i in range(5):
            (root / f"f{i}.txt").write_text("old\n")
        a = repo.snapshot("before", trace=[{"role": "user", "content": "x" * 10_000}])
        for i in range(5):
            (root / f"f{i}.txt").write_text("new\n")
        b = repo.snapshot("after", trace=[{"role": "user", "content": "y"}] * 300)
        monkeypatch.setattr(api, "MAX_PATCHES", 2)
        d = api.diff(repo, a.id, b.id)
    finally:
        repo.close()
    world = d["layers"]["world"]
    assert world["modified"] == [f"f{i}.txt" for i in range(5)]
    assert sorted(world["patches"]) == ["f0.txt", "f1.txt"] and world["truncated"] is True
    trace = d["layers"]["trace"]
    assert trace["common"] == 0 and trace["only_a"][0]["content"].endswith("…(+6000 chars)")
    assert len(trace["only_b"]) == api.MAX_ITEMS + 1 and trace["only_b"][-1] == "…100 more items"
