package imagebuild

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubefence/kubefence/test/sim/bmc"
)

// inRootfs runs a command with root as its root directory, as a container would, with
// the environment the IPMI agent gives ipmitool.
func inRootfs(t *testing.T, root string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{"LC_ALL=C", PathEnv}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestIpmitoolRunsInRootfs writes the image's root filesystem to a directory and runs
// its ipmitool there, chrooted, so that nothing of this machine helps it: first -V,
// then the IPMI agent's own call, lanplus "chassis power status" against a simulated
// BMC reached by a host name.
func TestIpmitoolRunsInRootfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chroot needs root: run this test as root")
	}
	root := t.TempDir()
	base, err := BaseTree(Arches[0], lockedDebs(t, "amd64"), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := base.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := inRootfs(t, root, Ipmitool, "-V")
	if err != nil || !strings.HasPrefix(out, "ipmitool version ") {
		t.Fatalf("chroot %s %s -V: %v\nstdout: %s\nstderr: %s", root, Ipmitool, err, out, errOut)
	}
	t.Logf("in the image: %s", strings.TrimSpace(out))

	sim, err := bmc.StartIPMI(context.Background(), bmc.IPMIOptions{Dir: t.TempDir(), PoweredOn: true})
	if err != nil {
		t.Fatalf("start a simulated BMC (hack/deps.sh installs ipmi_sim): %v", err)
	}
	t.Cleanup(func() {
		if err := sim.Stop(); err != nil {
			t.Errorf("stop bmc: %v", err)
		}
	})
	// What the kubelet mounts into a pod: /etc/hosts. The name goes through
	// nsswitch.conf and glibc's built-in files service.
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("127.0.0.1 bmc.kubefence.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent passes the password in a 0600 file under /tmp.
	if err := os.WriteFile(filepath.Join(root, "tmp/pw"), []byte(sim.Password()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = inRootfs(t, root, Ipmitool, "-I", "lanplus", "-C", "3",
		"-H", "bmc.kubefence.test", "-p", strconv.Itoa(sim.Port()), "-U", sim.User(), "-f", "/tmp/pw",
		"-N", "1", "-R", "1", "chassis", "power", "status")
	if err != nil || strings.TrimSpace(out) != "Chassis Power is on" {
		t.Fatalf("chassis power status in the image: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	// Whatever ipmitool prints on stderr ends up in the agent's errors.
	if strings.TrimSpace(errOut) != "" {
		t.Errorf("ipmitool in the image complains: %s", errOut)
	}
}

// TestIpmitoolArm64UnderQemu writes the arm64 image's base to a directory and runs its
// ipmitool under qemu-aarch64-static with that directory as its root for libraries and
// files: -V, then the IPMI agent's lanplus call against a simulated BMC.
func TestIpmitoolArm64UnderQemu(t *testing.T) {
	root := t.TempDir()
	a, err := ArchNamed("arm64")
	if err != nil {
		t.Fatal(err)
	}
	base, err := BaseTree(a, lockedDebs(t, a.Name), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := base.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd, err := QemuCommand(ctx, root, args...)
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	out, errOut, err := run(Ipmitool, "-V")
	if err != nil || !strings.HasPrefix(out, "ipmitool version ") {
		t.Fatalf("%s %s -V: %v\nstdout: %s\nstderr: %s", Qemu, Ipmitool, err, out, errOut)
	}
	t.Logf("arm64, under %s: %s", Qemu, strings.TrimSpace(out))

	sim, err := bmc.StartIPMI(context.Background(), bmc.IPMIOptions{Dir: t.TempDir(), PoweredOn: true})
	if err != nil {
		t.Fatalf("start a simulated BMC (hack/deps.sh installs ipmi_sim): %v", err)
	}
	t.Cleanup(func() {
		if err := sim.Stop(); err != nil {
			t.Errorf("stop bmc: %v", err)
		}
	})
	pw := filepath.Join(root, "tmp", "pw")
	if err := os.WriteFile(pw, []byte(sim.Password()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = run(Ipmitool, "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", strconv.Itoa(sim.Port()),
		"-U", sim.User(), "-f", "/tmp/pw", "-N", "1", "-R", "1", "chassis", "power", "status")
	if err != nil || strings.TrimSpace(out) != "Chassis Power is on" {
		t.Fatalf("arm64 chassis power status: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if strings.TrimSpace(errOut) != "" {
		t.Errorf("arm64 ipmitool complains: %s", errOut)
	}
}
