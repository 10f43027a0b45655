package agentkit

import (
	"maps"
	"slices"
	"strings"
)

// redacted stands where Scrub removed a secret.
const redacted = "<redacted>"

// Missing returns those of keys whose value in secrets is empty or absent, in the order
// of keys. It names keys only, never values.
func Missing(secrets map[string]string, keys ...string) []string {
	var missing []string
	for _, k := range keys {
		if secrets[k] == "" {
			missing = append(missing, k)
		}
	}
	return missing
}

// Values returns the non-empty values of secrets in the order of their keys: what
// Scrub and NewEvidence take.
func Values(secrets map[string]string) []string {
	var vs []string
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		if v := secrets[k]; v != "" {
			vs = append(vs, v)
		}
	}
	return vs
}

// Scrub returns text with every occurrence of each secret replaced by "<redacted>",
// for text that came back from a device, a tool or a library, which may echo what it
// was given. Empty secrets are ignored. Occurrences that overlap or touch, of one
// secret or of several, become one marker, so that no piece of a secret is left
// between two markers whatever the order of secrets. A mangled message is better than
// a leaked secret.
func Scrub(text string, secrets ...string) string {
	var hidden []bool
	for _, s := range secrets {
		if s == "" {
			continue
		}
		for from := 0; ; {
			i := strings.Index(text[from:], s)
			if i < 0 {
				break
			}
			if hidden == nil {
				hidden = make([]bool, len(text))
			}
			at := from + i
			for k := at; k < at+len(s); k++ {
				hidden[k] = true
			}
			from = at + 1
		}
	}
	if hidden == nil {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		if !hidden[i] {
			b.WriteByte(text[i])
			i++
			continue
		}
		b.WriteString(redacted)
		for i < len(text) && hidden[i] {
			i++
		}
	}
	return b.String()
}
