"""The agents (policies) that drive a model through the envs: the shared episode state and model call, one
module per agent style, and the registry the CLI names them by."""
