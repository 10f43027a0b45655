package imagebuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/testpoint"
)

// TestNoTestpoints: a binary built with the test pause points' tag is refused, one built
// without it passes; the tag is pkg/testpoint's.
func TestNoTestpoints(t *testing.T) {
	if TestpointsTag != testpoint.BuildTag {
		t.Fatalf("TestpointsTag = %q, pkg/testpoint.BuildTag = %q", TestpointsTag, testpoint.BuildTag)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		tags    string
		refused bool
	}{
		"release":           {},
		"other tags":        {tags: "netgo,osusergo"},
		"test pause points": {tags: "netgo," + TestpointsTag, refused: true},
	} {
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			// A small command of this module: what counts is the build's settings.
			cmd := exec.CommandContext(ctx, "go", "build", "-tags", tc.tags, "-o", bin, "./hack/checkbounds")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			err := noTestpoints(bin)
			if (err != nil) != tc.refused {
				t.Errorf("noTestpoints = %v, want refused: %v", err, tc.refused)
			}
		})
	}
}
