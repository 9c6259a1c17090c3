"""hopgym's verifiers v1 taskset and harness: ``eval hopgym-v1 --env.taskset.env FamilyTool-v0 ...``.

verifiers imports a taskset by a top-level module name and takes the Taskset and Harness classes it exports
in ``__all__`` (the harness becomes the taskset's default); the classes are
:mod:`hopgym.serving.verifiers_v1`'s."""

from hopgym.serving.verifiers_v1 import HopgymHarness, HopgymTaskset

__all__ = ["HopgymHarness", "HopgymTaskset"]
