"""PFSaver's async methods never run store work on the event loop (issue 22, item 5).

The workload of the issue: ``ainvoke`` on many concurrent threads of a real StateGraph. Every store
call PFSaver makes for an async method must run in a worker thread (``asyncio.to_thread``), so the loop
keeps serving other tasks; the stall figure itself is measured in benchmarks/langgraph_bench.py.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from agentsnap_langgraph import PFSaver
from langchain_core.messages import HumanMessage
from test_issue22_api import cfg, chat


class Recording(PFSaver):
    """PFSaver noting which threads its sync store methods ran on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.threads: dict[str, set[int]] = {}
        super().__init__(*args, **kwargs)

    def _note(self, name: str) -> None:
        self.threads.setdefault(name, set()).add(threading.get_ident())

    def put(self, *a: Any, **k: Any) -> Any:
        self._note("put")
        return super().put(*a, **k)

    def put_writes(self, *a: Any, **k: Any) -> Any:
        self._note("put_writes")
        return super().put_writes(*a, **k)

    def get_tuple(self, *a: Any, **k: Any) -> Any:
        self._note("get_tuple")
        return super().get_tuple(*a, **k)

    def flush(self) -> None:
        self._note("flush")
        super().flush()

    def _tuple(self, *a: Any, **k: Any) -> Any:
        self._note("read")
        return super()._tuple(*a, **k)


async def _workload(saver: Recording, threads: int = 6, turns: int = 3) -> int:
    graph = chat(saver)
    loop_thread = threading.get_ident()
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def one(t: int) -> None:
        for i in range(turns):
            await graph.ainvoke({"messages": [HumanMessage(content=f"m{i}", id=f"h{t}-{i}")]}, cfg(f"t{t}"))

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(one(t) for t in range(threads)))
    history = [s async for s in graph.aget_state_history(cfg("t0"))]
    assert len(history) == 3 * turns
    await saver.aprune(["t1"], strategy="keep_latest")
    await saver.adelete_thread("t2")
    await saver.acopy_thread("t3", "t3-copy")
    stop.set()
    await tick
    assert ticks > 0
    return loop_thread


async def test_async_methods_run_off_the_event_loop(store: Path) -> None:
    async with Recording(store) as saver:
        loop_thread = await _workload(saver)
    for name in ("put", "put_writes", "get_tuple", "read"):
        assert saver.threads.get(name), f"{name} never ran"
        assert loop_thread not in saver.threads[name], f"{name} ran on the event loop"
    assert loop_thread not in saver.threads.get("flush", set()), "flush ran on the event loop"


async def test_async_durable_mode_runs_off_the_event_loop(store: Path) -> None:
    """flush_interval=0 fsyncs inside every put: that must not happen on the loop either."""
    async with Recording(store, flush_interval=0) as saver:
        loop_thread = await _workload(saver, threads=4, turns=2)
    assert saver.threads["flush"] and loop_thread not in saver.threads["flush"]
    assert loop_thread not in saver.threads["put"]


#: what PFSaver may run on the event loop itself: the async wrappers that hand work to its thread, and
#: ``get_next_version`` (a counter and a random number, no I/O; LangGraph calls it synchronously)
ON_LOOP_ALLOWED = {"_run", "aget_tuple", "alist", "aput", "aput_writes", "adelete_thread", "adelete_for_runs",
                   "acopy_thread", "aprune", "aget_delta_channel_history", "asetup", "__aenter__", "__aexit__",
                   "get_next_version"}


@pytest.mark.parametrize("kind", ["embedded", "postgres"])
async def test_no_store_code_runs_on_the_event_loop(store: Path, kind: str, request: pytest.FixtureRequest) -> None:
    """Every agentsnap function the loop thread executes during the workload, an early-ended ``alist``
    (its cursor's cleanup) and the async verbs is one of the thin async wrappers, on the embedded store and
    on a PostgreSQL store (a real local server): a profile hook on the loop thread sees every Python call,
    so this holds whatever the machine's speed."""
    import secrets
    import sys

    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        saver = PFSaver.from_url(f"{server.url}?schema=lg_{secrets.token_hex(6)}", path=store)
    else:
        saver = PFSaver(store)

    ran: set[tuple[str, str]] = set()

    def hook(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and "agentsnap" in frame.f_code.co_filename:
            ran.add((Path(frame.f_code.co_filename).name, frame.f_code.co_name))

    async with saver:
        graph = chat(saver)
        sys.setprofile(hook)
        try:
            await asyncio.gather(*(graph.ainvoke({"messages": [HumanMessage(content="m", id=f"h{t}")]}, cfg(f"t{t}"))
                                   for t in range(4)))
            await graph.ainvoke({"messages": [HumanMessage(content="again", id="h0b")]}, cfg("t0"))
            assert [s async for s in graph.aget_state_history(cfg("t0"))]
            await graph.aupdate_state(cfg("t0"), {"messages": [HumanMessage(content="edit", id="h0c")]})
            assert (await graph.aget_state(cfg("t0"))).values["messages"][-1].content == "edit"
            async for _item in saver.alist(cfg("t0")):
                break  # the generator is closed half-way: its cleanup must not run here either
            await saver.aprune(["t1"], strategy="keep_latest")
            await saver.adelete_thread("t2")
            await saver.acopy_thread("t3", "t3-copy")
            await saver.adelete_for_runs(["no-such-run"])
        finally:
            sys.setprofile(None)
    on_loop = {name for _file, name in ran} - ON_LOOP_ALLOWED
    assert not on_loop, f"store code ran on the event loop: {sorted(f for f in ran if f[1] in on_loop)}"
