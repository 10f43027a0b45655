package imagebuild

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGenerateLock runs make debian-lock's generator against this machine's apt: for each
// architecture it finds the same packages as the committed lock (their versions may have
// moved on since), and the image builds from what it locked.
func TestGenerateLock(t *testing.T) {
	out, err := exec.Command("dpkg", "--print-foreign-architectures").Output()
	if err != nil || !slices.Contains(strings.Fields(string(out)), "arm64") {
		t.Fatalf("apt must know arm64 packages (%v): dpkg --add-architecture arm64 && apt-get update (hack/deps.sh does)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := Fetcher{Dir: filepath.Join(repoRoot, DebianCacheDir)}
	var log strings.Builder
	got, err := GenerateLock(ctx, Apt(), f, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	committed, err := ReadLock(filepath.Join(repoRoot, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	names := func(l Lock, arch string) []string {
		var out []string
		for _, p := range l.For(arch) {
			out = append(out, p.Name+":"+p.Arch)
		}
		slices.Sort(out)
		return out
	}
	for _, a := range Arches {
		if g, c := names(got, a.Name), names(committed, a.Name); !slices.Equal(g, c) {
			t.Errorf("%s: apt gives %v, the lock holds %v", a.Name, g, c)
		}
		var debs []*Deb
		for _, p := range got.For(a.Name) {
			data, err := f.Fetch(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ReadDeb(p, data)
			if err != nil {
				t.Fatal(err)
			}
			debs = append(debs, d)
		}
		if _, err := BaseTree(a, debs, epoch); err != nil {
			t.Errorf("the %s image from the generated lock: %v", a.Name, err)
		}
	}
	t.Logf("generated:\n%s", log.String())
}
