"""KV cache benchmark, side by side in one run (transformers DynamicCache, CPU).

For each prompt length, on one Llama-shaped model built from a config (random weights, no download):
  memcpy           - the peer: clone every K/V tensor of the cache in memory (torch.clone)
  snapshot         - repo.capture(session) into an empty store: pages streamed in (chunked, zstd, fsync)
  snapshot +16 tok - the same session after 16 decoded tokens (full pages reused, only the tail written)
  restore          - repo.restore_into(fresh session): pages read, verified and copied into a new cache
  restore + 1 tok  - restore, then the first decoded token            } the peer is re-prefilling the
  re-prefill + 1   - one forward over the whole prompt, then 1 token  } prompt in a fresh session
Times are medians of --repeat runs; ratios are agentsnap / peer (lower is better).

    python benchmarks/kv_bench.py [--lengths 512,2048,4096] [--repeat 3] [--layers 8] [--hidden 512]

Needs: agentsnap, agentsnap-transformers, transformers, torch (e.g. the venv of `nox -s transformers`).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def build_model(layers: int, hidden: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    heads = hidden // 64
    config = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=16384)
    return LlamaForCausalLM(config).eval()


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
    args = parser.parse_args()

    import torch
    from agentsnap_core import Repo
    from agentsnap_transformers import KVSession

    model = build_model(args.layers, args.hidden)
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

            def capture(r: Repo, s: KVSession = session) -> None:
                s.base_record = None  # a first snapshot into an empty store: every page compressed and written
                r.capture(s, "bench")

            counter = iter(range(10**6))
            empty_repo = lambda n=n, c=counter: Repo.init(Path(tmp) / f"scratch{n}-{next(c)}")  # noqa: E731
            t_memcpy = median_time(memcpy, args.repeat)
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

            t_rf = median_time(restore_first, args.repeat, fresh)
            t_pf = median_time(reprefill_first, args.repeat, fresh)
            rows.append((length, nbytes, t_memcpy, t_snap, t_incr, t_restore, t_rf, t_pf))
            repo.close()

    print(f"model: Llama-shaped, {args.layers} layers, hidden {args.hidden}, float32, CPU; median of {args.repeat}")
    head = (f"{'tokens':>7} {'KV MB':>7} | {'memcpy':>8} {'snapshot':>9} {'ratio':>6} {'+16 tok':>8} {'restore':>8} "
            f"{'ratio':>6} | {'restore+1':>9} {'prefill+1':>9} {'ratio':>6}")
    print(head)
    print("-" * len(head))
    for length, nbytes, tm, ts, ti, tr, trf, tpf in rows:
        mb = nbytes / 1e6
        print(f"{length:>7} {mb:>7.1f} | {tm * 1e3:>6.1f}ms {ts * 1e3:>7.1f}ms {ts / tm:>6.1f} {ti * 1e3:>6.1f}ms "
              f"{tr * 1e3:>6.1f}ms {tr / tm:>6.1f} | {trf * 1e3:>7.1f}ms {tpf * 1e3:>7.1f}ms {trf / tpf:>6.2f}")
    for length, nbytes, _tm, ts, _ti, tr, _trf, _tpf in rows:
        print(f"  {length} tokens: snapshot {nbytes / ts / 1e6:.0f} MB/s, restore {nbytes / tr / 1e6:.0f} MB/s")


if __name__ == "__main__":
    main()
