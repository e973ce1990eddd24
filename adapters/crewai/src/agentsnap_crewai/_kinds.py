"""What the state layer of a CrewAI snapshot says it holds: its ``kind`` (no CrewAI import here: the plugin module
reads these in every process that uses agentsnap)."""

MEMORY_KIND = "crewai.memory"
FLOW_KIND = "crewai.flow"
CREW_KIND = "crewai.crew"
