"""FamilyTool: its rows and family KGs as typed tasks, KGETool's path extraction over a live KG, and the
relation retrievers extraction can use."""
