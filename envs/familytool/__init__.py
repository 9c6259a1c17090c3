"""FamilyTool-v0: its env and the paper's metrics."""
