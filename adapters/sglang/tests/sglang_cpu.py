"""Real SGLang cache classes on CPU, plus a tiny random Llama whose KV fills them.

SGLang's engine needs CUDA, but ``sglang.srt.mem_cache`` runs on CPU. One obstacle: importing it imports
``sglang.srt.configs``, which imports two image-preprocessing modules (InternVL, DeepSeek-OCR) that need
``torchvision``, and the only torchvision on PyPI is a CUDA build (its ``_C.so`` links ``libtorch_cuda``).
When torchvision cannot be imported, those two modules - and nothing else - are replaced by placeholders.
Every KV class used here (RadixCache, MHATokenToKVPool, TokenToKVPoolAllocator) is SGLang's own.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import json
import sys
import types
from array import array
from typing import Any

import torch


def _placeholder_module(name: str) -> types.ModuleType:
    class _Meta(type):
        def __getattr__(cls, attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return cls

    class NeedsTorchvision(metaclass=_Meta):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError(f"{name} needs torchvision, which this CPU test environment lacks")

    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return NeedsTorchvision

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def allow_cpu_import() -> None:
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in ("sglang.srt.multimodal.internvl_utils", "sglang.srt.configs.deepseek_ocr"):
            sys.modules.setdefault(name, _placeholder_module(name))


allow_cpu_import()

LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 32
PROMPT = [17, 201, 5, 99, 143, 7, 64, 250, 33, 180, 2, 76, 121, 9, 230, 48, 11, 160, 88, 3, 199, 41, 127, 60, 15]
PAGE_SIZE = 8


@functools.cache
def model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    torch.set_num_threads(1)
    config = LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=KV_HEADS, max_position_embeddings=512, initializer_range=0.5, attn_implementation="eager",
    )
    return LlamaForCausalLM(config).eval()


def pool_and_allocator(page_size: int, size: int) -> tuple[Any, Any]:
    """The KV pool and allocator ``kv_cache_configurator`` builds for an MHA model on one device, shaped for
    :func:`model`: ``MHATokenToKVPool``; ``TokenToKVPoolAllocator`` for page size 1, else ``PagedTokenToKVPoolAllocator``."""
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    pool = MHATokenToKVPool(size=size, page_size=page_size, dtype=torch.float32, head_num=KV_HEADS,
                            head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu", enable_memory_saver=False)
    if page_size == 1:
        allocator = TokenToKVPoolAllocator(size=size, dtype=torch.float32, device="cpu", kvcache=pool, need_sort=False)
    else:
        allocator = PagedTokenToKVPoolAllocator(size=size, page_size=page_size, dtype=torch.float32, device="cpu",
                                                kvcache=pool, need_sort=False)
    return pool, allocator


def make_cache(size: int = 512, page_size: int = 1) -> Any:
    """A fresh SGLangCache: the older RadixCache over an MHATokenToKVPool on CPU, shaped for :func:`model`."""
    from agentsnap_sglang import SGLangCache
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixCache

    _pool, allocator = pool_and_allocator(page_size, size)
    tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator,
                                      page_size=page_size))
    return SGLangCache(tree, model="tiny-llama:from-config", weights="seed-1234", page_size=PAGE_SIZE)


_CONFIG_DIRS: list[Any] = []


@functools.cache
def server_context(page_size: int) -> tuple[Any, Any]:
    """``ServerArgs`` for a CPU run of :func:`model` with ``--page-size page_size``, and the runtime context the
    scheduler process publishes from them (``sglang.srt.runtime_context``): everything else at SGLang's defaults."""
    import tempfile

    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    config_dir = tempfile.TemporaryDirectory(prefix="sglang-tiny-llama-")
    _CONFIG_DIRS.append(config_dir)  # lives as long as the process
    config = model().config
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(config_dir.name)
    args = ServerArgs(model_path=config_dir.name, device="cpu", page_size=page_size, skip_tokenizer_init=True)
    return args, runtime_context.create_context(args, role="scheduler")


