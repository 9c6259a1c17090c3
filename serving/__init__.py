"""hopgym's envs behind the interfaces RL trainers consume: an OpenEnv server and client, a verifiers env."""
