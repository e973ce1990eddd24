"""Run in a NEW process, as SGLang's scheduler process would: load the agentsnap SGLang plugin and apply its hooks
(what ``load_plugins()`` does), build the tree with the scheduler's factory, then either fill it and trigger a save
at an idle point ("save"), or report what the factory's hook restored ("restore"; then again with other weights). Prints one JSON line."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import sglang_cpu


def main() -> None:
    mode = sys.argv[1]
    from agentsnap_sglang import server
    from sglang.srt.plugins.hook_registry import HookRegistry

    server.register()
    HookRegistry.apply_hooks()
    cache = sglang_cpu.make_scheduler_cache(4, tree_core="rust")
    attached = server._state.get("cache")
    out: dict = {"attached": attached is not None and attached.tree is cache.tree}
    if mode == "save":
        for tokens in json.loads(sys.argv[2]):
            sglang_cpu.prefill_into(cache, tokens)
        trigger = Path(server.os.environ[server.ENV_TRIGGER])
        trigger.write_text("warm cache\n")
        # SGLang calls Scheduler.on_idle(self) between batches; the scheduler module does not import in this CPU
        # environment, so the hook is called with a stand-in holding the real tree as ``tree_cache``.
        server.after_on_idle(None, types.SimpleNamespace(tree_cache=cache.tree))
        out["done"] = Path(f"{trigger}.done").read_text().strip()
        out["trigger_left"] = trigger.exists()
    out["sequences"] = cache.sequences()
    out["digests"] = sglang_cpu.digests(cache)
    if mode == "restore":
        # the same snapshot for other weights: refused (logged), this tree starts empty
        server.os.environ[server.ENV_WEIGHTS] = "other-weights"
        cold = sglang_cpu.make_scheduler_cache(4, tree_core="rust")
        out["other_weights"] = {"attached": server._state.get("cache").tree is cold.tree, "sequences": cold.sequences()}
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
