"""Tool code and documents generated from KG relations and by the construction pipeline (committed)."""
