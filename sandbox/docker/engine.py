"""The Docker engine as the docker backend uses it: the SDK (the optional ``docker`` extra, imported only
when used), the connection, the checks that the image and a runtime are there, and the image build
(``hopgym sandbox build``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hopgym.errors import ConfigError, DockerUnavailableError, SandboxError, SandboxImageMissingError

DEFAULT_IMAGE = "hopgym-sandbox:latest"


def sdk():
    """The docker SDK, imported only when the backend is used (it is the optional ``docker`` extra)."""
    try:
        import docker
    except ImportError as exc:
        raise DockerUnavailableError(
            "the docker sandbox backend needs the docker package: pip install 'hopgym[docker]'"
        ) from exc
    return docker


def engine_errors() -> tuple[type[Exception], ...]:
    """What a failing engine or its connection raises through the SDK."""
    import requests

    return (sdk().errors.DockerException, requests.RequestException, OSError)


def connect_engine() -> Any:
    """A low-level client of the engine that ``DOCKER_HOST`` (default: the local socket) names."""
    docker = sdk()
    try:
        api = docker.from_env(version="auto", timeout=60).api
        api.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerUnavailableError(
            f"cannot reach the Docker engine at {where} ({exc}); start it (e.g. `systemctl start docker` "
            "or `dockerd`) or point DOCKER_HOST at one"
        ) from exc
    return api


def require_image(api: Any, image: str) -> None:
    """Fail with the build command when the engine does not hold ``image``."""
    docker = sdk()
    try:
        api.inspect_image(image)
    except docker.errors.ImageNotFound as exc:
        raise SandboxImageMissingError(
            f"the sandbox image {image!r} is not in the Docker engine; build it with "
            f"`hopgym sandbox build --tag {image}` (from a hopgym source checkout) or "
            f"`docker build -t {image} .` in the repository root"
        ) from exc


def require_runtime(api: Any, runtime: str | None) -> None:
    """Fail clearly when a container runtime such as gVisor's ``runsc`` is asked for but not registered."""
    if runtime is None:
        return
    available = sorted(api.info().get("Runtimes", {}))
    if runtime not in available:
        hint = (
            ' (gVisor: install runsc, e.g. `apt-get install runsc`, register it under "runtimes" in '
            "/etc/docker/daemon.json and reload dockerd; .ci/docker-setup.sh shows how)"
            if runtime == "runsc"
            else ""
        )
        raise DockerUnavailableError(
            f"the Docker engine has no runtime {runtime!r}{hint}; its runtimes: {', '.join(available)}"
        )


def default_build_context() -> Path:
    """The source checkout holding the Dockerfile (an editable install or a run from the repository)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "Dockerfile").is_file():
        raise ConfigError(
            f"no Dockerfile next to the installed package ({root}); run from a hopgym source checkout "
            "or pass the checkout's path as the build context"
        )
    return root


def build_image(
    context: Path,
    tag: str = DEFAULT_IMAGE,
    base: str | None = None,
    target: str = "sandbox",
    network: str | None = None,
) -> Iterator[str]:
    """Build a stage of the Dockerfile in ``context``; yields the build's output lines as they come."""
    docker = sdk()
    api = connect_engine()
    try:
        for chunk in api.build(
            path=str(context),
            tag=tag,
            target=target,
            buildargs={"BASE": base} if base else None,
            network_mode=network,
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in chunk:
                raise SandboxError(f"building {tag!r} failed: {chunk['error'].strip()}")
            if chunk.get("stream"):
                yield chunk["stream"].rstrip("\n")
    except docker.errors.APIError as exc:
        raise SandboxError(f"building {tag!r} failed: {exc}") from exc
