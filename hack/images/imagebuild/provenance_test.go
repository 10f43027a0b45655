package imagebuild

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestProvenance: the predicate a release writes names the commit, the lock file's and
// go.sum's SHA-256, the builder with its Go, and the parameters, under the field names of
// SLSA v1 provenance.
func TestProvenance(t *testing.T) {
	o := ReleaseOptions{Src: repoRoot, Version: "v0.2.0", Registry: "registry.example/kubefence"}
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := ProvenanceInput{Commit: "0123abcd", Uncommitted: true, GoVersion: "go1.26.8", ImageRevision: "4567ef-dirty", Started: started}
	p, err := NewProvenance(o, in, started.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	file, err := WriteProvenance(t.TempDir(), p)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		BuildDefinition struct {
			ExternalParameters struct {
				Version, Registry, Source string
				Platforms                 []string
				Uncommitted               bool `json:"uncommittedChanges"`
			}
			ResolvedDependencies []struct {
				URI, Name string
				Digest    map[string]string
			}
		}
		RunDetails struct {
			Builder struct {
				ID      string
				Version map[string]string
			}
			Metadata struct{ StartedOn, FinishedOn string }
		}
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	bd, rd := got.BuildDefinition, got.RunDetails
	ep := bd.ExternalParameters
	if ep.Version != "v0.2.0" || ep.Registry != o.Registry || ep.Source != SourceURI+"@0123abcd" || !ep.Uncommitted ||
		!slices.Equal(ep.Platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("externalParameters: %+v", ep)
	}
	if rd.Builder.ID != BuilderID || rd.Builder.Version["go"] != "go1.26.8" || rd.Metadata.StartedOn != "2026-01-02T03:04:05Z" || rd.Metadata.FinishedOn != "2026-01-02T03:05:05Z" {
		t.Errorf("runDetails: %+v", rd)
	}
	want := map[string]string{"gitCommit": "0123abcd"}
	for _, f := range []string{LockFile, "go.sum"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want[f] = hex.EncodeToString(sum[:])
	}
	if len(bd.ResolvedDependencies) != 3 || bd.ResolvedDependencies[0].URI != SourceURI {
		t.Fatalf("resolvedDependencies: %+v", bd.ResolvedDependencies)
	}
	for _, d := range bd.ResolvedDependencies {
		if v := d.Digest["gitCommit"] + d.Digest["sha256"]; (d.Name == "" && v != want["gitCommit"]) || (d.Name != "" && v != want[d.Name]) {
			t.Errorf("resolvedDependencies: %s %s: %v, want %v", d.URI, d.Name, d.Digest, want)
		}
	}
}
