"""Task data: the typed task model, dataset loaders, the KG store and task samplers."""
