from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import sglang_cpu  # noqa: E402,F401  (lets sglang.srt.mem_cache import on a CPU-only machine)
