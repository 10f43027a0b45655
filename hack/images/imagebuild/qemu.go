package imagebuild

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// Qemu is the user-mode emulator that runs an arm64 binary on another machine: Debian's
// qemu-user-static, which hack/deps.sh installs.
const Qemu = "qemu-aarch64-static"

// QemuHint says how to get Qemu.
const QemuHint = "apt-get install qemu-user-static (hack/deps.sh installs it)"

// QemuCommand runs args[0], a path inside the arm64 root filesystem root, under Qemu,
// with root as the prefix of every absolute path it opens (-L): its dynamic loader and
// libraries, and files such as /etc/hosts, are the image's and not this machine's.
func QemuCommand(ctx context.Context, root string, args ...string) (*exec.Cmd, error) {
	bin, err := exec.LookPath(Qemu)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, QemuHint)
	}
	qargs := append([]string{"-L", root, filepath.Join(root, args[0])}, args[1:]...)
	cmd := exec.CommandContext(ctx, bin, qargs...)
	cmd.Env = []string{"LC_ALL=C", PathEnv}
	return cmd, nil
}
