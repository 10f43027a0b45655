package kubectlfence

import (
	"bytes"
	"io"
	"strings"
)

// nodeRows passes on the lines of a table whose first column is node, and its header (a
// line that begins with NODE): `check NODE` shows the leader's check of that node only.
type nodeRows struct {
	node    string
	out     io.Writer
	partial []byte
}

func (f *nodeRows) Write(b []byte) (int, error) {
	f.partial = append(f.partial, b...)
	for {
		i := bytes.IndexByte(f.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := f.partial[:i+1]
		f.partial = f.partial[i+1:]
		if err := f.pass(line); err != nil {
			return len(b), err
		}
	}
}

// flush passes on a last line with no newline.
func (f *nodeRows) flush() {
	if len(f.partial) > 0 {
		_ = f.pass(append(f.partial, '\n'))
		f.partial = nil
	}
}

func (f *nodeRows) pass(line []byte) error {
	fields := strings.Fields(string(line))
	if len(fields) == 0 || (fields[0] != "NODE" && fields[0] != f.node) {
		return nil
	}
	_, err := f.out.Write(line)
	return err
}
