"""Running untrusted code: the worker protocol and the isolated backends behind one interface."""
