"""``hopgym sandbox build``: build the Docker sandbox image (or the image that runs hopgym itself)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hopgym.sandbox.docker.engine import DEFAULT_IMAGE, build_image, default_build_context


def build(args: argparse.Namespace) -> int:
    context = Path(args.context) if args.context else default_build_context()
    for line in build_image(context, tag=args.tag, base=args.base, target=args.target, network=args.network):
        print(line, flush=True)
    print(f"built {args.tag} (stage {args.target!r} of {context / 'Dockerfile'})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sandbox", help="manage the Docker sandbox image")
    actions = parser.add_subparsers(dest="sandbox_command", required=True, metavar="ACTION")
    builder = actions.add_parser(
        "build", help="build the sandbox image from the Dockerfile (needs a reachable Docker engine)"
    )
    builder.add_argument("--tag", default=DEFAULT_IMAGE, help=f"image tag (default: {DEFAULT_IMAGE})")
    builder.add_argument(
        "--base", default=None, help="base image with python3 (default: the Dockerfile's python:3.11-slim)"
    )
    builder.add_argument(
        "--target",
        choices=("sandbox", "hopgym", "serve"),
        default="sandbox",
        help="sandbox: the tool-code worker (default); hopgym: an image that runs hopgym itself; serve: "
        "hopgym serve env in a container",
    )
    builder.add_argument(
        "--network",
        default=None,
        help="network for the build's RUN steps, e.g. host when the engine has no bridge",
    )
    builder.add_argument("--context", default=None, help="the source checkout (default: the installed one)")
    builder.set_defaults(func=build)
