"""Training on hopgym's envs: TRL's ``GRPOTrainer`` driving episodes whose calls run in the env's sandbox.

The layer sits above ``agents`` (it loads the embedded model that ``agents.model`` finds) and below the CLI.
Its pieces: the dataset of an env's tasks (:mod:`hopgym.train.dataset`), the rollout function in which
hopgym runs each completion's turns through ``env.step`` (:mod:`hopgym.train.rollout`), TRL's
``environment_factory`` classes generated per tool set (:mod:`hopgym.train.environments`), the rewards read
from the env's ``info`` (:mod:`hopgym.train.rewards`), the model loader (:mod:`hopgym.train.model`), the
per-step log (:mod:`hopgym.train.steplog`) and the run itself (:mod:`hopgym.train.grpo`). TRL, datasets,
transformers and gguf come with the ``train`` extra: ``pip install 'hopgym[train]'``.
"""
