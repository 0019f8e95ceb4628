#!/usr/bin/env bash
# The TypeScript client's checks (run by .ci/run after the Python suite; `bash clients/typescript/ci.sh` by hand):
# npm ci, the generated types match clients/openapi.json, tsc --noEmit, then node --test against a real
# `agentq api --embedded` started from the repository's .venv (made by `python3 dev.py test`), the packed tarball
# installed into an empty folder among them. Without Node 20+ and npm it says why and skips, except on CI (CI set),
# where that is a failure. Ends with one summary line.
set -uo pipefail
cd "$(dirname "$0")"
started=$SECONDS
say() { echo "[ts] $*"; }
fail() { say "FAILED: $*"; echo "typescript: 0 passed, 1 failed"; exit 1; }

major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if ! command -v npm >/dev/null 2>&1 || [ "$major" -lt 20 ]; then
  reason="Node.js 20+ and npm are not installed (node: $(command -v node || echo none), version major $major)"
  [ -n "${CI:-}" ] && fail "$reason; CI must run the TypeScript client's checks"
  say "skipped: $reason; the TypeScript client's checks need them"
  exit 0
fi
[ -x ../../.venv/bin/python ] || [ -n "${AGENTQ_PYTHON:-}" ] \
  || fail "no ../../.venv/bin/python with agentq: run python3 dev.py test (or lint) first, or set AGENTQ_PYTHON"

npm ci --no-audit --no-fund --prefer-offline >/dev/null || fail "npm ci"
generated=$(mktemp -d)
trap 'rm -rf "$generated"' EXIT
npx --no-install openapi-typescript ../openapi.json --default-non-nullable false -o "$generated/schema.ts" >/dev/null 2>&1 \
  || fail "openapi-typescript could not read clients/openapi.json"
cmp -s "$generated/schema.ts" src/schema.ts \
  || fail "src/schema.ts is not what clients/openapi.json generates: run python3 dev.py openapi and commit both"
npx --no-install tsc --noEmit || fail "tsc --noEmit: the client does not type-check against the generated types"
log="$generated/test.log"
npm test 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
passed=$(grep -E '^# pass [0-9]+' "$log" | tail -1 | awk '{print $3}')
failed=$(grep -E '^# fail [0-9]+' "$log" | tail -1 | awk '{print $3}')
say "done in $((SECONDS - started)) s"
echo "typescript: ${passed:-0} passed, ${failed:-1} failed"
[ "$status" -eq 0 ] && [ "${passed:-0}" -gt 0 ] || exit 1
