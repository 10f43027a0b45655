package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

const (
	source    = "../../pkg/apis/fencing/v1alpha1/config_types.go"
	reference = "../../docs/configuration.md"
)

// TestReferenceUpToDate fails when docs/configuration.md no longer matches the config
// types' doc comments.
func TestReferenceUpToDate(t *testing.T) {
	want, err := Generate(source)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(reference)
	if err != nil {
		t.Fatalf("%v (run make docs)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run make docs", reference)
	}
}

// TestSections checks that the reference covers the file's main types.
func TestSections(t *testing.T) {
	doc, err := Generate(source)
	if err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"## Config", "## Agent", "## Policy", "## Level", "## Budget", "## RemediationStrategy"} {
		if !strings.Contains(string(doc), section+"\n") {
			t.Errorf("reference lacks %q", section)
		}
	}
	if !strings.HasPrefix(string(doc), "# Configuration reference\n") || !strings.Contains(string(doc), "[Policy](#policy)") {
		t.Error("reference lacks its title or the links between types")
	}
}
