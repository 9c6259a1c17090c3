"""KGTool-v0: its env and its answer scoring."""
