_unmarshal = marshal.loads
# ------------------------------------------------------------------------------------------------- policy


class PlainPolicy:
    """Ordinary Python: the OS-level isolation is the boundary."""

    name = None

    def compile(self, source: str, filename: str, mode: str) -> types.CodeType:
        return compile(source, filename, mode)

    def globals(self) -> dict:
        return {"__name__": "__tools__", "__builtins__": builtins}

    @staticmethod
    def load_code(source: dict) -> types.CodeType:
        """Code the host compiled (``{"code": base64 of MAGIC_NUMBER + marshal data}``), what the host sends
        instead of a source's text when this worker's ready message names its bytecode: the host made it
        with ``compile`` from the text (tasks/tool_source.py), never from anything tool code wrote."""
        data = a2b_base64(source["code"])
        if data[: len(MAGIC_NUMBER)] != MAGIC_NUMBER:
            raise ValueError("the code was compiled for another Python version")
        code = _unmarshal(data[len(MAGIC_NUMBER) :])
        if type(code) is not types.CodeType:
            raise TypeError(f"expected code, got {type(code).__name__}")
        return code


def load_policy(name: str | None):
    """The code policy; ``restricted`` loads ``policy.py`` from next to this file."""
    if name is None:
        return PlainPolicy()
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.basename(here) == "__pycache__":  # run from its compiled form (see isolation.worker_program)
        here = os.path.dirname(here)
    path = os.path.join(here, "policy.py")
    spec = importlib.util.spec_from_file_location("hopgym_worker_policy", path)
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_policy(name)


