package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kubefence/kubefence/pkg/plugin/agentpb"
)

// pluginName is the single plugin an agent binary serves.
const pluginName = "agent"

// Handshake is shared by the controller and every agent binary. The cookie is not
// a secret: it only stops an agent binary run by hand from hanging on stdin, and
// stops the controller from talking to a binary that is not a kubefence agent.
// Bump ProtocolVersion on any incompatible change to proto/agent.proto.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "KUBEFENCE_AGENT",
	MagicCookieValue: "b6f3c1e2-9a47-4d0e-8f35-kubefence-agent-v1",
}

// Serve runs impl as a fence agent and returns when the controller that launched
// the process tells it to stop. It is the only call an agent's main makes.
func Serve(impl Agent) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         pluginSet(impl),
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}

func pluginSet(impl Agent) goplugin.PluginSet {
	return goplugin.PluginSet{pluginName: &GRPCPlugin{Impl: impl}}
}

// GRPCPlugin binds Agent to go-plugin's gRPC transport. Agent authors do not use
// it; it is exported for go-plugin and for tests that wire a conn by hand.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	// Impl is the agent served; only the agent side sets it.
	Impl Agent
}

var _ goplugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the server shim around Impl.
func (p *GRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("serve agent: no implementation")
	}
	agentpb.RegisterAgentServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns the client shim, which implements Agent.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{client: agentpb.NewAgentClient(c)}, nil
}

// grpcServer runs in the agent process and adapts gRPC calls to Agent.
type grpcServer struct {
	agentpb.UnimplementedAgentServer
	impl Agent
}

func (s *grpcServer) Describe(ctx context.Context, _ *agentpb.DescribeRequest) (*agentpb.DescribeResponse, error) {
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return descriptionToProto(d), nil
}

func (s *grpcServer) Validate(ctx context.Context, in *agentpb.ValidateRequest) (*agentpb.ValidateResponse, error) {
	if err := s.impl.Validate(ctx, in.GetParams()); err != nil {
		return nil, toStatus(ctx, err)
	}
	return &agentpb.ValidateResponse{}, nil
}

func (s *grpcServer) Fence(ctx context.Context, in *agentpb.FenceRequest) (*agentpb.Result, error) {
	res, err := s.impl.Fence(ctx, requestFromProto(in.GetRequest()), Action(in.GetAction()))
	if err != nil {
		return nil, toStatusWith(ctx, err, res)
	}
	return resultToProto(res), nil
}

func (s *grpcServer) Status(ctx context.Context, in *agentpb.Request) (*agentpb.Result, error) {
	res, err := s.impl.Status(ctx, requestFromProto(in))
	if err != nil {
		return nil, toStatusWith(ctx, err, res)
	}
	return resultToProto(res), nil
}

func (s *grpcServer) Unfence(ctx context.Context, in *agentpb.Request) (*agentpb.Result, error) {
	res, err := s.impl.Unfence(ctx, requestFromProto(in))
	if err != nil {
		return nil, toStatusWith(ctx, err, res)
	}
	return resultToProto(res), nil
}

// grpcClient runs in the controller and implements Agent over gRPC. The context
// deadline travels with each call, so the agent sees the caller's deadline.
type grpcClient struct {
	client agentpb.AgentClient
}

var _ Agent = (*grpcClient)(nil)

func (c *grpcClient) Describe(ctx context.Context) (Description, error) {
	resp, err := c.client.Describe(ctx, &agentpb.DescribeRequest{})
	if err != nil {
		return Description{}, fromStatus(err)
	}
	return descriptionFromProto(resp), nil
}

func (c *grpcClient) Validate(ctx context.Context, params map[string]string) error {
	_, err := c.client.Validate(ctx, &agentpb.ValidateRequest{Params: params})
	return fromStatus(err)
}

func (c *grpcClient) Fence(ctx context.Context, req Request, action Action) (Result, error) {
	resp, err := c.client.Fence(ctx, &agentpb.FenceRequest{Request: requestToProto(req), Action: string(action)})
	if err != nil {
		return resultOf(err), callError(ctx, "Fence", req, err)
	}
	return resultFromProto(resp), nil
}

func (c *grpcClient) Status(ctx context.Context, req Request) (Result, error) {
	resp, err := c.client.Status(ctx, requestToProto(req))
	if err != nil {
		return resultOf(err), callError(ctx, "Status", req, err)
	}
	return resultFromProto(resp), nil
}

func (c *grpcClient) Unfence(ctx context.Context, req Request) (Result, error) {
	resp, err := c.client.Unfence(ctx, requestToProto(req))
	if err != nil {
		return resultOf(err), callError(ctx, "Unfence", req, err)
	}
	return resultFromProto(resp), nil
}

// callError is fromStatus for a call about req. When the caller's own deadline or cancel
// ended the call, the transport's words ("stream terminated by RST_STREAM") say nothing
// to a person: the error names the call and its target instead, and says that its
// outcome is unknown. It still matches context.DeadlineExceeded or context.Canceled.
func callError(ctx context.Context, method string, req Request, err error) error {
	err = fromStatus(err)
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	// gRPC's own timer can fire a moment before the context's: a deadline that has
	// passed counts as the caller's even while ctx.Err() is still nil.
	ctxErr := ctx.Err()
	if d, ok := ctx.Deadline(); ctxErr == nil && ok && !time.Now().Before(d) {
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr == nil {
		return err
	}
	return fmt.Errorf("%s %s (node %s): %w before the agent answered; the outcome is unknown", method, req.Target, req.Node, ctxErr)
}
