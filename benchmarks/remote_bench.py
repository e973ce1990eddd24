"""Remote stores: push/clone throughput of a 100 MB snapshot to a local S3 server, snapshot latency
on the combined PostgreSQL+S3 store vs the embedded store.

Runnable standalone (starts its own PostgreSQL 15 and SeaweedFS ``weed mini`` on loopback ports):

    python benchmarks/remote_bench.py [--mb 100] [--snapshots 40] [--jobs 8]

Peers measured in the same run: a plain boto3 upload/download of the same bytes (``upload_file`` /
``download_file``, multipart, 8 threads) for throughput; the embedded directory store for latency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agentsnap_core import Repo
from agentsnap_core.operations.remote import clone, push
from agentsnap_core.testing.servers import PostgresServer, SeaweedServer

BUCKET = "bench"


def _tree(root: Path, mb: int) -> int:
    """``mb`` MB of incompressible data in 4 files plus some small text files; returns bytes written."""
    root.mkdir(parents=True)
    total = 0
    per = mb * 1024 * 1024 // 4
    for i in range(4):
        (root / f"blob{i}.bin").write_bytes(os.urandom(per))
        total += per
    for i in range(50):
        (root / "src" / f"m{i}.py").parent.mkdir(exist_ok=True)
        (root / "src" / f"m{i}.py").write_text(f"x = {i}\n" * 100)
    return total


def _timed(fn, *args, **kw):  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--snapshots", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="agentsnap-bench-"))
    pg, s3 = PostgresServer(), SeaweedServer()
    try:
        pg.start()
        s3.start()
        client = s3.client()
        client.create_bucket(Bucket=BUCKET)
        s3_url = f"s3://{BUCKET}/repo?endpoint={s3.endpoint}&key=agentsnap&secret=agentsnap"
        size = _tree(base / "work", args.mb)
        repo = Repo.init(base / "work")
        t_snap, _ = _timed(repo.snapshot, "100 MB")
        rows: list[tuple[str, float, float, str]] = []

        # ---- throughput: agentsnap push/clone vs plain boto3 upload/download of the same bytes
        t_push, res = _timed(push, repo, s3_url, jobs=args.jobs)
        t_noop, res0 = _timed(push, repo, s3_url, jobs=args.jobs)
        from boto3.s3.transfer import TransferConfig

        cfg = TransferConfig(max_concurrency=8)
        t_up = 0.0
        for f in sorted((base / "work").glob("blob*.bin")):
            dt, _ = _timed(client.upload_file, str(f), BUCKET, f"raw/{f.name}", Config=cfg)
            t_up += dt
        t_clone, (copy, cres) = _timed(clone, s3_url, base / "copy", jobs=args.jobs)
        copy.close()
        t_down = 0.0
        (base / "raw").mkdir()
        for f in sorted((base / "work").glob("blob*.bin")):
            dt, _ = _timed(client.download_file, BUCKET, f"raw/{f.name}", str(base / "raw" / f.name), Config=cfg)
            t_down += dt
        mb = size / 1e6
        rows.append(("push 100 MB snapshot to S3", mb / t_push, mb / t_up, "MB/s"))
        rows.append(("clone it back from S3 (+ checkout)", mb / t_clone, mb / t_down, "MB/s"))
        print(f"objects pushed: {res.objects} ({res.bytes / 1e6:.1f} MB stored); no-op push: {res0.objects} objects "
              f"in {t_noop:.2f} s; local snapshot of the tree: {t_snap:.2f} s")  # fmt: skip

        # ---- latency: small snapshots, combined store vs embedded
        combined = f"{pg.url}?schema=bench&objects=s3://{BUCKET}/combined?endpoint={s3.endpoint}&key=agentsnap&secret=agentsnap"
        lat: dict[str, list[float]] = {}
        for name, kw in (("embedded", {}), ("combined", {"store_url": combined})):
            root = base / f"lat-{name}"
            (root / "src").mkdir(parents=True)
            for i in range(20):
                (root / "src" / f"f{i}.txt").write_text(f"line {i}\n" * 20)
            r = Repo.init(root, **kw)
            r.snapshot("warm-up")
            times = []
            for i in range(args.snapshots):
                (root / "src" / "f0.txt").write_text(f"edit {i}\n")
                dt, _ = _timed(r.snapshot, f"s{i}", layers={"state": {"step": i, "memo": "x" * 500}})
                times.append(dt * 1000)
            r.close()
            lat[name] = times
        for stat in ("median", "p95"):
            def pick(v: list[float], stat: str = stat) -> float:
                return statistics.median(v) if stat == "median" else sorted(v)[int(len(v) * 0.95) - 1]

            rows.append((f"small snapshot latency, {stat}", pick(lat["combined"]), pick(lat["embedded"]), "ms"))

        print()
        print(f"{'measure':44} {'agentsnap':>12} {'peer':>12} {'ratio':>8}   peer")
        peers = ["boto3 upload_file", "boto3 download_file", "embedded store", "embedded store"]
        for (label, ours, peer, unit), who in zip(rows, peers, strict=True):
            print(f"{label:44} {ours:9.1f} {unit:>2} {peer:9.1f} {unit:>2} {ours / peer:8.2f}   {who}")
        print("\nratio: agentsnap / peer (throughput: higher is better; latency: lower is better)")
    finally:
        s3.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
