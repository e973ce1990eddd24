"""Used by `nox -s dist`: every installed adapter wheel is found through the `agentsnap` entry points.

    python tests/check_entry_points.py langgraph crewai ...   (adapter folder names)
"""

from __future__ import annotations

import importlib.metadata
import sys


def main(expected_folders: list[str]) -> int:
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group="agentsnap")}
    dists = {d.metadata["Name"].lower() for d in importlib.metadata.distributions()}
    problems = []
    for folder in expected_folders:
        dist = "agentsnap-" + folder.replace("_", "-")
        if dist not in dists:
            problems.append(f"{dist}: wheel not installed")
            continue
        mine = [ep for ep in eps.values() if ep.dist and ep.dist.metadata["Name"].lower() == dist]
        if not mine:
            problems.append(f"{dist}: declares no 'agentsnap' entry point")
        for ep in mine:
            try:
                ep.load()
            except Exception as exc:  # report every broken plugin, not only the first
                problems.append(f"{dist}: entry point {ep.name} fails to load: {exc}")
    from agentsnap_core.plugins import list_plugins

    loaded = {p["name"] for p in list_plugins()}
    print("loaded plugins:", ", ".join(sorted(loaded)))
    for p in problems:
        print("problem:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
