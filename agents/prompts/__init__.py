"""The agents' prompts as package data (YAML, loaded and checked by hopgym.prompts)."""
