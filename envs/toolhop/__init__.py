"""ToolHop-v0: its env, the official protocol, scoring, Table 4 metrics, CodeAct actions and prompts."""
