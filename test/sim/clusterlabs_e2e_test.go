package sim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	fenceexec "github.com/kubefence/kubefence/pkg/fenceagent/exec"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// fenceIPMILan is the real ClusterLabs agent (Debian fence-agents, installed by
// hack/deps.sh).
const fenceIPMILan = "/usr/sbin/fence_ipmilan"

func needClusterLabs(t *testing.T, agent string) {
	t.Helper()
	if _, err := os.Stat(agent); err != nil {
		t.Fatalf("%s missing: run hack/deps.sh (apt-get install fence-agents): %v", agent, err)
	}
}

// ipmilanRequest drives fence_ipmilan through the exec agent against b: the address goes
// as the target, the rest as FenceAgentAPI stdin keys, the password as a secret.
func ipmilanRequest(b *bmc.IPMISim, port int, password string) plugin.Request {
	return plugin.Request{Node: "node-1", Target: b.Host(),
		Params: map[string]string{"script": fenceIPMILan, "target_key": "ip", "ipport": strconv.Itoa(port),
			"username": b.User(), "lanplus": "1", "cipher": "3", "power_timeout": "3",
			"verify_timeout": "10s", "poll_interval": "200ms"},
		Secrets: map[string]string{"password": password}}
}

func startBMC(t *testing.T, on bool) *bmc.IPMISim {
	t.Helper()
	b, err := bmc.StartIPMI(context.Background(), bmc.IPMIOptions{Dir: t.TempDir(), PoweredOn: on})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	return b
}

// TestClusterLabsErrorKinds: the real fence_ipmilan and fence_redfish behind the
// exec agent; every failure kind and its message name the cause.
func TestClusterLabsErrorKinds(t *testing.T) {
	t.Parallel()
	needClusterLabs(t, fenceIPMILan)
	b := startBMC(t, true)
	plainHTTP := httptest.NewServer(http.NotFoundHandler())
	defer plainHTTP.Close()
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedPort := refused.Listener.Addr().(*net.TCPAddr).Port
	refused.Close()
	httpPort := plainHTTP.Listener.Addr().(*net.TCPAddr).Port
	redfish := func(port int) plugin.Request {
		return plugin.Request{Node: "node-1", Target: "127.0.0.1",
			Params:  map[string]string{"script": "/usr/sbin/fence_redfish", "target_key": "ip", "ipport": strconv.Itoa(port), "username": "admin", "ssl_insecure": "1"},
			Secrets: map[string]string{"password": "secret"}}
	}
	for name, tc := range map[string]struct {
		req   plugin.Request
		kind  plugin.ErrorKind
		cause string
	}{
		"fence_ipmilan, wrong password":          {ipmilanRequest(b, b.Port(), "wrong-password"), plugin.KindPermanent, "wrong credentials"},
		"fence_ipmilan, unreachable port":        {ipmilanRequest(b, deadUDPPort(t), b.Password()), plugin.KindTargetUnreachable, "did not answer in time"},
		"fence_redfish, plain HTTP":              {redfish(httpPort), plugin.KindPermanent, "plain HTTP"},
		"fence_redfish, nothing listens (https)": {redfish(refusedPort), plugin.KindTargetUnreachable, "connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := fenceexec.New().Status(ctx, tc.req)
			if err == nil {
				t.Fatalf("status succeeded: %+v", res)
			}
			if plugin.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.cause) {
				t.Errorf("err = %v; want kind %s naming %q", err, tc.kind, tc.cause)
			}
			if s := tc.req.Secrets["password"]; strings.Contains(err.Error(), s) {
				t.Errorf("password in the error: %v", err)
			}
			t.Logf("%s: %v", plugin.KindOf(err), err)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := fenceexec.New().Status(ctx, ipmilanRequest(b, b.Port(), b.Password()))
	if err != nil || res.State != plugin.StateOn {
		t.Errorf("status with the right password: %+v, %v", res, err)
	}
}

// TestTimedOutOnLeavesNothingBehind: a power-on through fence_ipmilan whose
// deadline passes mid-call, swept from 100 ms to 2.5 s. After every return no process of
// the call is alive, and the state read back afterwards is the BMC's own.
func TestTimedOutOnLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	needClusterLabs(t, fenceIPMILan)
	b := startBMC(t, false)
	agent := fenceexec.New()
	req := ipmilanRequest(b, b.Port(), b.Password())
	for _, d := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond,
		1500 * time.Millisecond, 2500 * time.Millisecond} {
		if err := b.SetPower(false); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		_, err := agent.Unfence(ctx, req)
		cancel()
		if left := callProcesses(b.Port()); len(left) > 0 {
			t.Fatalf("deadline %s: processes of the call alive after it returned (%v): %v", d, err, left)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		read, rerr := agent.Status(rctx, req)
		rcancel()
		on, perr := b.PoweredOn()
		if rerr != nil || perr != nil {
			t.Fatalf("deadline %s: read back %v, BMC %v", d, rerr, perr)
		}
		want := plugin.StateOff
		if on {
			want = plugin.StateOn
		}
		if read.State != want {
			t.Errorf("deadline %s: read back %s, the BMC says %s", d, read.State, want)
		}
		timedOut := errors.Is(err, context.DeadlineExceeded)
		t.Logf("deadline %s: call returned %v (timed out %v); read back %s, BMC %s", d, err != nil, timedOut, read.State, want)
	}
}

// callProcesses lists the live fence_ipmilan and ipmitool processes that name the BMC's
// port: the processes of a call.
func callProcesses(port int) []string {
	needle := strconv.Itoa(port)
	return liveProcesses(func(argv []string) bool {
		all := strings.Join(argv, " ")
		return strings.Contains(all, needle) &&
			(filepath.Base(argv[0]) == "ipmitool" || strings.Contains(all, "fence_ipmilan"))
	})
}

// deadUDPPort is a UDP port of 127.0.0.1 where nothing listens (bound, then closed).
func deadUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
