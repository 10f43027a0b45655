package configfile

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzDecodeConfig: no input makes the decoder panic or hang, an error never quotes more
// of a value than maxQuoted bytes, and every configuration it accepts is valid and reads
// back the same after it is written out. The seeds are the valid base, every bad
// configuration of TestBadConfigs but the 10 MiB one, and the files of
// TestSyntaxErrorsNameTheirLine; `go test` runs them, `make fuzz` explores from them.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte(minimal))
	for _, tc := range syntaxConfigs {
		f.Add([]byte(strings.Replace(valid, tc.old, tc.new, 1)))
	}
	for _, tc := range badConfigs {
		doc := tc.new
		if tc.old != "" {
			doc = strings.Replace(valid, tc.old, tc.new, 1)
		}
		if len(doc) < 1<<16 {
			f.Add([]byte(doc))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, _, err := Decode(data)
		if err != nil {
			if long := strings.Repeat("x", maxQuoted+1); strings.Contains(string(data), long) && strings.Contains(err.Error(), long) {
				t.Fatalf("the error quotes more than %d bytes of a value: %.200s", maxQuoted, err)
			}
			return
		}
		if errs := cfg.Validate(); len(errs) > 0 {
			t.Fatalf("accepted a configuration that does not validate: %v", errs)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal an accepted configuration: %v", err)
		}
		again, _, err := Decode(out)
		if err != nil {
			t.Fatalf("an accepted configuration, written out, is refused: %v\n%s", err, out)
		}
		if back, _ := yaml.Marshal(again); string(back) != string(out) {
			t.Fatalf("round trip changed the configuration:\n%s\nbecame\n%s", out, back)
		}
	})
}
