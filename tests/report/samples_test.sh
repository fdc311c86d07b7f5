#!/usr/bin/env bash
# The report page (report/web/report.js) on the hand-made sample data of
# report/web/dev — hostile text in every field, a pair, a record file, a
# baseline — assembled by make-page.cjs and opened in Debian's chromium by
# browser_test.cjs with each sample's expectations. No PostgreSQL needed.
#   tests/report/samples_test.sh OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: samples_test.sh OUT_DIR}
mkdir -p "$out"
pages=()
for s in closed pair record baseline; do
  node "$root/report/web/dev/make-page.cjs" "$root/report/web/dev/sample-$s.json" "$out/sample-$s.html" >/dev/null
  pages+=("$out/sample-$s.html:$root/report/web/dev/sample-$s.expect.json")
done
exec node "$root/tests/report/browser_test.cjs" --node-modules "$root/report/web/node_modules" \
  --out-dir "$out" "${pages[@]}"
