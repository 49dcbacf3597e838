#!/usr/bin/env bash
# Prints the house (docs/house.md): the module's packages and their
# imports of each other, as a Mermaid graph, from `go list` of the tree
# it runs in. Tests, test helpers and the integration tests are left out.
#
#   scripts/house.sh            # this checkout
#   git worktree add /tmp/old REV && (cd /tmp/old && $PWD/scripts/house.sh)
set -euo pipefail
module=$(go list -m)
echo '```mermaid'
echo 'graph LR'
go list -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./... |
	awk -v m="$module/" '{for (i = 2; i <= NF; i++) if (index($i, m) == 1) print $1, $i}' |
	sed "s#$module/##g" | grep -v 'testdata\|gatewaytest\|bridgetest\|integration' | sort |
	awk '{a = $1; b = $2; gsub("[/-]", "_", a); gsub("[/-]", "_", b); printf "  %s[\"%s\"] --> %s[\"%s\"]\n", a, $1, b, $2}'
echo '```'
