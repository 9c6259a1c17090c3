#!/usr/bin/env bash
# Prepares a real Docker engine and the hopgym sandbox image on a machine without an image registry
# (this CI): installs Debian's docker.io, debootstrap and runsc (gVisor, registered as a runtime), starts
# dockerd, builds a Debian base image with python3 by debootstrap, then the project's image from the
# Dockerfile. Idempotent: each step is skipped when its result is already there, and the image build
# reuses Docker's layer cache.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE="${HOPGYM_BASE_IMAGE:-hopgym-base:bookworm}"
DOCKERD_LOG="${HOPGYM_DOCKERD_LOG:-/tmp/hopgym-dockerd.log}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null || ! command -v runsc >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap runsc >/dev/null
fi

# gVisor as the engine's "runsc" runtime (sandbox option runtime="runsc"); its own network stays off.
python3 - <<'PY'
import json, pathlib
config = pathlib.Path("/etc/docker/daemon.json")
settings = json.loads(config.read_text()) if config.exists() else {}
wanted = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}
if settings.get("runtimes", {}).get("runsc") != wanted:
    settings.setdefault("runtimes", {})["runsc"] = wanted
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(settings, indent=2) + "\n")
PY
if docker info >/dev/null 2>&1 && ! docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
    kill -HUP "$(pidof dockerd)"  # a running engine reloads its runtimes
    sleep 2
fi

if ! docker info >/dev/null 2>&1; then
    # No bridge network and no iptables here: containers get --network none, image builds --network host.
    setsid nohup dockerd --iptables=false --bridge=none --storage-driver=overlay2 >"$DOCKERD_LOG" 2>&1 &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { echo "dockerd did not come up; its log:" >&2; tail -20 "$DOCKERD_LOG" >&2; exit 1; }
fi

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    rootfs="$(mktemp -d)"
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$rootfs" "$DEBIAN_MIRROR" >/dev/null
    # The base trusts the host's local certificate authorities (this network inspects TLS with its own).
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >/dev/null
    fi
    tar -C "$rootfs" --exclude=./var/cache/apt/archives/*.deb --exclude=./var/lib/apt/lists/* -c . \
        | docker import - "$BASE_IMAGE" >/dev/null
fi

make --silent .venv/.installed >/dev/null
.venv/bin/hopgym sandbox build --base "$BASE_IMAGE" --network host | tail -n 3
# The serve stage too, under the tag tests/serving/test_docker_serve.py builds: its dependency layers (hopgym's and the
# [serve] extra's, minutes of pip) are set up here like the sandbox image, so the test rebuilds only the source.
.venv/bin/hopgym sandbox build --base "$BASE_IMAGE" --network host --target serve --tag hopgym-serve:test | tail -n 1
# The stages no image is built FROM (their files are copied out) are the cache of their minutes of pip: tagged,
# the prune below keeps them, and the serve test's build reuses them instead of rebuilding (220 s of a worker).
.venv/bin/python - "$BASE_IMAGE" <<'PY'
import sys
from collections import deque
from pathlib import Path

from hopgym.sandbox.docker.engine import build_image

for stage in ("tool-libraries", "requirements", "serve-libraries"):
    deque(build_image(Path.cwd(), tag=f"hopgym-cache:{stage}", base=sys.argv[1], target=stage, network="host"), 0)
PY
docker image prune --force >/dev/null  # older builds of the image leave untagged layers behind
