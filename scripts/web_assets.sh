#!/usr/bin/env bash
# Refresh the web view's vendored libraries (testbed/web/static/vendor) from npm at the versions and sums
# listed in its README.md. To move to a new version: change the row, run this with --update-sums, review.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
vendor="$here/testbed/web/static/vendor"
update=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -E '^\| [a-z.]+\.js \|' "$vendor/README.md" | while IFS='|' read -r _ file spec sum _; do
  file=$(echo "$file" | xargs); sum=$(echo "$sum" | xargs)
  pkg=$(echo "$spec" | awk '{print $1}'); path=$(echo "$spec" | sed -E 's/.*\((.*)\).*/\1/')
  (cd "$tmp" && npm pack --silent "$pkg" >/dev/null && mkdir -p "$pkg" && tar xzf ./*.tgz -C "$pkg" && rm -f ./*.tgz)
  got=$(sha256sum "$tmp/$pkg/package/$path" | cut -d' ' -f1)
  if [ "$got" != "$sum" ] && [ "$update" != "--update-sums" ]; then
    echo "web-assets: $pkg $path has sha256 $got, README.md says $sum; fix: check the release, then --update-sums" >&2
    exit 1
  fi
  cp "$tmp/$pkg/package/$path" "$vendor/$file"
  [ "$got" = "$sum" ] || sed -i "s/$sum/$got/" "$vendor/README.md"
  echo "[web-assets] $file <- $pkg ($got)"
done
