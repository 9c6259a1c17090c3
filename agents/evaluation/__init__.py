"""Evaluation runs: the runner behind hopgym eval (local or on Ray), the run folder's records and provenance,
the summary and its statistics, rescoring, ablation arms and experiment tracking."""
