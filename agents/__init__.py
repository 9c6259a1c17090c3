"""Models and the agents that drive them through the envs."""
