package ship

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"unicode/utf8"
)

// readLines sends the lines of r to out until r ends, then closes out.
func readLines(ctx context.Context, r io.Reader, enc *lineEncoder, out chan<- record) error {
	defer close(out)
	br := bufio.NewReaderSize(r, 64<<10)
	sp := lineSplitter{max: maxLineBytes}
	emit := func(line []byte, _ int) bool {
		select {
		case out <- record{event: enc.encode(line, "")}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if !sp.add(chunk, err == nil, emit) {
			return nil
		}
		if err == nil || errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		// The end, or a failure: a last line without a newline is a line.
		if !sp.flush(emit) || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
}

// maxLineBytes is the longest line ship sends as one event: a longer one
// is sent in pieces of at most this many bytes, so that a line without an
// end holds bounded memory (Kafka takes about 1 MB per record by default).
const maxLineBytes = 512 << 10

// lineSplitter gathers the pieces of a line read (bufio.Reader.ReadSlice
// gives a long line in pieces) and yields it whole, or, while it is longer
// than max, in pieces of at most max bytes cut before a UTF-8 sequence.
type lineSplitter struct {
	max     int
	partial []byte
	Split   int64 // pieces yielded of lines longer than max
}

// add takes chunk, read after what came before; complete says it ends
// the line (with its "\n"). It calls yield with each line or piece to send
// (its end of line cut) and how many bytes read stay held after it; false
// if yield said to stop.
func (sp *lineSplitter) add(chunk []byte, complete bool, yield func(line []byte, held int) bool) bool {
	if len(sp.partial) == 0 && complete && len(chunk) <= sp.max {
		return yield(trimEOL(chunk), 0)
	}
	sp.partial = append(sp.partial, chunk...)
	for len(sp.partial) > sp.max && !(complete && len(trimEOL(sp.partial)) <= sp.max) {
		cut := sp.max
		for c := cut; c > sp.max-utf8.UTFMax && c > 0; c-- {
			if utf8.RuneStart(sp.partial[c]) {
				cut = c
				break
			}
		}
		sp.Split++
		if !yield(sp.partial[:cut], len(sp.partial)-cut) {
			return false
		}
		sp.partial = append(sp.partial[:0], sp.partial[cut:]...)
	}
	if !complete {
		return true
	}
	line := sp.partial
	sp.partial = sp.partial[:0]
	return yield(trimEOL(line), 0)
}

// flush yields what is held, a last line without its end of line.
func (sp *lineSplitter) flush(yield func(line []byte, held int) bool) bool {
	if len(sp.partial) == 0 {
		return true
	}
	line := sp.partial
	sp.partial = nil
	return yield(line, 0)
}

// trimEOL cuts a line's "\n" or "\r\n".
func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
