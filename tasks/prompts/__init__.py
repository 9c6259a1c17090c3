"""The tasks' prompts as package data (YAML, loaded and checked by hopgym.prompts)."""
