package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// RunbookPlaceholder is a placeholder of docs/runbooks.md, a whole word, for the test to
// fill in: $KUBECONFIG stays the shell's.
var RunbookPlaceholder = regexp.MustCompile(`\b(NAMESPACE|NAME|NODE|AGENT|OLDNODE|OLDNAME|PERSON)\b`)

// RunbookWatch is a runbook's watch (kubectl get -w), which runs until the person stops
// it: tests replace it with `timeout 3 $1 || test $$? -eq 124$2`.
var RunbookWatch = regexp.MustCompile(`(?m)^(kubectl [^#\n]* -w)( *#.*)?$`)

var (
	shBlock    = regexp.MustCompile("(?ms)^( *)```sh\n(.*?)^ *```")
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
)

// Runbooks are docs/runbooks.md's sh blocks, dedented, as an operator pastes them, and the
// kubectl and fence-controller commands its text tells of that no block runs (Untold).
type Runbooks struct {
	Blocks []string
	Untold []string
}

// ReadRunbooks reads docs/runbooks.md of the module's tree.
func ReadRunbooks() (Runbooks, error) {
	var r Runbooks
	root, err := ModuleRoot()
	if err != nil {
		return r, err
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		return r, err
	}
	for _, m := range shBlock.FindAllStringSubmatch(string(doc), -1) {
		var lines []string
		for _, l := range strings.Split(m[2], "\n") {
			lines = append(lines, strings.TrimPrefix(l, m[1]))
		}
		r.Blocks = append(r.Blocks, strings.Join(lines, "\n"))
	}
	if len(r.Blocks) < 10 {
		return r, fmt.Errorf("docs/runbooks.md has %d sh blocks", len(r.Blocks))
	}
	text := shBlock.ReplaceAllString(string(doc), "")
	commands := strings.Join(r.Blocks, "\n")
	for _, m := range inlineCode.FindAllStringSubmatch(text, -1) {
		cmd := m[1]
		if (strings.HasPrefix(cmd, "kubectl ") || strings.HasPrefix(cmd, "fence-controller ")) && !strings.Contains(commands, cmd) {
			r.Untold = append(r.Untold, cmd)
		}
	}
	return r, nil
}

// Block is the first of the blocks that contains every one of lines, "" when none does.
func (r Runbooks) Block(lines ...string) string {
	for _, b := range r.Blocks {
		all := true
		for _, l := range lines {
			all = all && strings.Contains(b, l)
		}
		if all {
			return b
		}
	}
	return ""
}
