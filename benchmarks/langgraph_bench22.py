"""Issue 22's storage and speed figures for ``langgraph_bench.py --issue22`` (see its docstring)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

from agentsnap_langgraph import PFSaver
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

#: the large, mostly static channel (a tool catalogue / retrieved documents): ~200 KB, changed every 50 steps
STATIC = "catalogue entry: " + "lorem ipsum dolor sit amet " * 7000


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    context: str


def graph(checkpointer: Any) -> Any:
    def reply(state: State) -> dict[str, Any]:
        n = len(state["messages"])
        out: dict[str, Any] = {"messages": [AIMessage(content=f"reply {n}: " + "words " * 40, id=f"a{n}")]}
        if n % 100 == 1:
            out["context"] = STATIC + str(n)
        return out

    b = StateGraph(State)
    b.add_node("reply", reply)
    b.add_edge(START, "reply")
    return b.compile(checkpointer=checkpointer)


def disk(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


async def steps(g: Any, thread: str, n: int, lat: list[float] | None = None) -> None:
    for i in range(n):
        t0 = time.perf_counter()
        await g.ainvoke({"messages": [HumanMessage(content=f"q{i}", id=f"{thread}-h{i}")]}, {"configurable": {"thread_id": thread}})
        if lat is not None:
            lat.append(time.perf_counter() - t0)


async def workload(saver: Any, args: argparse.Namespace, lat: list[float]) -> None:
    g = graph(saver)
    await steps(g, "long", args.long, lat)
    for t in range(args.threads):
        await steps(g, f"t{t}", args.steps)


async def stall(saver: Any, threads: int, turns: int) -> float:
    """Longest gap a 1 ms ticker saw while ``threads`` threads ran ``turns`` ainvoke each, concurrently."""
    g = graph(saver)
    worst, done = 0.0, False

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst = max(worst, now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(steps(g, f"s{t}", turns) for t in range(threads)))
    done = True
    await tick
    return worst


def reads(saver: Any, thread: str) -> tuple[float, float]:
    g = graph(saver)
    cfg = {"configurable": {"thread_id": thread}}
    t0 = time.perf_counter()
    for _ in range(20):
        g.get_state(cfg)
    t1 = time.perf_counter()
    n = sum(1 for _ in g.get_state_history(cfg))
    assert n > 0
    return (t1 - t0) / 20, time.perf_counter() - t1


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def issue22(args: argparse.Namespace) -> None:
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench22-") as d:
        root = Path(d)
        for name, interval in (("PFSaver", 0.2), ("PFSaver durable", 0.0)):
            lat: list[float] = []
            where = root / name.replace(" ", "-")
            with PFSaver(where, flush_interval=interval) as saver:
                asyncio.run(workload(saver, args, lat))
                get, hist = reads(saver, "long")
            size, files = disk(where / ".agentsnap")
            with PFSaver(root / f"stall-{interval}", flush_interval=interval) as saver:
                worst = asyncio.run(stall(saver, args.threads, args.steps))
            rows[name] = {"bytes": size, "files": files, "p50": statistics.median(lat), "p95": pct(lat, 0.95),
                          "get": get, "hist": hist, "stall": worst}
        lat = []
        db = root / "sqlite" / "c.sqlite"
        db.parent.mkdir()

        async def aio() -> float:
            async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
                await workload(saver, args, lat)
            async with AsyncSqliteSaver.from_conn_string(str(root / "stall.sqlite")) as saver:
                return await stall(saver, args.threads, args.steps)

        worst = asyncio.run(aio())
        with SqliteSaver.from_conn_string(str(db)) as saver:
            get, hist = reads(saver, "long")
        size, files = disk(db.parent)
        rows["SqliteSaver"] = {"bytes": size, "files": files, "p50": statistics.median(lat), "p95": pct(lat, 0.95),
                               "get": get, "hist": hist, "stall": worst}
    ref = rows["SqliteSaver"]
    print(f"issue 22 workload: 1 thread x {args.long} steps + {args.threads} threads x {args.steps} steps; "
          f"state = growing messages + a ~{len(STATIC) // 1000} KB mostly-static channel")
    print(f"{'saver':<18}{'bytes':>12}{'x Sqlite':>9}{'files':>8}{'p50 ms':>9}{'x':>6}{'p95 ms':>9}{'x':>6}"
          f"{'get ms':>9}{'x':>6}{'hist ms':>9}{'x':>6}{'stall ms':>10}")
    for name, r in rows.items():
        print(f"{name:<18}{r['bytes']:>12,.0f}{r['bytes'] / ref['bytes']:>9.2f}{r['files']:>8.0f}"
              f"{r['p50'] * 1e3:>9.2f}{r['p50'] / ref['p50']:>6.2f}{r['p95'] * 1e3:>9.2f}{r['p95'] / ref['p95']:>6.2f}"
              f"{r['get'] * 1e3:>9.2f}{r['get'] / ref['get']:>6.2f}{r['hist'] * 1e3:>9.1f}{r['hist'] / ref['hist']:>6.2f}"
              f"{r['stall'] * 1e3:>10.1f}")
    print("targets: bytes <= 0.10x; p50/p95 <= 1.00x (PFSaver durable vs Sqlite at the same durability); "
          "get/hist <= 1.00x; stall <= 50 ms. Latency column 'x' is vs AsyncSqliteSaver.")
