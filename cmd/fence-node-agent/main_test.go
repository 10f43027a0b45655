package main

import (
	"fmt"
	"testing"

	"github.com/kubefence/kubefence/pkg/watchdog"
)

// TestDevice: --watchdog takes a device of the Linux watchdog API only beside peers, an
// emulated one with or without them, and names the flag when it refuses. Nothing is
// opened: arming is the feeder's, once the node may live.
func TestDevice(t *testing.T) {
	for _, c := range []struct {
		spec  string
		peers bool
		want  string
	}{
		{"", false, "<nil>"},
		{"/dev/watchdog", true, "*watchdog.Linux /dev/watchdog nowayout allowed false"},
		{"/dev/watchdog", false, "error: --watchdog /dev/watchdog: a watchdog device needs --peer-bind-address: without peers, an API server outage longer than --isolation resets every node"},
		{"unix:/run/wd.sock", false, "*watchdog.Socket /run/wd.sock"},
		{"unix:", true, "error: --watchdog: watchdog device \"unix:\": no socket path after unix:"},
	} {
		d, err := device(c.spec, c.peers, false)
		got := "<nil>"
		switch d := d.(type) {
		case *watchdog.Linux:
			got = fmt.Sprintf("%T %s nowayout allowed %t", d, d.Path, d.AllowNowayout)
		case *watchdog.Socket:
			got = fmt.Sprintf("%T %s", d, d.Path)
		}
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != c.want {
			t.Errorf("device(%q, peers %v): %s\nwant %s", c.spec, c.peers, got, c.want)
		}
	}
	if d, err := device("/dev/watchdog", true, true); err != nil || !d.(*watchdog.Linux).AllowNowayout {
		t.Errorf("--watchdog-allow-nowayout: %+v, %v; want the device to allow nowayout", d, err)
	}
}
