#!/usr/bin/env bash
# The README's `make test` on a new user's machine, which has neither bubblewrap nor a running Docker engine:
# the test files that use bubblewrap (found by what they name), run outside CI with a PATH that lacks bwrap and
# a Docker host that does not answer. Each test must pass or skip; at least one skip must name bubblewrap (so
# this check cannot pass by running nothing that needs it). CI runs it after `make test` (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
IFS=: read -ra dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    for program in "$dir"/*; do
        name="$(basename "$program")"
        [[ "$name" == bwrap || -e "$bin/$name" || ! -x "$program" ]] || ln -s "$program" "$bin/$name"
    done
done
PATH="$bin" command -v bwrap >/dev/null && { echo "bwrap is still on the trimmed PATH" >&2; exit 1; }

mapfile -t files < <(
    { grep -rlE --include='test_*.py' --exclude-dir=attacks 'bwrap|require_isolation' tests
      echo tests/sandbox/test_sandbox_attacks_contained.py; } | sort -u
)
report="$(mktemp)"
trap 'rm -rf "$bin" "$report"' EXIT
status=0
env -u CI PATH="$bin" DOCKER_HOST=unix:///nonexistent/docker.sock \
    .venv/bin/python -m pytest -q -n 3 -p no:cacheprovider -rs "${files[@]}" >"$report" 2>&1 || status=$?
if ((status != 0)); then
    cat "$report"
    echo "without bubblewrap: pytest exited $status (a test failed where a new user's machine lacks bwrap)" >&2
    exit 1
fi
grep -E '^SKIPPED|passed' "$report"  # every skip (what this check is about) and the count
grep -q "SKIPPED.*apt-get install bubblewrap" "$report" \
    || { echo "without bubblewrap: no test skipped naming bubblewrap; the check ran nothing that needs it" >&2; exit 1; }
# A skip that names bubblewrap's program but not how to install it leaves a new user guessing.
if grep -E '^SKIPPED.*(bwrap|bubblewrap)' "$report" | grep -v 'apt-get install bubblewrap (make system-deps'; then
    echo "without bubblewrap: the skips above name bwrap but not 'apt-get install bubblewrap (make system-deps'" >&2
    exit 1
fi
