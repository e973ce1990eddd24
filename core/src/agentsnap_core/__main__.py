from agentsnap_core.cli import run

run()
