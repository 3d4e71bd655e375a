#!/usr/bin/env bash
# Create the project's virtual environment; on a fresh Debian 12 install python3-venv first if needed.
set -euo pipefail
py="${1:-python3}"
venv="${2:-.venv}"
if ! "$py" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' 2>/dev/null; then
  echo "gpucluster needs Python >= 3.11 (found: $("$py" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "installing python3-venv (needed to create $venv)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      "$py" -m venv "$venv"
    else
      echo "cannot create a virtual environment: install python3-venv" >&2
      exit 1
    fi
  fi
fi
