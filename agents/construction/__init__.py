"""Datasets built with a model: query-driven tool construction for ToolHop (its pipeline, stage prompts and
checks) and the model rewording of KG2Tool queries."""
