package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kubefence/kubefence/pkg/testpoint"
)

// PlantedBug is a change to the controller's own source, compiled into a test build with
// `go build -overlay`, so that the chaos runner can show it catches the bug. The product
// source carries no hook for it.
type PlantedBug struct {
	// File is the source file, from the module root.
	File string
	// From is a line that must be in File; To replaces it.
	From, To string
}

// PlantedBugs by name.
var PlantedBugs = map[string]PlantedBug{
	// nofloor: the detector takes the policy's threshold as it is, without the evidence
	// floor (safety invariant 10): a PodDisruptionBudget or a toleration then makes a
	// node that merely has not renewed yet look dead.
	"nofloor": {File: "pkg/detector/detector.go",
		From: "obs := assess(st, node.Name, ready, now, max(leaseStaleAfter, floor), notReadyAfter, floor, d.th.Heartbeats, evidence)",
		To:   "obs := assess(st, node.Name, ready, now, leaseStaleAfter, notReadyAfter, 0*floor, d.th.Heartbeats, evidence)"},
	// unguardedundo: an Unfence goes out without the Lease check after a possible pause
	// (safety invariant 11): a leader that slept there gives a node back the storage its
	// successor cut again.
	"unguardedundo": {File: "pkg/controller/recover.go",
		From: "	if err := c.lead.guard.Confirmed(ctx); err != nil {",
		To:   "	if err := error(nil); err != nil {"},
	// unpinned: the read back goes to the target the node's mapping names now, not the one
	// the Fence went to: a mapping edited mid-fence to a switched-off machine verifies a
	// running node.
	"unpinned": {File: "pkg/controller/call.go",
		From: "	return c.caller.Call(ctx, step, node, target, nf.Name, c.lead.guard.Epoch(), deadline)",
		To:   "	return c.caller.Call(ctx, step, node, target[:0], nf.Name, c.lead.guard.Epoch(), deadline)"},
	// resend: a Fence call found in flight (its outcome lost to a handover or a failed
	// save) is sent again at once instead of read back (safety invariant 7): against a
	// slow BMC the second off is asked while the first is pending.
	"resend": {File: "pkg/fencer/machine.go",
		From: "		if a.State == v1alpha1.AttemptFencing && agent == v1alpha1.WatchdogAgent {",
		To:   "		if a.State == v1alpha1.AttemptFencing {"},
	// resendunknown: a Fence call whose outcome is unknown, found in flight or not yet
	// read back (Verifying, as an older release or another leader left it), is sent again
	// instead of read back until its deadline (safety invariant 7): against a slow BMC the
	// second off is asked while the first is pending.
	"resendunknown": {File: "pkg/fencer/machine.go",
		From: "		if a.State == v1alpha1.AttemptFencing && agent == v1alpha1.WatchdogAgent {",
		To:   "		if a.State == v1alpha1.AttemptFencing || a.State == v1alpha1.AttemptVerifying {"},
}

// PlantOverlay writes into dir the patched source and the `go build -overlay` file that
// plant the named bug, and returns the overlay file's path. It fails if the bug's line is
// no longer in the source exactly once.
func PlantOverlay(dir, name string) (string, error) {
	bug, ok := PlantedBugs[name]
	if !ok {
		return "", fmt.Errorf("no planted bug %q", name)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, bug.File)
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	if strings.Count(string(b), bug.From) != 1 {
		return "", fmt.Errorf("planted bug %s: %s no longer holds the line %q once", name, bug.File, bug.From)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	patched := filepath.Join(dir, "planted-"+filepath.Base(bug.File))
	if err := os.WriteFile(patched, []byte(strings.Replace(string(b), bug.From, bug.To, 1)), 0o644); err != nil {
		return "", err
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {src: patched}})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	return ov, os.WriteFile(ov, overlay, 0o644)
}

// BuildPlantedBinaries is BuildScenarioBinaries with the named bug planted in the
// controller. It fails if the bug's line is no longer in the source, rather than build an
// unchanged controller that would make the check pass for nothing.
func BuildPlantedBinaries(ctx context.Context, dir, name string) error {
	ov, err := PlantOverlay(dir, name)
	if err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if err := BuildScenarioBinaries(ctx, dir); err != nil {
		return err
	}
	// The tag as BuildScenarioBinaries': the chaos scenarios pause a leader too.
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", testpoint.BuildTag, "-overlay", ov, "-o", dir+string(os.PathSeparator), "./cmd/fence-controller")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build fence-controller with planted bug %s: %w\n%s", name, err, out)
	}
	return nil
}
