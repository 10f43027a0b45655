// Command csidriver is the real-node cluster's CSI driver: a single-attach disk, like a
// cloud volume or a SAN LUN, served to Kubernetes' own attach path. The controller side
// (next to the kubernetes-csi external-attacher) attaches each volume to at most one node
// at a time and refuses a second node while the first still holds it; every attach and
// detach is logged, the ground truth of where a volume was. The node side runs inside
// each node, registers with its kubelet (plugin registration) and publishes volumes as
// directories. It needs no storage: what it proves is who held the volume when.
//
//	csidriver -mode controller -endpoint /run/csi.sock -log attach.log
//	csidriver -mode node -endpoint /var/lib/kubelet/plugins/NAME/csi.sock -node-id node-1 \
//	    -registration-dir /var/lib/kubelet/plugins_registry
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Name is the driver's name: CSIDriver objects, PersistentVolumes and VolumeAttachments
// name it.
const Name = "attach.kubefence.test"

func main() {
	mode := flag.String("mode", "", "controller or node")
	endpoint := flag.String("endpoint", "", "unix socket path to serve CSI on")
	nodeID := flag.String("node-id", "", "node mode: this node's name")
	regDir := flag.String("registration-dir", "", "node mode: the kubelet's plugins_registry directory")
	logPath := flag.String("log", "", "controller mode: file that records every attach and detach")
	flag.Parse()
	if err := run(*mode, *endpoint, *nodeID, *regDir, *logPath); err != nil {
		fmt.Fprintln(os.Stderr, "csidriver:", err)
		os.Exit(1)
	}
}

func run(mode, endpoint, nodeID, regDir, logPath string) error {
	if endpoint == "" {
		return fmt.Errorf("-endpoint is required")
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, identity{})
	var servers []*grpc.Server
	switch mode {
	case "controller":
		if logPath == "" {
			return fmt.Errorf("-log is required in controller mode")
		}
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer log.Close()
		csi.RegisterControllerServer(srv, &controller{log: log, attached: map[string]string{}})
	case "node":
		if nodeID == "" || regDir == "" {
			return fmt.Errorf("-node-id and -registration-dir are required in node mode")
		}
		csi.RegisterNodeServer(srv, node{id: nodeID})
		reg := grpc.NewServer()
		registerapi.RegisterRegistrationServer(reg, registration{endpoint: endpoint})
		l, err := listenUnix(filepath.Join(regDir, Name+"-reg.sock"))
		if err != nil {
			return err
		}
		go func() { _ = reg.Serve(l) }()
		servers = append(servers, reg)
	default:
		return fmt.Errorf("-mode %q: want controller or node", mode)
	}
	l, err := listenUnix(endpoint)
	if err != nil {
		return err
	}
	servers = append(servers, srv)
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		for _, s := range servers {
			s.Stop()
		}
	}()
	return srv.Serve(l)
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(path) // left by a previous boot
	return net.Listen("unix", path)
}

type identity struct {
	csi.UnimplementedIdentityServer
}

func (identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: Name, VendorVersion: "1.0.0"}, nil
}

func (identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// controller attaches each volume to one node at most.
type controller struct {
	csi.UnimplementedControllerServer
	mu       sync.Mutex
	log      *os.File
	attached map[string]string // volume → node
}

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}},
	}}}, nil
}

func (c *controller) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	vol, node := req.GetVolumeId(), req.GetNodeId()
	if vol == "" || node == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and node_id are required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if holder, ok := c.attached[vol]; ok && holder != node {
		c.record("refused", vol, node)
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is attached to node %s", vol, holder)
	}
	if _, ok := c.attached[vol]; !ok {
		c.attached[vol] = node
		c.record("attach", vol, node)
	}
	return &csi.ControllerPublishVolumeResponse{}, nil
}

func (c *controller) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	vol, node := req.GetVolumeId(), req.GetNodeId()
	c.mu.Lock()
	defer c.mu.Unlock()
	if holder, ok := c.attached[vol]; ok && (node == "" || holder == node) {
		delete(c.attached, vol)
		c.record("detach", vol, holder)
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// record appends "UNIXNANO ACTION VOLUME NODE" in one write.
func (c *controller) record(action, vol, node string) {
	fmt.Fprintf(c.log, "%d %s %s %s\n", time.Now().UnixNano(), action, vol, node)
}

type node struct {
	csi.UnimplementedNodeServer
	id string
}

func (n node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.id}, nil
}

func (n node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (n node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := os.RemoveAll(req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// registration answers the kubelet's plugin watcher.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
}

func (r registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: Name, Endpoint: r.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		fmt.Fprintln(os.Stderr, "csidriver: kubelet refused the registration:", s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
