"""Running AutoGen's coroutines from synchronous code (the agentsnap hooks are synchronous).

AutoGen objects bind asyncio primitives (queues, locks) to the first event loop that uses them,
so every synchronous call goes through ONE long-lived background loop per process. Async code
must not block on it: from inside a running loop, call the ``async`` API instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from agentsnap_core.errors import AgentSnapError

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="agentsnap-autogen-loop", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on the adapter's background loop and return its result.

    Raises:
        AgentSnapError: when called from inside a running event loop (it would deadlock);
            use the ``async`` functions of :mod:`agentsnap_autogen` there.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise AgentSnapError(
            "agentsnap's synchronous API was called inside a running event loop; "
            "use 'await agentsnap_autogen.snapshot(...)' / 'await agentsnap_autogen.restore(...)' instead"
        )
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()
