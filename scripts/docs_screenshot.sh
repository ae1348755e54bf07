#!/usr/bin/env bash
# Headless check of the built docs site: the pages render and the navigation works.
#   bash scripts/docs_screenshot.sh [OUT_DIR]        (default /tmp/docs_screenshots)
# MKDOCS_CONFIG=<file> builds from another config (default mkdocs.yml).
# Builds the site into OUT_DIR/site (mkdocs --strict), serves it on loopback, and with Debian's chromium:
#   - screenshots the home page and one inner page (OUT_DIR/home.png, OUT_DIR/inner.png);
#   - dumps the home page's DOM and checks that it links every nav page;
#   - follows the nav link to the troubleshooting page and checks that it answers with that page's title.
# Exit status 0 when every check passed; 3 when chromium is not installed (apt-get install chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/docs_screenshots}
VENV=${VENV:-.venv}
mkdir -p "$OUT"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$CHROMIUM" ]]; then
  echo "chromium not found: install Debian's package (apt-get install chromium) to check the site" >&2
  exit 3
fi

NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict -f "${MKDOCS_CONFIG:-mkdocs.yml}" --site-dir "$OUT/site" 2>&1 | tail -1
PORT=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$VENV/bin/python" -m http.server "$PORT" --bind 127.0.0.1 --directory "$OUT/site" >"$OUT/http.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
BASE="http://127.0.0.1:$PORT"
for _ in $(seq 50); do curl -fs "$BASE/" >/dev/null 2>&1 && break; sleep 0.1; done

# A fresh profile per run: chromium refuses a profile another instance holds.
browse() {
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$OUT/profile" --window-size=1280,900 "$@" 2>>"$OUT/chromium.log"
}
browse --screenshot="$OUT/home.png" "$BASE/" >/dev/null
browse --screenshot="$OUT/inner.png" "$BASE/troubleshooting/" >/dev/null
browse --dump-dom "$BASE/" >"$OUT/home.html"

fail=0
for page in config algorithms rewards agent_loop checkpoints scaling performance troubleshooting; do
  if ! grep -q "href=\"$page/\"" "$OUT/home.html"; then
    echo "FAIL: the home page's navigation has no link to $page/" >&2
    fail=1
  fi
done
HREF=$(grep -o 'href="troubleshooting/"' "$OUT/home.html" | head -1 | sed 's/href="\(.*\)"/\1/')
browse --dump-dom "$BASE/$HREF" >"$OUT/followed.html"
if ! grep -q "<title>Troubleshooting - verl</title>" "$OUT/followed.html"; then
  echo "FAIL: following the nav link '$HREF' did not return the Troubleshooting page" >&2
  fail=1
fi
for png in home inner; do
  [[ -s "$OUT/$png.png" ]] || { echo "FAIL: no screenshot $OUT/$png.png" >&2; fail=1; }
done
[[ $fail == 0 ]] || exit 1
echo "ok: $OUT/home.png ($(stat -c %s "$OUT/home.png") bytes), $OUT/inner.png ($(stat -c %s "$OUT/inner.png") bytes); nav links and '$HREF' -> Troubleshooting"
