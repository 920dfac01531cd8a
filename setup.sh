#!/usr/bin/env bash
# One-step, idempotent set-up of wgsentis on a fresh machine:
#  1. system packages (Debian/Ubuntu): Mesa's lavapipe Vulkan driver and loader, RenderDoc, Xvfb;
#  2. .venv in the repo root with wgsentis installed editable, plus the dev extras
#     (pytest, onnxruntime as the test reference, ruff).
# Re-running it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"

SYSTEM_PACKAGES=(mesa-vulkan-drivers libvulkan1 librenderdoc python3-renderdoc renderdoccmd xvfb chromium)

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for pkg in "${SYSTEM_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
fi
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else SUDO=(none); fi
    if [[ ${SUDO[0]:-} == none ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "setup: cannot install ${missing[*]} (need apt-get and root); GPU and RenderDoc features will be unavailable" >&2
    else
        echo "setup: installing system packages: ${missing[*]}"
        "${SUDO[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

PYTHON=python3
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup: wgsentis needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv"
    "$PYTHON" -m venv .venv
fi
# Reinstall only when the package metadata changed since the last successful install.
stamp=.venv/.wgsentis-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    echo "setup: installing wgsentis (editable) with dev extras into .venv"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    echo "$want" > "$stamp"
fi
echo "setup: ready (.venv/bin/wgsentis)"
