# Sourced by bin/run-portal and bin/test: make .venv with Python 3.11 and install
# the pinned requirements file given as $1, again only when the requirements changed;
# and make the directory the embedded SQLite database lives in.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python_311() {
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      echo "$candidate"; return
    fi
  done
  echo "Python 3.11 is required (python3.11 or python3 on PATH)." >&2
  exit 1
}

ensure_venv() {
  local requirements=$1
  [ -x .venv/bin/python ] || "$(python_311)" -m venv .venv
  local stamp=".venv/.installed-$(basename "$requirements")"
  local digest
  # sdk/pyproject.toml too: requirements.txt installs the SDK editable, and its metadata
  # (dependencies, console script) is only rebuilt by a reinstall.
  digest=$(cat requirements*.txt sdk/pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$requirements"
    # A file included with -r (requirements-dev.txt includes requirements.txt) is installed too:
    # stamp it as well, so bin/run-portal after bin/test installs nothing. Not the reverse.
    local installed
    for installed in "$requirements" $(sed -n 's/^-r[[:space:]]*//p' "$requirements"); do
      echo "$digest" >".venv/.installed-$(basename "$installed")"
    done
  fi
  export PATH="$PWD/.venv/bin:$PATH"
}

# The directory portal/settings.py keeps the embedded SQLite database in: PORTAL_VAR_DIR when it is
# set (relative to the repository root, where both scripts run manage.py), else var/.
ensure_var_dir() {
  local dir=${PORTAL_VAR_DIR-var}
  mkdir -p "${dir:-.}"
}
