from agentsnap_core.cli import main

main()
