# Sourced by bin/test: the browser tests (tests/e2e) drive Debian's Chromium, and Playwright
# downloads no browser here, so install the chromium package when it is missing — saying so first.
ensure_chromium() {
  local browser=${1:-/usr/bin/chromium}
  [ -x "$browser" ] && return
  echo "bin/test: $browser is missing; installing Debian's chromium package with apt-get" \
    "(the browser tests in tests/e2e drive it)."
  local as_root=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "bin/test: installing chromium needs root, and sudo is not available." \
        "Install it yourself (apt-get install chromium), then rerun bin/test." >&2
      exit 1
    fi
    echo "bin/test: not root, so through sudo (it may ask for your password)."
    as_root=(sudo)
  fi
  if ! { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get install -y -qq chromium >/dev/null; }; then
    echo "bin/test: apt-get could not install chromium (see above)." \
      "Install it yourself (apt-get install chromium), then rerun bin/test." >&2
    exit 1
  fi
}
