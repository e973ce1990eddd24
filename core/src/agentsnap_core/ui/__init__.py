"""``agentsnap ui``: a local, read-only web view of the snapshot DAG, forks and per-layer diffs (docs/UI.md).

The server is the standard library's; the page is plain HTML/JS/CSS shipped in ``static/``.
``pip install agentsnap-core[ui]`` names the feature; it needs nothing beyond core today.
"""

from __future__ import annotations

from agentsnap_core.ui.server import UIServer, make_server

__all__ = ["UIServer", "make_server"]
