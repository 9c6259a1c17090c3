"""The KGETool agent (FamilyTool, Section 5): the two-turn agent, its path-generation prompt and the reading
of its replies."""
