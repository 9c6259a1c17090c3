"""One module per ``hopgym`` subcommand; each exposes ``register(subparsers)``."""
