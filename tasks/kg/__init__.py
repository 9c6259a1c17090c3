"""Knowledge graphs: the in-memory KG, triple files, the FB15k-237 loader and the stdlib copy of the KG store
that generated tools query inside the sandbox."""
