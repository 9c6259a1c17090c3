"""ToolTasks-v0: bring your own tool tasks, rows in ToolHop's shape read from any JSONL or JSON file."""
