"""Checkpoint throughput of one LangGraph workload with PFSaver, InMemorySaver and AsyncSqliteSaver.

Run: ``python benchmarks/langgraph_bench.py [--threads 40] [--steps 12] [--rounds 3] [--postgres]`` in an environment
with agentsnap-langgraph and langgraph-checkpoint-sqlite installed (``nox -s langgraph`` makes one:
``.nox/langgraph-lg-1-2/bin/python benchmarks/langgraph_bench.py``).

The workload: a StateGraph whose two nodes take turns appending a message and bumping counters
until ``steps`` super-steps ran, over ``threads`` threads run one after another with ``ainvoke``
(LangGraph's default durability). Every saver writes to a file-backed store in its own temporary
directory, except InMemorySaver. Each round runs every saver once, in rotating order; the best
round counts. Printed: checkpoints per second and the ratio against AsyncSqliteSaver.

``--issue22`` measures instead the storage and speed targets of issue 22 on a workload whose state holds a
growing message list plus a large mostly-static channel (``--long`` steps on one thread, then ``--threads`` x
``--steps``), and prints each figure with its ratio: bytes and files on disk vs SqliteSaver (and PostgresSaver
with ``--postgres``), per-step ``ainvoke`` latency (median, p95) vs AsyncSqliteSaver for PFSaver's default mode
(durable within ``flush_interval``) and its durable mode (``flush_interval=0``, as SqliteSaver), ``get_state`` /
``get_state_history`` time vs SqliteSaver, and the longest event-loop stall a ticker task saw during concurrent
``ainvoke`` (PFSaver vs AsyncSqliteSaver). With ``--postgres`` it adds LangGraph's PostgresSaver /
AsyncPostgresSaver and PFSaver on a ``postgresql://`` store, on one local server, each in its own schema: their
bytes are the schema's tables with indexes and TOAST (plus PFSaver's local directory), and PFSaver's
PostgreSQL rows are compared with PostgresSaver (bytes, reads) and AsyncPostgresSaver (latency).

``--postgres`` also starts a throwaway PostgreSQL server (agentsnap's test helper: Debian's
postgresql-15, run as user ``postgres``) and adds PFSaver on a ``postgresql://`` store and LangGraph's
AsyncPostgresSaver (langgraph-checkpoint-postgres) on the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

from agentsnap_langgraph import PFSaver
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    count: int
    log: Annotated[list[str], operator.add]


def build(checkpointer: Any, steps: int) -> Any:
    def think(state: State) -> dict[str, Any]:
        n = state.get("count", 0)
        return {"messages": [AIMessage(content=f"thought {n}: " + "lorem ipsum " * 16, id=f"t{n}")], "count": n + 1}

    def act(state: State) -> dict[str, Any]:
        return {"log": [f"acted at {state['count']}"], "count": state["count"] + 1}

    builder = StateGraph(State)
    builder.add_node("think", think)
    builder.add_node("act", act)
    builder.add_edge(START, "think")
    builder.add_edge("think", "act")
    builder.add_conditional_edges("act", lambda s: END if s["count"] >= steps else "think", ["think", END])
    return builder.compile(checkpointer=checkpointer)


async def workload(checkpointer: Any, threads: int, steps: int) -> int:
    graph = build(checkpointer, steps)
    for t in range(threads):
        cfg = {"configurable": {"thread_id": f"bench-{t}"}, "recursion_limit": steps * 4}
        await graph.ainvoke({"messages": [HumanMessage(content="go", id="h")]}, cfg)
    stored = 0
    for t in range(threads):
        async for _ in graph.aget_state_history({"configurable": {"thread_id": f"bench-{t}"}}):
            stored += 1
    return stored


async def run_memory(threads: int, steps: int) -> tuple[float, int]:
    start = time.perf_counter()
    n = await workload(InMemorySaver(), threads, steps)
    return time.perf_counter() - start, n


async def run_sqlite(threads: int, steps: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as d:
        start = time.perf_counter()
        async with AsyncSqliteSaver.from_conn_string(os.path.join(d, "checkpoints.sqlite")) as saver:
            n = await workload(saver, threads, steps)
        return time.perf_counter() - start, n


async def run_pfsaver(threads: int, steps: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-pfsaver-") as d:
        start = time.perf_counter()
        with PFSaver(d) as saver:
            n = await workload(saver, threads, steps)
        elapsed = time.perf_counter() - start  # includes the final flush (objects durable, refs moved)
        return elapsed, n


SAVERS: dict[str, Callable[[int, int], Awaitable[tuple[float, int]]]] = {
    "PFSaver": run_pfsaver,
    "InMemorySaver": run_memory,
    "AsyncSqliteSaver": run_sqlite,
}
POSTGRES_URL = ""


async def run_pfsaver_pg(threads: int, steps: int) -> tuple[float, int]:
    import uuid

    with tempfile.TemporaryDirectory(prefix="bench-pfsaver-pg-") as d:
        start = time.perf_counter()
        with PFSaver.from_url(f"{POSTGRES_URL}?schema=bench_{uuid.uuid4().hex[:10]}", path=d) as saver:
            n = await workload(saver, threads, steps)
        return time.perf_counter() - start, n


async def run_postgres(threads: int, steps: int) -> tuple[float, int]:
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:  # a fresh schema per run
        conn.execute("DROP TABLE IF EXISTS checkpoints, checkpoint_blobs, checkpoint_writes, checkpoint_migrations")
    start = time.perf_counter()
    async with AsyncPostgresSaver.from_conn_string(POSTGRES_URL) as saver:
        await saver.setup()
        n = await workload(saver, threads, steps)
    return time.perf_counter() - start, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=40)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--postgres", action="store_true", help="also PFSaver(postgresql://) and AsyncPostgresSaver")
    ap.add_argument("--issue22", action="store_true", help="storage / latency / loop-stall figures of issue 22")
    ap.add_argument("--long", type=int, default=200, help="--issue22: steps on the one long thread")
    args = ap.parse_args()
    if args.issue22:
        issue22(args)
        return
    server = None
    if args.postgres:
        global POSTGRES_URL
        from agentsnap_core.testing.servers import PostgresServer

        server = PostgresServer().start()
        POSTGRES_URL = server.url
        SAVERS["PFSaver (postgres)"] = run_pfsaver_pg
        SAVERS["AsyncPostgresSaver"] = run_postgres
    try:
        _measure(args)
    finally:
        if server is not None:
            server.stop()


def _measure(args: argparse.Namespace) -> None:
    best: dict[str, tuple[float, int]] = {}
    names = list(SAVERS)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            elapsed, n = asyncio.run(SAVERS[name](args.threads, args.steps))
            if name not in best or elapsed < best[name][0]:
                best[name] = (elapsed, n)
    counts = {n for _, n in best.values()}
    assert len(counts) == 1, f"savers stored different numbers of checkpoints: {best}"
    peer = best["AsyncSqliteSaver"][0]
    print(f"workload: {args.threads} threads x {args.steps} steps = {counts.pop()} checkpoints, best of {args.rounds}")
    print(f"{'saver':<20}{'seconds':>10}{'checkpoints/s':>16}{'vs AsyncSqliteSaver':>22}")
    for name in names:
        elapsed, n = best[name]
        print(f"{name:<20}{elapsed:>10.3f}{n / elapsed:>16.0f}{peer / elapsed:>21.2f}x")
    if "AsyncPostgresSaver" in best:
        ratio = best["AsyncPostgresSaver"][0] / best["PFSaver (postgres)"][0]
        print(f"PFSaver (postgres) vs AsyncPostgresSaver on the same server: {ratio:.2f}x")


# ---------------------------------------------------------------------------------------------- --issue22
#: the large, mostly static channel (a tool catalogue / retrieved documents): ~200 KB, changed every 50 steps
STATIC = "catalogue entry: " + "lorem ipsum dolor sit amet " * 7000


class State22(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    context: str


def graph22(checkpointer: Any) -> Any:
    def reply(state: State22) -> dict[str, Any]:
        n = len(state["messages"])
        out: dict[str, Any] = {"messages": [AIMessage(content=f"reply {n}: " + "words " * 40, id=f"a{n}")]}
        if n % 100 == 1:
            out["context"] = STATIC + str(n)
        return out

    b = StateGraph(State22)
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


async def workload22(saver: Any, args: argparse.Namespace, lat: list[float]) -> None:
    g = graph22(saver)
    await steps(g, "long", args.long, lat)
    for t in range(args.threads):
        await steps(g, f"t{t}", args.steps)


async def stall(saver: Any, threads: int, turns: int) -> float:
    """Longest gap a 1 ms ticker saw while ``threads`` threads ran ``turns`` ainvoke each, concurrently."""
    g = graph22(saver)
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
    g = graph22(saver)
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


def _pfsaver_rows(rows: dict[str, dict[str, Any]], args: argparse.Namespace, root: Path, url: str | None) -> None:
    """PFSaver's default and durable modes on the embedded store (``url`` None) or a PostgreSQL store."""
    import uuid

    where_pg = " (postgres)" if url else ""
    for name, interval in ((f"PFSaver{where_pg}", 0.2), (f"PFSaver{where_pg} durable", 0.0)):
        lat: list[float] = []
        where = root / name.replace(" ", "-").replace("(", "").replace(")", "")
        schema = f"bench_{uuid.uuid4().hex[:10]}"

        def open_saver(path: Path, schema: str = schema, interval: float = interval) -> PFSaver:
            if url:
                return PFSaver.from_url(f"{url}?schema={schema}", path=path, flush_interval=interval)
            return PFSaver(path, flush_interval=interval)

        with open_saver(where) as saver:
            asyncio.run(workload22(saver, args, lat))
            get, hist = reads(saver, "long")
        size, files = disk(where / ".agentsnap")
        if url:
            size += pg_schema_bytes(url, schema)
        with open_saver(root / f"stall-{name.replace(' ', '-')}", f"{schema}_stall") as saver:
            worst = asyncio.run(stall(saver, args.threads, args.steps))
        rows[name] = {"bytes": size, "files": files if not url else float("nan"), "p50": statistics.median(lat),
                      "p95": pct(lat, 0.95), "get": get, "hist": hist, "stall": worst,
                      "ref": "PostgresSaver" if url else "SqliteSaver"}


