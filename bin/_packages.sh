# Sourced by bin/test: Debian packages the suite drives, installed when missing — saying so first.
# The browser tests (tests/e2e) drive Debian's Chromium (Playwright downloads no browser here); the
# isolation tests run jobs in bubblewrap's namespaces, as an isolated node does.

# ensure_package PACKAGE FILE WHY: install PACKAGE with apt-get unless FILE is there.
ensure_package() {
  local package=$1 file=$2 why=$3
  [ -x "$file" ] && return
  echo "bin/test: $file is missing; installing Debian's $package package with apt-get ($why)."
  local as_root=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "bin/test: installing $package needs root, and sudo is not available." \
        "Install it yourself (apt-get install $package), then rerun bin/test." >&2
      exit 1
    fi
    echo "bin/test: not root, so through sudo (it may ask for your password)."
    as_root=(sudo)
  fi
  if ! { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get install -y -qq "$package" >/dev/null; }; then
    echo "bin/test: apt-get could not install $package (see above)." \
      "Install it yourself (apt-get install $package), then rerun bin/test." >&2
    exit 1
  fi
}

ensure_chromium() {
  ensure_package chromium "${1:-/usr/bin/chromium}" "the browser tests in tests/e2e drive it"
}

ensure_bubblewrap() {
  ensure_package bubblewrap "${1:-/usr/bin/bwrap}" "the isolation tests run jobs in its namespaces"
}
