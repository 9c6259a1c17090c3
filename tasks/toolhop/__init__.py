"""ToolHop: the row loader, its data file on the Hugging Face hub, the official evaluation's prompt
templates, literal gold calls, and the rows that tool construction starts from."""