def pg_schema_bytes(url: str, schema: str) -> int:
    """Bytes of a PostgreSQL schema's tables, their indexes and TOAST (pg_total_relation_size)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def _postgres_row(rows: dict[str, dict[str, Any]], args: argparse.Namespace, url: str) -> None:
    """LangGraph's PostgresSaver (reads) / AsyncPostgresSaver (latency, stall), each in a fresh schema."""
    import uuid

    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    def fresh() -> tuple[str, str]:
        schema = f"lgpg_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return schema, f"{url}?options=-csearch_path%3D{schema}"

    schema, conn_url = fresh()
    stall_schema, stall_url = fresh()
    lat: list[float] = []

    async def aio() -> float:
        async with AsyncPostgresSaver.from_conn_string(conn_url) as saver:
            await saver.setup()
            await workload22(saver, args, lat)
        async with AsyncPostgresSaver.from_conn_string(stall_url) as saver:
            await saver.setup()
            return await stall(saver, args.threads, args.steps)

    worst = asyncio.run(aio())
    with PostgresSaver.from_conn_string(conn_url) as saver:
        get, hist = reads(saver, "long")
    rows["PostgresSaver"] = {"bytes": pg_schema_bytes(url, schema), "files": float("nan"),
                             "p50": statistics.median(lat), "p95": pct(lat, 0.95), "get": get, "hist": hist,
                             "stall": worst, "ref": "PostgresSaver"}


