"""KV cache benchmark, side by side in one run (transformers DynamicCache, CPU).

For each prompt length, on one Llama-shaped model built from a config (random weights, no download):
  memcpy           - clone every K/V tensor of the cache in memory (torch.clone): the memory-speed floor
  write+fsync      - the peer of a snapshot: the same bytes written sequentially to one file on the same
                     filesystem (the repository's), one fsync
  read+copy        - the peer of a restore: that file read back and copied into fresh cache tensors
  snapshot         - repo.capture(session) into an empty store (the previous run's store deleted first, untimed, as
                     the plain write truncates its previous file): pages grouped into raw segments, BLAKE3, fsync
  snapshot +16 tok - the same session after 16 decoded tokens (full pages reused, only the tail written)
  restore          - repo.restore_into(fresh session): segments read straight into a new cache, verified there
  restore + 1 tok  - restore, then the first decoded token            } the peer is re-prefilling the
  re-prefill + 1   - one forward over the whole prompt, then 1 token  } prompt in a fresh session
Times are medians of --repeat runs (after one warm-up run of each). The issue's targets, printed as ``speed``
(peer time / agentsnap time, higher is better): snapshot >= 0.5x write+fsync, restore >= 0.5x read+copy, and
restore+1 < re-prefill+1 (``first-token`` below 1.0). With CUDA present the device->host copy of the same bytes
into pinned memory is printed too (the GPU peer).

    python benchmarks/kv_bench.py [--lengths 512,2048,4096] [--repeat 3] [--layers 8] [--hidden 512]

    python benchmarks/kv_bench.py --device cuda --lengths 1024,4096,16384   (model and cache on the GPU)

Needs: agentsnap, agentsnap-transformers, transformers, torch (e.g. the venv of `nox -s transformers`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def build_model(layers: int, hidden: int, *, head_dim: int = 64, kv_heads: int | None = None, dtype: str = "float32",
                device: str = "cpu") -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    heads = hidden // head_dim
    config = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads or heads, head_dim=head_dim,
                         max_position_embeddings=32768)
    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):  # weights made where they run (a large model is not built on the CPU first)
            return LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)


def median_time(fn: Callable[[], Any], repeat: int, setup: Callable[[], Any] | None = None) -> float:
    times = []
    for _ in range(repeat):
        arg = setup() if setup else None
        t = time.perf_counter()
        fn() if arg is None else fn(arg)  # type: ignore[call-arg]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="512,2048,4096")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--device", default="cpu", help="where the model and its cache live (cpu, cuda)")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--kv-heads", type=int, default=None, help="key/value heads (grouped-query attention)")
    parser.add_argument("--dtype", default="float32", help="model and cache dtype (float32, bfloat16, float16)")
    args = parser.parse_args()

    import torch
    from agentsnap_core import Repo
    from agentsnap_transformers import KVSession

    model = build_model(args.layers, args.hidden, head_dim=args.head_dim, kv_heads=args.kv_heads, dtype=args.dtype,
                        device=args.device)
    gpu = torch.device(args.device).type == "cuda"
    rows = []
    with tempfile.TemporaryDirectory(prefix="kv-bench-") as tmp:
        for n, length in enumerate(int(x) for x in args.lengths.split(",")):
            repo = Repo.init(Path(tmp) / f"repo{n}")
            prompt = torch.randint(0, 1024, (length,), generator=torch.Generator().manual_seed(n)).tolist()
            session = KVSession(model, page_size=64)
            session.prefill(prompt)
            digest = session.fingerprint()["weights"]  # hashed once here; fresh sessions are told it
            nbytes = sum(x.keys.numel() * x.keys.element_size() * 2 for x in session.cache.layers)

            def memcpy(s: KVSession = session) -> None:
                [(x.keys.clone(), x.values.clone()) for x in s.cache.layers]
                if gpu:
                    torch.cuda.synchronize()

            def capture(r: Repo, s: KVSession = session) -> None:
                s.base_record = None  # a first snapshot into an empty store: every page compressed and written
                r.capture(s, "bench")

            counter = iter(range(10**6))
            scratch: list[Repo] = []

            def empty_repo(n: int = n, c: Any = counter, made: list[Repo] = scratch) -> Repo:
                # the previous run's copy is deleted first (untimed), as the plain write truncates its previous
                # file: both then write into recycled page-cache memory (first-touching fresh memory is several
                # times slower on this VM than the write itself, and would be charged to one side only)
                while made:
                    old = made.pop()
                    old.close()
                    shutil.rmtree(old.root)
                made.append(Repo.init(Path(tmp) / f"scratch{n}-{next(c)}"))
                return made[-1]
            plain = Path(tmp) / f"plain{n}.bin"

            cache_tensors = [t for x in session.cache.layers for t in (x.keys, x.values)]
            # on a GPU the peers copy through pinned host buffers allocated once, outside the timing
            pinned = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in cache_tensors] if gpu else None

            def write_fsync(ts: list = cache_tensors, hs: list | None = pinned, path: Path = plain) -> None:
                if hs is not None:  # device -> pinned host, one copy per tensor
                    for h, t in zip(hs, ts, strict=True):
                        h.copy_(t, non_blocking=True)
                    torch.cuda.synchronize()
                with open(path, "wb") as f:
                    for t in hs or ts:
                        f.write(t.contiguous().view(torch.uint8).numpy().data)
                    f.flush()
                    os.fsync(f.fileno())

            def read_copy(ts: list = cache_tensors, hs: list | None = pinned, path: Path = plain) -> None:
                targets = [torch.empty_like(t) for t in ts]
                with open(path, "rb") as f:
                    for t in hs or targets:
                        f.readinto(t.view(torch.uint8).numpy().data)
                if hs is not None:  # pinned host -> device, one copy per tensor
                    for t, h in zip(targets, hs, strict=True):
                        t.copy_(h, non_blocking=True)
                    torch.cuda.synchronize()

            for fn in (memcpy, write_fsync, read_copy):  # warm-up
                fn()
            t_memcpy = median_time(memcpy, args.repeat)
            t_write = median_time(write_fsync, args.repeat)
            t_read = median_time(read_copy, args.repeat)
            t_pinned = None
            if torch.cuda.is_available():
                dev = [t.to("cuda") for t in cache_tensors]
                host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in dev]

                def pinned_copy(d: list = dev, h: list = host) -> None:
                    for a, b in zip(d, h, strict=True):
                        b.copy_(a, non_blocking=True)
                    torch.cuda.synchronize()

                pinned_copy()
                t_pinned = median_time(pinned_copy, args.repeat)
            capture(empty_repo())  # warm-up
            t_snap = median_time(capture, args.repeat, empty_repo)
            snap = repo.capture(session, "base")
            grown = session.fork()
            grown.base_record = session.base_record
            grown.decode(16)
            t_incr = median_time(lambda g=grown, r=repo: r.capture(g, "after 16 tokens"), 1)
            fresh = lambda m=model, w=digest: KVSession(m, page_size=64, weights=w)  # noqa: E731
            t_restore = median_time(lambda s, r=repo, sid=snap.id: r.restore_into(s, sid), args.repeat, fresh)

            def restore_first(s: KVSession, r: Repo = repo, sid: str = snap.id) -> None:
                r.restore_into(s, sid)
                s.decode(1)

            def reprefill_first(s: KVSession, p: list[int] = prompt) -> None:
                s.prefill(p)
                s.decode(1)

            restore_first(fresh())  # warm-up
            reprefill_first(fresh())
            t_rf = median_time(restore_first, args.repeat, fresh)
            t_pf = median_time(reprefill_first, args.repeat, fresh)
            rows.append((length, nbytes, t_memcpy, t_write, t_read, t_snap, t_incr, t_restore, t_rf, t_pf, t_pinned))
            repo.close()

    where = f"{args.device} ({torch.cuda.get_device_name()})" if gpu else "CPU"
    print(f"model: Llama-shaped, {args.layers} layers, hidden {args.hidden}, head dim {args.head_dim}, "
          f"{args.kv_heads or args.hidden // args.head_dim} KV heads, {args.dtype}, {where}; median of {args.repeat}")
    if gpu:
        print("on the GPU the peers include the copies: write+fsync = device->pinned host + write + fsync, "
              "read+copy = read into pinned host + host->device")
    head = (f"{'tokens':>7} {'KV MB':>7} | {'memcpy':>8} {'write+fsync':>11} {'snapshot':>9} {'speed':>6} {'+16 tok':>8} | "
            f"{'read+copy':>9} {'restore':>8} {'speed':>6} | {'restore+1':>9} {'prefill+1':>9} {'first-token':>11}")
    print(head)
    print("-" * len(head))
    for length, nbytes, tm, tw, trd, ts, ti, tr, trf, tpf, _tp in rows:
        mb = nbytes / 1e6
        print(f"{length:>7} {mb:>7.1f} | {tm * 1e3:>6.1f}ms {tw * 1e3:>9.1f}ms {ts * 1e3:>7.1f}ms {tw / ts:>5.2f}x "
              f"{ti * 1e3:>6.1f}ms | {trd * 1e3:>7.1f}ms {tr * 1e3:>6.1f}ms {trd / tr:>5.2f}x | "
              f"{trf * 1e3:>7.1f}ms {tpf * 1e3:>7.1f}ms {trf / tpf:>10.2f}x")
    print("targets: snapshot speed >= 0.5x write+fsync; restore speed >= 0.5x read+copy; first-token < 1.0x re-prefill")
    for length, nbytes, _tm, tw, trd, ts, _ti, tr, trf, tpf, tp in rows:
        met = [f"snapshot {'met' if tw / ts >= 0.5 else 'NOT met'}", f"restore {'met' if trd / tr >= 0.5 else 'NOT met'}",
               f"first token {'met' if trf < tpf else 'NOT met'}"]
        gpu = f"; pinned D2H {nbytes / tp / 1e6:.0f} MB/s" if tp else ""
        print(f"  {length} tokens: snapshot {nbytes / ts / 1e6:.0f} MB/s (plain write {nbytes / tw / 1e6:.0f}), restore "
              f"{nbytes / tr / 1e6:.0f} MB/s (plain read+copy {nbytes / trd / 1e6:.0f}){gpu}; {', '.join(met)}")

if __name__ == "__main__":
    main()
