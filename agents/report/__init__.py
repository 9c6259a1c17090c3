"""Reading finished run folders: the Markdown report with its plots, FamilyTool's paper tables and the local
run viewer (its page in viewer_static/)."""
