"""The ``docker`` backend, by concern: ``engine`` (the SDK, the connection, the image and its build),
``containers`` (their owners, removing stale ones, removing this process's own at exit), ``attach`` (the
worker's stdin and stdout over the attach socket) and ``backend`` (the launcher and ``DockerSandbox``)."""
