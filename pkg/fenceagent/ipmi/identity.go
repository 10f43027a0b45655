package ipmi

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/redfish"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
)

// GUIDReader is a PowerClient that can read the managed system's GUID, the identity
// the node reports as status.nodeInfo.systemUUID. A client without it cannot tell, and
// its calls say "identity not checked".
type GUIDReader interface {
	// SystemGUID returns the GUID as the BMC sends it, as 32 hex digits (dashes and
	// spaces allowed); "" with a nil error when the BMC has none.
	SystemGUID(ctx context.Context) (string, error)
}

// errNoGUID is a BMC's answer that it has no system GUID (the command is not
// implemented): the device cannot tell, which is not a failure.
var errNoGUID = errors.New("the bmc has no system GUID")

// guidIdentity compares a BMC's system GUID with the node's systemUUID.
var guidIdentity = agentkit.Identity{Device: "bmc system GUID", Node: "the node's systemUUID", Same: sameGUID}

// checkIdentity reads the system GUID through the session's client and compares it
// with want, the node's systemUUID. It runs before anything is sent.
func (s *session) checkIdentity(ctx context.Context, want string) error {
	got := ""
	if r, ok := s.client.(GUIDReader); ok {
		raw, err := r.SystemGUID(ctx)
		switch {
		case errors.Is(err, errNoGUID):
			s.Note("%s", err)
		case err != nil:
			return s.classify(err, "read system GUID of "+s.bmc())
		default:
			if got, err = formatGUID(raw); err != nil {
				s.Note("system GUID %q unreadable: %s", truncate(raw, 80), err)
			}
		}
	}
	return guidIdentity.Check(&s.Evidence, got, strings.TrimSpace(want))
}

// SystemGUID sends Get System GUID (App netfn 0x06, command 0x37) and returns the 16
// bytes of its answer in the order the BMC sent them.
func (c *ipmitoolClient) SystemGUID(ctx context.Context) (string, error) {
	out, err := c.run(ctx, "raw", "0x06", "0x37")
	var te *toolError
	if errors.As(err, &te) && strings.Contains(strings.ToLower(te.output), "rsp=0x") {
		// The BMC answered with a completion code (0xc1 invalid command, ...): it has
		// no GUID to give, which a retry does not change.
		return "", fmt.Errorf("%w: %s", errNoGUID, oneLine(te.output))
	}
	return out, err
}

// SystemGUID reads the ComputerSystem's UUID, which bmclib does not: over the same
// verified TLS client, with HTTP basic auth (no second Redfish login), from the system named
// SystemName or the only one. A service with several systems and no name to choose,
// or a system without a UUID, cannot tell (errNoGUID).
func (r *redfishClient) SystemGUID(ctx context.Context) (string, error) {
	return bounded(ctx, &r.mu, "read system UUID", func() (string, error) {
		c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{
			Endpoint: "https://" + net.JoinHostPort(r.conn.Host, strconv.Itoa(r.conn.Port)),
			Username: r.conn.Username, Password: r.conn.Password, HTTPClient: r.hc, BasicAuth: true,
		})
		if err == nil {
			defer c.Logout()
			var systems []*redfish.ComputerSystem
			if systems, err = c.Service.Systems(); err == nil {
				return pickUUID(systems, r.conn.SystemName)
			}
		}
		if ctx.Err() != nil {
			return "", err
		}
		// A service that refuses basic auth, or answers oddly, cannot tell; the power
		// calls, through bmclib's session, say whether it is reachable.
		return "", fmt.Errorf("%w: %s", errNoGUID, oneLine(err.Error()))
	})
}

// pickUUID is the UUID of the system named name, or of the only one.
func pickUUID(systems []*redfish.ComputerSystem, name string) (string, error) {
	var picked []string
	for _, sys := range systems {
		if name == "" || sys.Name == name || sys.ID == name {
			picked = append(picked, sys.UUID)
		}
	}
	if len(picked) != 1 || picked[0] == "" {
		return "", fmt.Errorf("%w (%d systems, UUID %q)", errNoGUID, len(systems), strings.Join(picked, ","))
	}
	return picked[0], nil
}

// formatGUID reads 16 bytes of hex in any spacing or case and writes them as a
// lower-case UUID in the order given.
func formatGUID(raw string) (string, error) {
	b, err := guidBytes(raw)
	if err != nil {
		return "", err
	}
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], nil
}

func guidBytes(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '-' || r == ' ' || r == '\n' || r == '\t' || r == '\r' || r == '{' || r == '}' {
			return -1
		}
		return r
	}, strings.ToLower(s))
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not hex: %w", err)
	}
	if len(b) != 16 {
		return nil, fmt.Errorf("%d bytes, want 16", len(b))
	}
	return b, nil
}

// sameGUID tells whether the GUID a BMC sent and the systemUUID a node reports name one
// machine. Case and dashes do not count, and neither does byte order, within the three
// orders BMCs use: as sent (RFC 4122), the SMBIOS order whose first three fields are
// little-endian (what Linux reads from DMI as product_uuid), and the IPMI order, the
// sixteen bytes reversed (what ipmitool's "mc guid" prints).
func sameGUID(device, node string) (string, bool) {
	d, err := guidBytes(device)
	if err != nil {
		return "", false
	}
	n, err := guidBytes(node)
	if err != nil {
		return "", false
	}
	mixed := slices.Clone(d)
	slices.Reverse(mixed[0:4])
	slices.Reverse(mixed[4:6])
	slices.Reverse(mixed[6:8])
	reversed := slices.Clone(d)
	slices.Reverse(reversed)
	switch {
	case slices.Equal(n, d):
		return "same byte order", true
	case slices.Equal(n, mixed):
		return "SMBIOS byte order", true
	case slices.Equal(n, reversed):
		return "IPMI byte order, reversed", true
	}
	return "", false
}
