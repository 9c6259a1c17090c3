"""KG2Tool: tools generated from a KG's relations (FamilyTool's and KG2Tool's naming), tasks assembled from
sampled FOL queries, their JSONL task file, the query-rewording prompt and the instruction-data export."""
