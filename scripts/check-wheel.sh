#!/usr/bin/env bash
# Prove the built wheel is complete: build it from a clean copy of the tree, install it
# into a fresh venv, and import every module of the source tree from outside the repo
# (scripts/import_all.py).
#
#   scripts/check-wheel.sh            # checks the committed tree (git archive HEAD)
#   CHECK_WHEEL_WORKTREE=1 scripts/check-wheel.sh
#                                     # checks the working tree (tracked + untracked files
#                                     # that are not gitignored) instead
#
# With no commit yet, the working tree is used. Needs the repo's .venv (for `build`;
# created with `make venv` when missing) and the package index for the dependencies.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
PY="$REPO/.venv/bin/python"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/toolgate-wheel.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '\n==> check-wheel: %s\n' "$*"; }

if [[ ! -x "$PY" ]]; then
    say "no $PY; bootstrapping it with make venv"
    make -C "$REPO" venv
fi

# ---- 1. a clean copy of the tree --------------------------------------------------------
mkdir -p "$TMP/src" "$TMP/dist" "$TMP/run"
copy_worktree() {
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        # what `git add -A` would commit: tracked + untracked, minus .gitignore'd paths
        (
            cd "$REPO"
            git ls-files -z --cached --others --exclude-standard \
                | while IFS= read -r -d '' f; do
                    if [[ -e "$f" || -L "$f" ]]; then printf '%s\0' "$f"; fi
                done \
                | tar --null --no-recursion -T - -cf -
        ) | tar -x -C "$TMP/src"
    else
        tar -C "$REPO" --anchored \
            --exclude=./.venv --exclude=./.build --exclude=./.git --exclude=./.toolgate \
            --exclude=./.langgraph_api --exclude=./dist --exclude=./build \
            --no-anchored --exclude='*.egg-info' --exclude=__pycache__ \
            -cf - . | tar -x -C "$TMP/src"
    fi
}

if [[ "${CHECK_WHEEL_WORKTREE:-0}" != "1" ]] && git -C "$REPO" rev-parse -q --verify 'HEAD^{commit}' >/dev/null 2>&1; then
    say "source: committed tree, HEAD $(git -C "$REPO" rev-parse --short HEAD)"
    dirty="$(git -C "$REPO" status --porcelain --untracked-files=normal | wc -l)"
    if [[ "$dirty" != 0 ]]; then
        echo "note: $dirty uncommitted/untracked path(s) are not in the wheel; modules that exist only in the"
        echo "      working tree will be reported missing (CHECK_WHEEL_WORKTREE=1 builds from the working tree)"
    fi
    git -C "$REPO" archive --format=tar HEAD | tar -x -C "$TMP/src"
else
    if [[ "${CHECK_WHEEL_WORKTREE:-0}" == "1" ]]; then
        say "source: working tree (CHECK_WHEEL_WORKTREE=1)"
    else
        say "source: working tree (no commit yet)"
    fi
    copy_worktree
fi

# ---- 2. build the wheel ------------------------------------------------------------------
say "building the wheel"
if ! (cd "$TMP/src" && "$PY" -m build --wheel --outdir "$TMP/dist" .) >"$TMP/build.log" 2>&1; then
    tail -n 30 "$TMP/build.log"
    # only a failure to fetch the build requirements (setuptools, wheel) is worth a retry
    # with the venv's own packages; a broken build fails right here
    # (`build` prints "* Getting build dependencies" once those are installed)
    if grep -qE '^\* Getting build dependencies' "$TMP/build.log"; then
        echo "check-wheel: FAIL: could not build the wheel (log above)" >&2
        exit 1
    fi
    say "isolated build could not fetch its build requirements (offline?); retrying with --no-isolation"
    rm -rf "$TMP/dist"/*
    if ! (cd "$TMP/src" && "$PY" -m build --wheel --no-isolation --outdir "$TMP/dist" .) >"$TMP/build.log" 2>&1; then
        cat "$TMP/build.log"
        echo "check-wheel: FAIL: could not build the wheel" >&2
        exit 1
    fi
fi
shopt -s nullglob
wheels=("$TMP/dist"/*.whl)
shopt -u nullglob
if [[ ${#wheels[@]} -ne 1 ]]; then
    cat "$TMP/build.log"
    echo "check-wheel: FAIL: expected exactly one wheel, got ${#wheels[@]}" >&2
    exit 1
fi
WHEEL="${wheels[0]}"
echo "built $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"
"$PY" - "$WHEEL" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = sorted({n.split("/", 1)[0] for n in names})
print(f"wheel entries={len(names)} top_level={','.join(tops)}")
PY

# ---- 3. a fresh venv with only the wheel (dependencies from the package index) --------
say "installing the wheel into a fresh venv"
"$PY" -m venv "$TMP/venv"
if ! "$TMP/venv/bin/python" -m pip install --quiet --no-input "$WHEEL" >"$TMP/install.log" 2>&1; then
    cat "$TMP/install.log"
    echo "check-wheel: FAIL: pip install of the wheel failed" >&2
    exit 1
fi

# ---- 4. import everything from outside the repository --------------------------------
say "importing every module from outside the repo"
cd "$TMP/run"
env -u PYTHONPATH -u PYTHONHOME "$TMP/venv/bin/python" -I "$REPO/scripts/import_all.py" "$REPO"
say "OK"
