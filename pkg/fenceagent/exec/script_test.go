package exec_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/plugin"
)

const testPassword = "Fence-pw-3b91d7e0"

// fenceScript is a FenceAgentAPI agent in sh. Its "device" is the file named by
// the state_file key: "on", "off", or "stopping" (powered off but still reading
// on once, like a server that takes a moment to go down). It logs its argv, the
// stdin keys (never values) and its environment next to that file, and refuses
// a wrong password, so a passing call proves the password arrived on stdin.
// mode=liar acknowledges off and on without doing anything; mode=broken fails
// every status, echoing the password; mode=hang makes status hang.
const fenceScript = `#!/bin/sh
action= state= password= plug= mode= keys=
while IFS= read -r line || [ -n "$line" ]; do
	key=${line%%=*}
	val=${line#*=}
	keys="$keys $key"
	case $key in
	action) action=$val ;;
	state_file) state=$val ;;
	password) password=$val ;;
	plug) plug=$val ;;
	mode) mode=$val ;;
	esac
done
[ -n "$state" ] || { echo "no state_file" >&2; exit 1; }
{
	echo "argv: $0 $*"
	echo "keys:$keys"
	echo "env: $(env | sort | tr '\n' ' ')"
	echo "action: $action plug: $plug"
} >>"$state.log"
if [ "$password" != "%s" ]; then
	echo "login denied" >&2
	exit 1
fi
case $action in
off)
	[ "$mode" = liar ] || echo stopping >"$state"
	;;
on)
	[ "$mode" = liar ] || echo on >"$state"
	;;
status|monitor)
	[ "$mode" = hang ] && sleep 30
	[ "$mode" = broken ] && { echo "device says: $password is not welcome" >&2; exit 1; }
	case $(cat "$state") in
	off) exit 2 ;;
	stopping) echo off >"$state"; exit 0 ;;
	*) exit 0 ;;
	esac
	;;
*)
	echo "unknown action $action" >&2
	exit 1
	;;
esac
exit 0
`

// device is one simulated fence device: the script and its state file.
type device struct {
	script string
	state  string
}

func newDevice(t *testing.T, power string) device {
	t.Helper()
	dir := t.TempDir()
	d := device{script: filepath.Join(dir, "fence_test"), state: filepath.Join(dir, "power")}
	if err := os.WriteFile(d.script, []byte(fmt.Sprintf(fenceScript, testPassword)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.state, []byte(power+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d device) request() plugin.Request {
	return plugin.Request{
		Node:   "node-a",
		Target: "node-a-plug",
		Params: map[string]string{
			"script": d.script, "state_file": d.state,
			"verify_timeout": "5s", "poll_interval": "20ms",
		},
		Secrets: map[string]string{"password": testPassword},
		Epoch:   4,
	}
}

// observe reads the device's power file, never the agent.
func (d device) observe() (plugin.PowerState, error) {
	b, err := os.ReadFile(d.state)
	if err != nil {
		return plugin.StateUnknown, err
	}
	switch strings.TrimSpace(string(b)) {
	case "off", "stopping":
		return plugin.StateOff, nil
	case "on":
		return plugin.StateOn, nil
	default:
		return plugin.StateUnknown, nil
	}
}

func (d device) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(d.state + ".log")
	if err != nil {
		t.Fatalf("read script log: %v", err)
	}
	return string(b)
}
