"""hopgym's envs as Inspect (UK AISI) tasks:
``inspect eval hopgym/inspect/tasks.py@toolhop --model hopgym/MODEL``.

Needs the ``inspect`` extra. The only place Inspect is imported (agents' layer, above serving/: it adapts
envs to an outside harness). :mod:`~hopgym.inspect.messages` converts messages, tools and actions,
:mod:`~hopgym.inspect.solver` plays each sample as one hopgym episode (every tool call through the env's
``step`` and sandbox), :mod:`~hopgym.inspect.scorer` returns hopgym's score and the papers' columns, and
:mod:`~hopgym.inspect.tasks` holds one ``@task`` per env; :mod:`~hopgym.inspect.provider` is the ``hopgym``
model provider (hopgym's own model client), which :mod:`~hopgym.inspect.registry` registers through the
``inspect_ai`` entry point. docs/training.md "Inspect" shows how to run them.
"""
