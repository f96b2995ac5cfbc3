#!/usr/bin/env bash
# Prints the shell commands a docs page marks as runnable, so that a test
# runs them as written: every fenced block opened by ```sh on the line right
# after a `<!-- run -->` comment. Blocks without the comment (kubectl
# against a cluster, say) are shown to readers only.
#
# Usage: scripts/doc-commands.sh FILE.md | bash -euo pipefail
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: scripts/doc-commands.sh FILE.md" >&2; exit 2; }
awk -v file="$1" '
	/^<!-- run -->[[:space:]]*$/ { armed = NR; next }
	armed == NR - 1 && /^```(sh|bash|console)?[[:space:]]*$/ { inblock = 1; found++; armed = 0; next }
	inblock && /^```[[:space:]]*$/ { inblock = 0; next }
	inblock { print; next }
	{ armed = 0 }
	END {
		if (inblock) { print "doc-commands.sh: " file ": a runnable block is not closed" > "/dev/stderr"; exit 1 }
		if (!found) { print "doc-commands.sh: " file ": no <!-- run --> block" > "/dev/stderr"; exit 1 }
	}' "$1"
