#!/usr/bin/env bash
# Every shipped scenario has a row in the README's scenario table, and every row names a file
# that exists (issue 27: the table listed 18 of 36).
# usage: readme_scenarios.sh ROOT
cd "$1" || exit 1
bad=0
for f in scenarios/*.yaml; do
  grep -qF "| \`$f\` |" README.md || { echo "README.md's scenario table has no row for $f"; bad=1; }
done
for f in $(grep -oE '^\| `scenarios/[^`]+\.yaml` \|' README.md | grep -oE 'scenarios/[^`]+\.yaml'); do
  [ -f "$f" ] || { echo "README.md lists $f, which does not exist"; bad=1; }
done
[ $bad -eq 0 ] && echo "README.md lists all $(ls scenarios/*.yaml | wc -l) shipped scenarios"
exit $bad
