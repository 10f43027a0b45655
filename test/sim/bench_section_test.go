package sim

import "testing"

func TestWithSection(t *testing.T) {
	t.Parallel()
	b, e := sectionMarkers("x")
	doc := "head\n" + b + "\nold\n" + e + "\ntail\n"
	if got, want := WithSection(doc, "x", "new\n"), "head\n"+b+"\nnew\n"+e+"\ntail\n"; got != want {
		t.Errorf("replace: got %q, want %q", got, want)
	}
	if got, want := WithSection("head\n", "x", "new"), "head\n\n"+b+"\nnew\n"+e+"\n"; got != want {
		t.Errorf("append: got %q, want %q", got, want)
	}
	if got := WithSection(doc, "x", ""); got != doc {
		t.Errorf("empty body changed the doc: %q", got)
	}
	if got, want := Section(doc, "x"), b+"\nold\n"+e; got != want {
		t.Errorf("Section = %q, want %q", got, want)
	}
	if got := Section("no markers", "x"); got != "" {
		t.Errorf("Section of a doc without markers = %q", got)
	}
}