def make_scheduler_cache(page_size: int = 1, *, tree_core: str | None = None, size: int = 512) -> Any:
    """A fresh SGLangCache over the tree SGLang's scheduler builds for this model on CPU.

    Pool and allocator from :func:`pool_and_allocator`, ``CacheInitParams`` as ``kv_cache_builder.build_kv_cache``
    fills them for one rank, and the tree from ``registry.create_tree_cache`` - the scheduler's own factory, which picks the default tree class
    (``UnifiedRadixCache`` with the FULL component). ``tree_core`` sets ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND``
    as a server would (unset: SGLang's default, "rust").
    """
    import os

    from agentsnap_sglang import SGLangCache
    from sglang.srt import runtime_context
    from sglang.srt.mem_cache import registry
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    args, context = server_context(page_size)
    _pool, allocator = pool_and_allocator(page_size, size)
    env = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
    saved = os.environ.get(env)
    if tree_core is not None:
        os.environ[env] = tree_core
    try:
        with runtime_context.use_context(context):
            memory = runtime_context.get_memory()
            params = CacheInitParams(
                disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=allocator, page_size=page_size,
                eviction_policy=memory.radix_eviction_policy,
                eviction_policy_config=memory.radix_eviction_policy_config,
                enable_session_radix_cache=memory.enable_session_radix_cache,
            )
            tree = registry.create_tree_cache(registry.TreeCacheBuildContext(
                server_args=args, params=params, is_hybrid_swa=False, is_hybrid_ssm=False,
                enable_hierarchical_cache=False, disable_radix_cache=False, tp_worker=None, model_config=None,
                tp_size=1, tp_rank=0, tp_group=None,
            ))
    finally:
        if saved is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = saved
    return SGLangCache(tree, model="tiny-llama:from-config", weights="seed-1234", page_size=PAGE_SIZE)


@torch.no_grad()
def prefill_into(cache: Any, tokens: list[int], *, extra_key: str | None = None, cache_salt: str | None = None,
                 scale: float = 1.0) -> torch.Tensor:
    """Run the model over ``tokens`` and do what SGLang's scheduler does when a request's prefill is cached:
    write the KV of the page-aligned prefix into its pool slots (``set_kv_buffer``) and insert that prefix into
    the tree (``InsertParams(prev_prefix_len=cached)``). The partial last page is not inserted (the scheduler
    keeps it with the request and frees it when the request ends). ``scale`` multiplies the KV written, to stand
    for another adapter's KV under another ``extra_key``. Returns the last position's logits."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    out = model()(input_ids=torch.tensor([tokens]), use_cache=True)
    page = cache.tree.page_size
    n = len(tokens) // page * page
    namespace = {k: v for k, v in (("extra_key", extra_key), ("cache_salt", cache_salt)) if v is not None}
    have, _node, prefix = cache.match(tokens[:n], **namespace)
    if n > have:
        new = cache.tree.token_to_kv_pool_allocator.alloc(n - have)
        for layer_id, layer in enumerate(out.past_key_values.layers):
            k = layer.keys[0].transpose(0, 1)[have:n] * scale  # [tokens, heads, dim]
            v = layer.values[0].transpose(0, 1)[have:n] * scale
            cache.pool.set_kv_buffer(None, new, k.contiguous(), v.contiguous(), layer_id_override=layer_id)
        key = RadixKey(array("q", tokens[:n]), extra_key, cache_salt=cache_salt)
        cache.tree.insert(InsertParams(key=key, value=torch.cat([prefix, new]).to(torch.int64), prev_prefix_len=have))
    return out.logits[0, -1].clone()


def dynamic_cache_from(cache: Any, tokens: list[int], **namespace: Any) -> tuple[int, Any]:
    """Read the cached prefix of ``tokens`` out of the pool into a transformers DynamicCache."""
    from transformers.cache_utils import DynamicCache

    n, _node, idx = cache.match(tokens, **namespace)
    pool = cache.pool
    data = [(pool.k_buffer[i][idx].transpose(0, 1).unsqueeze(0).clone(),
             pool.v_buffer[i][idx].transpose(0, 1).unsqueeze(0).clone()) for i in range(LAYERS)]
    return n, DynamicCache(ddp_cache_data=data, config=model().config)


@torch.no_grad()
def decode(dyn: Any, first_logits: torch.Tensor, steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy decoding on top of a DynamicCache; returns the tokens and the logits after each step."""
    logits, out_tokens, all_logits = first_logits, [], [first_logits]
    for _ in range(steps):
        nxt = int(torch.argmax(logits))
        res = model()(input_ids=torch.tensor([[nxt]]), past_key_values=dyn, use_cache=True)
        dyn = res.past_key_values
        logits = res.logits[0, -1].clone()
        out_tokens.append(nxt)
        all_logits.append(logits)
    return out_tokens, all_logits


def kv_digest(cache: Any, tokens: list[int], **namespace: Any) -> tuple[int, str]:
    """``(cached length, sha256 of the K and V bytes of every cached token, all layers)`` for ``tokens``."""
    n, _node, idx = cache.match(tokens, **namespace)
    h = hashlib.sha256()
    for i in range(cache.pool.layer_num):
        h.update(cache.pool.k_buffer[i][idx].numpy().tobytes())
        h.update(cache.pool.v_buffer[i][idx].numpy().tobytes())
    return n, h.hexdigest()


def digests(cache: Any) -> dict[str, list]:
    """:func:`kv_digest` of every sequence the tree caches, keyed by the sequence as JSON."""
    return {json.dumps(seq): list(kv_digest(cache, seq)) for seq in cache.sequences()}
