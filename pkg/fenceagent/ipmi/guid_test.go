package ipmi

import "testing"

func TestSameGUID(t *testing.T) {
	const sent = "a082c1f1-5e78-c99b-ac2c-69bf6acea05e"
	tests := map[string]struct {
		node string
		want bool
	}{
		"as sent":                 {node: sent, want: true},
		"upper case, no dashes":   {node: "A082C1F15E78C99BAC2C69BF6ACEA05E", want: true},
		"smbios":                  {node: "F1C182A0-785E-9BC9-AC2C-69BF6ACEA05E", want: true},
		"ipmi reversed":           {node: "5ea0ce6a-bf69-2cac-9bc9-785ef1c182a0", want: true},
		"one digit off":           {node: "a082c1f1-5e78-c99b-ac2c-69bf6acea05f", want: false},
		"last fields swapped too": {node: "f1c182a0-785e-9bc9-2cac-69bf6acea05e", want: false},
		"not a uuid":              {node: "node-1", want: false},
		"short":                   {node: "a082c1f1", want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, got := sameGUID(sent, tc.node); got != tc.want {
				t.Errorf("sameGUID(%s, %s) = %v, want %v", sent, tc.node, got, tc.want)
			}
		})
	}
}
