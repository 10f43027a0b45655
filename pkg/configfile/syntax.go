package configfile

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// +k8s:deepcopy-gen=false

// SyntaxError is a configuration file that does not read as YAML, or holds a value that
// JSON (and so the configuration's types) cannot carry, placed in the file: an operator
// who edits a 200-line ConfigMap needs the line, not "control characters are not allowed".
type SyntaxError struct {
	// Line and Column count from 1; Column is 0 where only the line is known.
	Line, Column int
	// Path is the field the value sits at, where the YAML got that far; nil otherwise.
	Path *field.Path
	// Err is what the YAML or JSON library said.
	Err error
}

func (e *SyntaxError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d", e.Line)
	if e.Column > 0 {
		fmt.Fprintf(&b, ", column %d", e.Column)
	}
	if e.Path != nil {
		fmt.Fprintf(&b, " (%s)", e.Path)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *SyntaxError) Unwrap() error { return e.Err }

var (
	unknownAnchor = regexp.MustCompile(`unknown anchor '([^']*)' referenced|anchor '([^']*)' value contains itself`)
	hasLine       = regexp.MustCompile(`\bline \d+\b`)
)

// placeSyntaxError returns err placed at its line in data, with its field path where
// one is known. The YAML library names the line of most syntax errors itself; for the
// rest (a control character, an alias of no anchor, a number JSON cannot carry, a map
// key that is not a string) the place is found here. An error that cannot be placed is
// returned as it is.
func placeSyntaxError(data []byte, err error) error {
	msg := err.Error()
	if hasLine.MatchString(msg) {
		return err
	}
	if strings.Contains(msg, "control characters") || strings.Contains(msg, "UTF-8") || strings.Contains(msg, "Unicode") {
		if e := badCharacter(data); e != nil {
			return e
		}
	}
	if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
		name := m[1] + m[2]
		if line, col, ok := findAlias(data, name); ok {
			return &SyntaxError{Line: line, Column: col, Err: err}
		}
		return err
	}
	var root yaml3.Node
	if yaml3.Unmarshal(data, &root) != nil {
		return err
	}
	if n, p, why := findUnencodable(&root, nil); n != nil {
		return &SyntaxError{Line: n.Line, Column: n.Column, Path: p, Err: fmt.Errorf("%s (%w)", why, err)}
	}
	return err
}

// badCharacter finds the first character YAML does not allow: the C0 controls but tab,
// line feed and carriage return, DEL and the C1 controls but NEL, surrogates, U+FFFE and
// U+FFFF, and bytes that are not UTF-8.
func badCharacter(data []byte) error {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return &SyntaxError{Line: line, Column: col, Err: fmt.Errorf("byte 0x%02x is not UTF-8; save the file as UTF-8", data[i])}
		case !yamlPrintable(r):
			return &SyntaxError{Line: line, Column: col, Err: fmt.Errorf(
				"control character %U is not allowed in YAML; inside a double-quoted string write it as \\u%04X", r, r)}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += size
	}
	return nil
}

// yamlPrintable is YAML 1.1's c-printable set, which the parser enforces.
func yamlPrintable(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || (r >= 0x20 && r <= 0x7e) || r == 0x85 ||
		(r >= 0xa0 && r <= 0xd7ff) || (r >= 0xe000 && r <= 0xfffd) || (r >= 0x10000 && r <= 0x10ffff)
}

// findAlias finds the first "*name" that stands as an alias: after white space, a flow
// indicator or the start of a line, and followed by one or the end of the line.
func findAlias(data []byte, name string) (int, int, bool) {
	alias := []byte("*" + name)
	for i, line := range bytes.Split(data, []byte("\n")) {
		for from := 0; ; {
			j := bytes.Index(line[from:], alias)
			if j < 0 {
				break
			}
			j += from
			end := j + len(alias)
			if (j == 0 || bytes.ContainsAny(line[j-1:j], " \t[{,:-")) && (end == len(line) || bytes.ContainsAny(line[end:end+1], " \t]},\r#")) {
				return i + 1, utf8.RuneCount(line[:j]) + 1, true
			}
			from = j + 1
		}
	}
	return 0, 0, false
}

// findUnencodable walks the document for the first value the YAML-to-JSON step
// refuses: a number that is infinite or not a number, a !!binary that is not base64,
// and a map key that is a list or a mapping. It returns the node, its field path and
// what is wrong with it.
func findUnencodable(n *yaml3.Node, p *field.Path) (*yaml3.Node, *field.Path, string) {
	var kids []*yaml3.Node
	var paths []*field.Path
	switch n.Kind {
	case yaml3.DocumentNode:
		kids, paths = n.Content, make([]*field.Path, len(n.Content))
	case yaml3.SequenceNode:
		kids = n.Content
		for i := range kids {
			paths = append(paths, indexPath(p, i))
		}
	case yaml3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml3.ScalarNode {
				return k, p, "a key must be a plain word, not a list or a mapping"
			}
			kids, paths = append(kids, n.Content[i+1]), append(paths, child(p, short(k.Value)))
		}
	case yaml3.ScalarNode:
		if why := unencodableScalar(n); why != "" {
			return n, p, why
		}
	}
	for i, c := range kids {
		if bad, bp, why := findUnencodable(c, paths[i]); bad != nil {
			return bad, bp, why
		}
	}
	return nil, nil, ""
}

func indexPath(p *field.Path, i int) *field.Path {
	if p == nil {
		return field.NewPath("").Index(i)
	}
	return p.Index(i)
}

// unencodableScalar says what is wrong with .inf, -.inf and .nan, a number too large
// for a float, a !!float tag on what is no number, and !!binary that does not decode;
// "" for a scalar JSON carries.
func unencodableScalar(n *yaml3.Node) string {
	switch n.ShortTag() {
	case "!!float":
		v := strings.ToLower(strings.TrimLeft(n.Value, "+-"))
		if v == ".inf" || v == ".nan" {
			return fmt.Sprintf("%s is not a finite number; quote it if it is meant as a word", n.Value)
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if math.IsInf(f, 0) {
			return fmt.Sprintf("%s is too large a number", short(n.Value))
		}
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return fmt.Sprintf("%q is tagged !!float but is not a number", short(n.Value))
		}
	case "!!binary":
		if _, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), "")); err != nil {
			return "the !!binary value is not base64"
		}
	}
	return ""
}
