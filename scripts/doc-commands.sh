#!/usr/bin/env bash
# Prints the shell commands a docs page marks as runnable, so that a test
# runs them as written: every fenced block opened by ```sh on the line right
# after a `<!-- run -->` comment. Blocks without the comment (kubectl
# against a cluster, say) are shown to readers only.
#
# A runnable block may also show what a command answers: comment lines
# `# => TEXT` after the commands. With --expect, the script printed checks
# them: the output of the commands since the previous `# =>` lines (stdout
# and stderr) must have, in order, a line that matches each TEXT whole,
# where `...` matches any text (`# => {"accepted":1,...}`). A mismatch
# prints what was expected and what came, and fails the script. Without
# --expect, the `# =>` lines are comments and nothing is checked.
#
# Usage: scripts/doc-commands.sh [--expect] FILE.md | bash -euo pipefail
set -euo pipefail
expect=0
if [ "${1:-}" = --expect ]; then
	expect=1
	shift
fi
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: scripts/doc-commands.sh [--expect] FILE.md" >&2; exit 2; }

if [ "$expect" = 1 ]; then
	# The checking functions, ahead of the page's commands. A step's
	# commands run in this shell (a brace group, not a subshell), so that
	# variables, cd and background jobs carry over to the next step.
	cat <<'PRELUDE'
__doc_out="$(mktemp -d)"
__doc_step=0
__doc_fail() {
	local rc=$?
	if [ "$rc" -ne 0 ] && [ -f "$__doc_out/$__doc_step" ]; then
		echo "doc-commands: step $__doc_step failed (exit $rc); its output:" >&2
		cat "$__doc_out/$__doc_step" >&2
	fi
	rm -rf "$__doc_out"
}
trap __doc_fail EXIT
# __doc_expect N: each line of stdin (an expected line, `...` any text)
# must match a line of step N's output whole, in order.
__doc_expect() {
	local f="$__doc_out/$1" want pat part rest line found
	local -a got=()
	while IFS= read -r line || [ -n "$line" ]; do got+=("${line%$'\r'}"); done <"$f"
	local i=0
	while IFS= read -r want; do
		# The pattern: the expected text, glob characters escaped, `...` as *.
		pat='' rest="$want"
		while [[ "$rest" == *...* ]]; do
			part="${rest%%...*}"
			pat+="$(printf '%s' "$part" | sed 's/[][\\*?]/\\&/g')*"
			rest="${rest#*...}"
		done
		pat+="$(printf '%s' "$rest" | sed 's/[][\\*?]/\\&/g')"
		found=0
		while [ "$i" -lt "${#got[@]}" ]; do
			line="${got[$i]}"
			i=$((i + 1))
			# shellcheck disable=SC2053 # a pattern on purpose
			if [[ "$line" == $pat ]]; then found=1; break; fi
		done
		if [ "$found" = 0 ]; then
			{
				echo "doc-commands: step $1: no line of its output matches: $want"
				echo "its output:"
				cat "$f"
			} >&2
			rm -f "$f"
			return 1
		fi
	done
}
PRELUDE
fi

awk -v file="$1" -v expect="$expect" -v q="'" '
	function flush_expect() {
		if (nexp) {
			if (!open) { print "doc-commands.sh: " file ":" NR ": a `# =>` line with no command before it" > "/dev/stderr"; exit 1 }
			print "} >\"$__doc_out/" step "\" 2>&1"
			print "cat \"$__doc_out/" step "\""
			print "__doc_expect " step " <<'"'"'__DOC_EXPECT'"'"'"
			for (k = 1; k <= nexp; k++) print wanted[k]
			print "__DOC_EXPECT"
			nexp = 0
			open = 0
		}
	}
	function begin_step() {
		if (expect && !open) {
			step++
			print "__doc_step=" step
			print "{"
			open = 1
		}
	}
	/^<!-- run -->[[:space:]]*$/ { armed = NR; next }
	armed == NR - 1 && /^```(sh|bash|console)?[[:space:]]*$/ { inblock = 1; found++; armed = 0; next }
	inblock && /^```[[:space:]]*$/ {
		inblock = 0
		if (expect) {
			flush_expect()
			if (open) { print "}"; open = 0 }
		}
		next
	}
	# Inside a here-document, lines are data: no expectations there.
	inblock && expect && heredoc != "" {
		print
		line = $0
		sub(/^\t+/, "", line)
		if (line == heredoc) heredoc = ""
		next
	}
	inblock && expect && /^# => / { wanted[++nexp] = substr($0, 6); next }
	inblock && expect && /^# =>$/ { wanted[++nexp] = ""; next }
	inblock {
		if (expect) {
			flush_expect()
			# A line inside a here-document or a quoted string spanning lines
			# never starts a step: steps open only at the block start or after
			# an expectation.
			begin_step()
		}
		print
		if (expect && match($0, "<<-?[[:space:]]*[" q "\"]?[A-Za-z_][A-Za-z0-9_]*")) {
			heredoc = substr($0, RSTART, RLENGTH)
			sub("^<<-?[[:space:]]*[" q "\"]?", "", heredoc)
		}
		next
	}
	{ armed = 0 }
	END {
		if (inblock) { print "doc-commands.sh: " file ": a runnable block is not closed" > "/dev/stderr"; exit 1 }
		if (!found) { print "doc-commands.sh: " file ": no <!-- run --> block" > "/dev/stderr"; exit 1 }
	}' "$1"
