package configfile

import (
	"strings"
	"testing"
)

// TestSyntaxErrorsNameTheirLine: a file that is not YAML, or holds a value JSON cannot
// carry, is refused with the line (and the column and field path where they are known)
// of the mistake, each case at a place in the valid base.
func TestSyntaxErrorsNameTheirLine(t *testing.T) {
	for name, tc := range syntaxConfigs {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(valid, tc.old) {
				t.Fatalf("%q is not in the valid base", tc.old)
			}
			_, err := Parse([]byte(strings.Replace(valid, tc.old, tc.new, 1)))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// syntaxConfigs are files that are not YAML, or hold a value JSON cannot carry, each with
// the exact error; a case is the valid base with old replaced by new (the first time).
var syntaxConfigs = map[string]struct {
	old, new, want string
}{
	"control character in a quoted value": {"- name: default", "- name: \"de\x01fault\"",
		`config: line 17, column 12: control character U+0001 is not allowed in YAML; inside a double-quoted string write it as \u0001`},
	"control character in a comment": {"policies:", "# a\x1bcomment\npolicies:",
		`config: line 16, column 4: control character U+001B is not allowed in YAML; inside a double-quoted string write it as \u001B`},
	"DEL character": {"timeout: 30s", "timeout: 30s\x7f",
		`config: line 11, column 15: control character U+007F is not allowed in YAML; inside a double-quoted string write it as \u007F`},
	"not UTF-8": {"- name: default", "- name: d\xe9fault",
		"config: line 17, column 10: byte 0xe9 is not UTF-8; save the file as UTF-8"},
	"unknown anchor": {"  budget: {maxConcurrent: 10", "  budget: {maxConcurrent: *nope",
		"config: line 24, column 27: yaml: unknown anchor 'nope' referenced"},
	"unknown anchor in block style": {"    retries: 1", "    retries: *nope",
		"config: line 23, column 14: yaml: unknown anchor 'nope' referenced"},
	"infinite duration": {"timeout: 30s", "timeout: .inf",
		"config: line 11, column 12 (agents[0].timeout): .inf is not a finite number; quote it if it is meant as a word (json: unsupported value: +Inf)"},
	"not a number": {"retries: 1", "retries: .NaN",
		"config: line 23, column 14 (policies[0].levels[0].retries): .NaN is not a finite number; quote it if it is meant as a word (json: unsupported value: NaN)"},
	"negative infinity in a flow mapping": {"maxConcurrent: 10", "maxConcurrent: -.inf",
		"config: line 24, column 27 (policies[0].budget.maxConcurrent): -.inf is not a finite number; quote it if it is meant as a word (json: unsupported value: -Inf)"},
	"number too large": {"retries: 1", "retries: 1e400",
		`config: policies[0].levels[0].retries: Invalid value: "1e400": must be a whole number`},
	"list as a map key": {"policies:", "? [a, b]\n: c\npolicies:",
		"config: line 16, column 3: a key must be a plain word, not a list or a mapping (yaml: invalid map key: []interface {}{\"a\", \"b\"})"},
	"binary that is not base64": {"policies:", "pluginDir: !!binary '%%%'\npolicies:",
		"config: line 16, column 12 (pluginDir): the !!binary value is not base64 (yaml: !!binary value contains invalid base64 data)"},
	"alias of its own anchor": {"policies:", "dryRun: &a [*a]\npolicies:",
		"config: line 16, column 13: yaml: anchor 'a' value contains itself"},
	"float tag on a word": {"policies:", "paused: !!float yes\npolicies:",
		"config: line 16, column 9 (paused): \"yes\" is tagged !!float but is not a number (yaml: cannot decode !!bool `yes` as a !!float)"},
	"unclosed flow mapping": {"maxUnhealthy: 40%, cooldown: 10m}", "maxUnhealthy: 40%, cooldown: 10m",
		"config: yaml: line 24: did not find expected ',' or '}'"},
	"tab indentation": {"  name: kubefence-controller", "\tname: kubefence-controller",
		"config: yaml: line 5: found a tab character that violates indentation"},
	"duplicate key": {"  timeout: 30s", "  timeout: 30s\n  timeout: 40s",
		"config: yaml: unmarshal errors:\n  line 12: key \"timeout\" already set in map"},
}
