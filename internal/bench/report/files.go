package report

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Files are the report files of a run: JSON ("-" for stdout), HdrHistogram
// percentiles and HTML, created before the run so that a wrong path does
// not cost one.
type Files struct {
	stdoutJSON       bool
	json, hgrm, html *os.File
}

// CreateFiles creates the files named; an empty name is no file.
func CreateFiles(json, hgrm, html string) (*Files, error) {
	fs := &Files{stdoutJSON: json == "-"}
	for _, f := range []struct {
		name string
		file **os.File
	}{{json, &fs.json}, {hgrm, &fs.hgrm}, {html, &fs.html}} {
		if f.name == "" || f.name == "-" {
			continue
		}
		file, err := os.Create(f.name)
		if err != nil {
			fs.Close()
			return nil, fmt.Errorf("bench: creating report file: %w", err)
		}
		*f.file = file
	}
	return fs, nil
}

// Close closes the files.
func (fs *Files) Close() {
	for _, f := range []*os.File{fs.json, fs.hgrm, fs.html} {
		if f != nil {
			f.Close()
		}
	}
}

// Summary is where the text summary goes: stdout, or stderr when the JSON
// report goes to stdout.
func (fs *Files) Summary(stdout, stderr io.Writer) io.Writer {
	if fs.stdoutJSON {
		return stderr
	}
	return stdout
}

// Write writes rep: as JSON to stdout if asked, its text summary (see
// Summary), and the files. It fails a run in which no request succeeded.
func (fs *Files) Write(rep *Report, stdout, stderr io.Writer) error {
	if fs.stdoutJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			return fmt.Errorf("bench: writing JSON report: %w", err)
		}
	}
	if err := rep.WriteText(fs.Summary(stdout, stderr)); err != nil {
		return err
	}
	for _, f := range []struct {
		file  *os.File
		write func(io.Writer) error
	}{{fs.json, rep.WriteJSON}, {fs.hgrm, rep.WriteHgrm}, {fs.html, rep.WriteHTML}} {
		if f.file == nil {
			continue
		}
		if err := f.write(f.file); err != nil {
			return fmt.Errorf("bench: writing %s: %w", f.file.Name(), err)
		}
		if err := f.file.Close(); err != nil {
			return fmt.Errorf("bench: writing %s: %w", f.file.Name(), err)
		}
	}
	if rep.OK == 0 && !rep.Interrupted {
		return errors.New("bench: no request succeeded")
	}
	return nil
}