def warm_up(root: Path) -> None:
    """A few steps on each embedded saver first (imports, caches, the serializer's first calls)."""
    small = argparse.Namespace(long=3, threads=1, steps=2)
    with PFSaver(root / "warm", flush_interval=0.2) as saver:
        asyncio.run(workload22(saver, small, []))

    async def aio() -> None:
        async with AsyncSqliteSaver.from_conn_string(str(root / "warm.sqlite")) as saver:
            await workload22(saver, small, [])

    asyncio.run(aio())


def issue22(args: argparse.Namespace) -> None:
    rows: dict[str, dict[str, Any]] = {}
    server = None
    with tempfile.TemporaryDirectory(prefix="bench22-") as d:
        root = Path(d)
        warm_up(root)
        _pfsaver_rows(rows, args, root, None)
        lat: list[float] = []
        db = root / "sqlite" / "c.sqlite"
        db.parent.mkdir()

        async def aio() -> float:
            async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
                await workload22(saver, args, lat)
            async with AsyncSqliteSaver.from_conn_string(str(root / "stall.sqlite")) as saver:
                return await stall(saver, args.threads, args.steps)

        worst = asyncio.run(aio())
        with SqliteSaver.from_conn_string(str(db)) as saver:
            get, hist = reads(saver, "long")
        size, files = disk(db.parent)
        rows["SqliteSaver"] = {"bytes": size, "files": files, "p50": statistics.median(lat), "p95": pct(lat, 0.95),
                               "get": get, "hist": hist, "stall": worst, "ref": "SqliteSaver"}
        if args.postgres:
            from agentsnap_core.testing.servers import PostgresServer

            server = PostgresServer().start()
            try:
                _postgres_row(rows, args, server.url)
                _pfsaver_rows(rows, args, root, server.url)
            finally:
                server.stop()
    print(f"issue 22 workload: 1 thread x {args.long} steps + {args.threads} threads x {args.steps} steps; "
          f"state = growing messages + a ~{len(STATIC) // 1000} KB mostly-static channel")
    print(f"{'saver':<28}{'bytes':>12}{'x ref':>7}{'x Pg':>7}{'files':>7}{'p50 ms':>9}{'x':>6}{'p95 ms':>9}{'x':>6}"
          f"{'get ms':>9}{'x':>6}{'hist ms':>9}{'x':>6}{'stall ms':>10}  ref")
    pg = rows.get("PostgresSaver")
    for name, r in rows.items():
        ref = rows[r["ref"]]
        x_pg = f"{r['bytes'] / pg['bytes']:>7.2f}" if pg else f"{'-':>7}"
        files = "-" if r["files"] != r["files"] else f"{r['files']:.0f}"
        print(f"{name:<28}{r['bytes']:>12,.0f}{r['bytes'] / ref['bytes']:>7.2f}{x_pg}{files:>7}"
              f"{r['p50'] * 1e3:>9.2f}{r['p50'] / ref['p50']:>6.2f}{r['p95'] * 1e3:>9.2f}{r['p95'] / ref['p95']:>6.2f}"
              f"{r['get'] * 1e3:>9.2f}{r['get'] / ref['get']:>6.2f}{r['hist'] * 1e3:>9.1f}{r['hist'] / ref['hist']:>6.2f}"
              f"{r['stall'] * 1e3:>10.1f}  {r['ref']}")
    floor = asyncio.run(stall(InMemorySaver(), args.threads, args.steps))
    print(f"loop stall of InMemorySaver on the same workload (no threads, no I/O: this machine's noise): "
          f"{floor * 1e3:.1f} ms")
    print("targets: bytes <= 0.10x SqliteSaver and PostgresSaver; p50/p95 <= 1.00x at the same durability (PFSaver "
          "durable vs the ref: AsyncSqliteSaver for the embedded store, AsyncPostgresSaver for the PostgreSQL store); "
          "get/hist <= 1.00x; stall <= 50 ms. 'x' columns are vs the row's ref.")


if __name__ == "__main__":
    main()
