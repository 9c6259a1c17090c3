# The hopgym sandbox image: a slim Python holding only the sandbox worker and the third-party libraries
# that ToolHop's tool code imports, run as a non-root user. The default (last) stage is the sandbox:
#   hopgym sandbox build                    (or: docker build -t hopgym-sandbox .)
# A machine without an image registry passes a locally built Debian base that has python3:
#   hopgym sandbox build --base hopgym-base:bookworm --network host
# The `hopgym` stage runs the package itself:  docker build --target hopgym -t hopgym .
# The `serve` stage runs `hopgym serve env`:  docker build --target serve -t hopgym-serve .
ARG BASE=python:3.11-slim

# A Python with pip: the base's own, or Debian's python3-pip where the base has none (a debootstrap base).
FROM ${BASE} AS python-pip
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m pip --version >/dev/null 2>&1 || { apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null \
    && rm -rf /var/lib/apt/lists/*; }

# What the worker imports (RestrictedPython for policy="restricted"; its seccomp filter goes through
# libseccomp by ctypes, checked in the sandbox stage) and what the full ToolHop set's tool code imports
# beyond the standard library; kept apart so the sandbox stage needs no pip.
FROM python-pip AS tool-libraries
RUN python3 -m pip install --quiet --target /opt/hopgym/lib \
        RestrictedPython==9.0 pytz==2026.6 python-dateutil==4.0.0 dicttoxml==1.7.16 babel==2.18.0

# The requirement lists read from pyproject.toml. The stages that install them copy only these files (Docker
# caches a COPY by the files' content), so an edit elsewhere in pyproject.toml or in README.md reuses their
# minutes of pip.
FROM ${BASE} AS requirements
COPY pyproject.toml /tmp/pyproject.toml
RUN python3 -c "import tomllib; project = tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']; \
open('/tmp/hopgym.txt', 'w').write('\n'.join(project['dependencies'])); \
open('/tmp/serve.txt', 'w').write('\n'.join(project['dependencies'] + project['optional-dependencies']['serve']))"

# hopgym itself (dependencies first, so a source change reinstalls only the package).
FROM python-pip AS hopgym
WORKDIR /src
COPY --from=requirements /tmp/hopgym.txt /tmp/requirements.txt
RUN python3 -m pip install --quiet -r /tmp/requirements.txt docker==7.2.0 && rm /tmp/requirements.txt
COPY . .
RUN python3 -m pip install --quiet --no-deps . && rm -rf /src/* \
    && useradd --system --uid 10001 --user-group --create-home --shell /usr/sbin/nologin hopgym
USER 10001:10001
WORKDIR /home/hopgym
ENTRYPOINT ["hopgym"]

# What `hopgym serve env` adds (the [serve] extra), resolved with hopgym's own dependencies and kept apart
# from the source, so a source change reinstalls none of it.
FROM python-pip AS serve-libraries
COPY --from=requirements /tmp/serve.txt /tmp/requirements.txt
RUN python3 -m pip install --quiet --target /opt/hopgym/serve -r /tmp/requirements.txt

# hopgym serve env (docs/contracts.md, "Training interfaces"). Tool calls run in the process sandbox inside
# this container, which has no bubblewrap, no user namespaces (Docker's seccomp profile refuses them) and no
# writable cgroups: the env must be asked for that explicitly (sandbox_options {"isolation": "none",
# "cgroup": "none"}, reported as seccomp+rlimits) and CodeAct code allowed (--allow-unisolated-code), or
# the server refuses. What keeps tool code from the server's secrets is the uid: the server runs as root
# with only the capabilities it needs, each worker drops to nobody (65534, no capabilities, no_new_privs)
# before it runs anything, and everything secret lies in /hopgym (mode 0700, root's): the data mounted
# read-only at /hopgym/data, the key file at /hopgym/api-key. Nobody can write anywhere (no world-writable
# folder is left), so one session's code leaves no file for another's. Run it with:
#   docker run --cap-drop ALL --cap-add SETUID --cap-add SETGID --cap-add KILL --cap-add DAC_READ_SEARCH \
#     --security-opt no-new-privileges --ipc none -p 127.0.0.1:8000:8000 \
#     -v "$HOPGYM_DATA:/hopgym/data:ro" -v "$KEY_FILE:/hopgym/api-key:ro" hopgym-serve serve env \
#     --host 0.0.0.0 --port 8000 --api-key-file /hopgym/api-key --allow-unisolated-code \
#     --env-arg 'sandbox_options={"isolation": "none", "cgroup": "none"}'
# (KILL: the server stops and pauses its workers, which are not its uid; DAC_READ_SEARCH: it reads the key
# and data files whatever their owner on the host; --ipc none: no /dev/shm, the one world-writable folder
# Docker would mount.)
FROM hopgym AS serve
COPY --from=serve-libraries /opt/hopgym/serve /opt/hopgym/serve
USER 0:0
RUN install -d -m 0700 -o root -g root /hopgym \
    && find / -xdev -type d -perm -0002 -exec chmod o-w {} +
ENV PYTHONPATH=/opt/hopgym/serve HOPGYM_DATA=/hopgym/data
WORKDIR /hopgym
EXPOSE 8000

# The sandbox: base Python + worker + libraries, nothing else. hopgym starts it read-only, without network
# or capabilities, with a small tmpfs at /tmp, as uid 10001.
FROM ${BASE} AS sandbox
RUN python3 -c "import ctypes.util, sys; sys.exit(ctypes.util.find_library('seccomp') is None)" \
        || { echo "the base image lacks libseccomp (libseccomp2), which the worker's seccomp filter needs" >&2; exit 1; } \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin hopgym
COPY --from=tool-libraries /opt/hopgym/lib /opt/hopgym/lib
# The worker's files (isolation.WORKER_FILES; tests/test_import_cycles.py checks this list against it).
COPY sandbox/worker.py sandbox/hardening.py sandbox/template.py sandbox/code_policy.py sandbox/policy.py \
     sandbox/wire.py sandbox/handler.py /opt/hopgym/
ENV PYTHONPATH=/opt/hopgym/lib PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8
LABEL org.opencontainers.image.title="hopgym-sandbox" \
      org.opencontainers.image.description="hopgym's sandbox worker for untrusted tool code"
USER 10001:10001
WORKDIR /tmp
# The one argument is the worker's JSON configuration; the protocol runs over stdin/stdout.
ENTRYPOINT ["python3", "-s", "-B", "/opt/hopgym/worker.py"]
