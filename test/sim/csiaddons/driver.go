// Package csiaddons is a CSI driver's csi-addons side for tests: the identity service
// and the sidecar's NetworkFence service that the real csi-addons controller calls,
// over plain gRPC on loopback, with a blocklist in memory in place of a storage
// system's (Ceph's OSD blocklist).
package csiaddons

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/csi-addons/spec/lib/go/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kubefence/kubefence/test/sim/csiaddons/sidecarpb"
)

// Op is one call the driver answered.
type Op struct {
	At time.Time
	// Method is FenceClusterNetwork or UnFenceClusterNetwork.
	Method                      string
	CIDRs                       []string
	Parameters                  map[string]string
	SecretName, SecretNamespace string
}

// Driver serves the calls and keeps the blocklist.
type Driver struct {
	name string
	// Required are the parameters a request must carry (Ceph's clusterID, say).
	required []string

	lis net.Listener
	srv *grpc.Server

	mu sync.Mutex
	// blocked maps each fenced CIDR to when it was blocked.
	blocked map[string]time.Time
	ops     []Op
}

// Start serves driver name on a free loopback port; required are the parameters a
// request must carry, and it must name a Secret, as ceph-csi's do.
func Start(name string, required ...string) (*Driver, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("test CSI driver %s: listen: %w", name, err)
	}
	d := &Driver{name: name, required: required, lis: lis, srv: grpc.NewServer(), blocked: map[string]time.Time{}}
	identity.RegisterIdentityServer(d.srv, identityServer{name: name})
	sidecarpb.RegisterNetworkFenceServer(d.srv, fenceServer{d: d})
	go func() { _ = d.srv.Serve(lis) }()
	return d, nil
}

// Port is the driver's TCP port on 127.0.0.1.
func (d *Driver) Port() int { return d.lis.Addr().(*net.TCPAddr).Port }

// Stop stops serving at once.
func (d *Driver) Stop() { d.srv.Stop() }

// Blocked is the blocklist: each fenced CIDR and when it was blocked.
func (d *Driver) Blocked() map[string]time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]time.Time, len(d.blocked))
	for k, v := range d.blocked {
		out[k] = v
	}
	return out
}

// Ops are the calls answered so far, oldest first.
func (d *Driver) Ops() []Op {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ops)
}

type identityServer struct {
	identity.UnimplementedIdentityServer
	name string
}

func (s identityServer) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return &identity.GetIdentityResponse{Name: s.name, VendorVersion: "test"}, nil
}

// GetCapabilities says what the csi-addons controller looks for before it sends a
// NetworkFence here: a controller service that fences networks.
func (s identityServer) GetCapabilities(context.Context, *identity.GetCapabilitiesRequest) (*identity.GetCapabilitiesResponse, error) {
	return &identity.GetCapabilitiesResponse{Capabilities: []*identity.Capability{
		{Type: &identity.Capability_Service_{Service: &identity.Capability_Service{Type: identity.Capability_Service_CONTROLLER_SERVICE}}},
		{Type: &identity.Capability_NetworkFence_{NetworkFence: &identity.Capability_NetworkFence{Type: identity.Capability_NetworkFence_NETWORK_FENCE}}},
	}}, nil
}

func (s identityServer) Probe(context.Context, *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	return &identity.ProbeResponse{}, nil
}

type fenceServer struct {
	sidecarpb.UnimplementedNetworkFenceServer
	d *Driver
}

func (s fenceServer) FenceClusterNetwork(_ context.Context, req *sidecarpb.NetworkFenceRequest) (*sidecarpb.NetworkFenceResponse, error) {
	return &sidecarpb.NetworkFenceResponse{}, s.d.apply("FenceClusterNetwork", req, true)
}

func (s fenceServer) UnFenceClusterNetwork(_ context.Context, req *sidecarpb.NetworkFenceRequest) (*sidecarpb.NetworkFenceResponse, error) {
	return &sidecarpb.NetworkFenceResponse{}, s.d.apply("UnFenceClusterNetwork", req, false)
}

// apply checks a request as a real driver does and blocks or unblocks its CIDRs.
func (d *Driver) apply(method string, req *sidecarpb.NetworkFenceRequest, block bool) error {
	if len(req.Cidrs) == 0 {
		return status.Error(codes.InvalidArgument, "no CIDRs")
	}
	for _, c := range req.Cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return status.Errorf(codes.InvalidArgument, "CIDR %q: %v", c, err)
		}
	}
	for _, p := range d.required {
		if req.Parameters[p] == "" {
			return status.Errorf(codes.InvalidArgument, "parameter %s is required", p)
		}
	}
	if req.SecretName == "" || req.SecretNamespace == "" {
		return status.Error(codes.InvalidArgument, "a Secret is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	d.ops = append(d.ops, Op{At: now, Method: method, CIDRs: slices.Clone(req.Cidrs), Parameters: req.Parameters,
		SecretName: req.SecretName, SecretNamespace: req.SecretNamespace})
	for _, c := range req.Cidrs {
		if !block {
			delete(d.blocked, c)
		} else if _, ok := d.blocked[c]; !ok {
			d.blocked[c] = now
		}
	}
	return nil
}
