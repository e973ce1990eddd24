"""Small files the store and the working tree's caches keep: written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


def write_replacing(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> None:
    """Put ``data`` at ``path`` through a temp file beside it and a rename: a reader sees the old file or the new one,
    never half of one. When the write fails (a full disk: ENOSPC) the temp file is removed before the error goes on,
    so a command that fails there leaves nothing behind (a read-only command on a full disk, retried, left one empty
    temp file per try). ``mode``: the new file's permission bits."""
    target = Path(path)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
