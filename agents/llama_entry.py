"""Entry point of the embedded model server: llama-cpp-python's server plus one bounded chat format.

llama-cpp-python 0.3.36's ``chatml-function-calling`` handler ignores the request's ``max_tokens`` when it
writes a function's arguments (it passes ``max_tokens=None``), so a 135M model can spend minutes filling
its whole context with one argument string. ``chatml-function-calling-bounded`` is the same handler with
every completion it makes held to the request's ``max_tokens``. Run as
``python -m hopgym.agents.llama_entry`` with the arguments of ``python -m llama_cpp.server``.
"""

from __future__ import annotations

from typing import Any

from llama_cpp import llama_chat_format
from llama_cpp.server.__main__ import main

BOUNDED_CHAT_FORMAT = "chatml-function-calling-bounded"


@llama_chat_format.register_chat_completion_handler(BOUNDED_CHAT_FORMAT)
def bounded_chatml_function_calling(llama: Any, max_tokens: int | None = None, **kwargs: Any) -> Any:
    """``chatml-function-calling`` whose inner completions default to the request's ``max_tokens``."""
    if not max_tokens or kwargs.get("stream"):
        return llama_chat_format.chatml_function_calling(llama=llama, max_tokens=max_tokens, **kwargs)
    unbounded = llama.create_completion

    def create_completion(*args: Any, **options: Any) -> Any:
        if options.get("max_tokens") is None:
            options["max_tokens"] = max_tokens
        return unbounded(*args, **options)

    llama.create_completion = create_completion  # the server handles one request at a time
    try:
        return llama_chat_format.chatml_function_calling(llama=llama, max_tokens=max_tokens, **kwargs)
    finally:
        del llama.create_completion


if __name__ == "__main__":
    main()
