package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/kubefence/kubefence/pkg/plugin/agentpb"
)

// errorDomain marks the ErrorInfo details this package writes, so a status from
// some other gRPC layer is never mistaken for an agent's verdict.
const errorDomain = "kubefence.io"

// kindCodes gives each kind a plausible gRPC code for tools that only look at
// codes (grpcurl, metrics). The ErrorInfo reason, not the code, is what the
// client reads back. Unavailable is deliberately unused: without ErrorInfo it
// means the agent process went away.
var kindCodes = map[ErrorKind]codes.Code{
	KindRetryable:         codes.Aborted,
	KindPermanent:         codes.FailedPrecondition,
	KindTargetUnreachable: codes.Aborted,
	KindUnsupported:       codes.Unimplemented,
	KindNotVerified:       codes.Aborted,
	KindTargetMismatch:    codes.FailedPrecondition,
}

// toStatus turns an error returned by an agent implementation into the gRPC
// status the server shim sends. Every error but a context error leaves with an
// ErrorInfo, so a status without one can only come from the transport.
func toStatus(ctx context.Context, err error) error { return toStatusWith(ctx, err, Result{}) }

// toStatusWith is toStatus for a call that failed with a result: what the agent read
// back (State, Evidence) travels with the error as a second detail, so that a failed
// call's record still shows what the device said.
func toStatusWith(ctx context.Context, err error, res Result) error {
	if err == nil {
		return nil
	}
	// The caller's deadline passed or it gave up: whatever the agent returned
	// after that, the caller sees its own context error.
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	kind, msg := KindRetryable, err.Error()
	var e *Error
	var params []ParamError
	if errors.As(err, &e) {
		kind, params = e.Kind, e.Params
		if err == error(e) {
			msg = e.Message
		}
	}
	code, ok := kindCodes[kind]
	if !ok {
		code = codes.Unknown
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Domain: errorDomain, Reason: string(kind)}}
	if len(params) > 0 {
		// google.rpc.BadRequest is gRPC's own detail for "these fields are wrong".
		bad := &errdetails.BadRequest{}
		for _, p := range params {
			bad.FieldViolations = append(bad.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: p.Name, Description: p.Detail})
		}
		details = append(details, bad)
	}
	if res.State != "" || res.Evidence != "" || res.Identity != "" {
		details = append(details, protoadapt.MessageV1Of(resultToProto(res)))
	}
	st, derr := status.New(code, msg).WithDetails(details...)
	if derr != nil {
		// Only a broken proto registry gets here; keep the message at least.
		return status.Error(code, msg)
	}
	return st.Err()
}

// resultOf returns the result a failed call's status carries; zero when it has none.
func resultOf(err error) Result {
	st, ok := status.FromError(err)
	if !ok {
		return Result{}
	}
	for _, d := range st.Details() {
		if r, ok := d.(*agentpb.Result); ok {
			return resultFromProto(r)
		}
	}
	return Result{}
}

// paramErrorsOf reads back the parameters a status refuses by name.
func paramErrorsOf(st *status.Status) []ParamError {
	var out []ParamError
	for _, d := range st.Details() {
		if bad, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range bad.GetFieldViolations() {
				out = append(out, ParamError{Name: v.GetField(), Detail: v.GetDescription()})
			}
		}
	}
	return out
}

// fromStatus is the inverse of toStatus, applied by the client shim.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %w", ErrAgentDied, err)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			return &Error{Kind: ErrorKind(info.GetReason()), Message: st.Message(), Params: paramErrorsOf(st)}
		}
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, st.Message())
	case codes.Canceled:
		return fmt.Errorf("%w: %s", context.Canceled, st.Message())
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", ErrAgentDied, st.Message())
	case codes.Unimplemented:
		// An agent built against an older contract lacks the method.
		return &Error{Kind: KindUnsupported, Message: st.Message()}
	default:
		return &Error{Kind: KindRetryable, Message: fmt.Sprintf("%s: %s", st.Code(), st.Message())}
	}
}

func requestToProto(r Request) *agentpb.Request {
	return &agentpb.Request{
		Node:     r.Node,
		Target:   r.Target,
		Params:   maps.Clone(r.Params),
		Secrets:  maps.Clone(r.Secrets),
		Epoch:    r.Epoch,
		Restore:  r.Restore,
		Incident: r.Incident,

		ExpectIdentity: r.ExpectIdentity,
	}
}

func requestFromProto(r *agentpb.Request) Request {
	return Request{
		Node:     r.GetNode(),
		Target:   r.GetTarget(),
		Params:   maps.Clone(r.GetParams()),
		Secrets:  maps.Clone(r.GetSecrets()),
		Epoch:    r.GetEpoch(),
		Restore:  r.GetRestore(),
		Incident: r.GetIncident(),

		ExpectIdentity: r.GetExpectIdentity(),
	}
}

func resultToProto(r Result) *agentpb.Result {
	return &agentpb.Result{State: string(r.State), Evidence: r.Evidence, Identity: r.Identity}
}

func resultFromProto(r *agentpb.Result) Result {
	return Result{State: parseState(r.GetState()), Evidence: r.GetEvidence(), Identity: r.GetIdentity()}
}

// parseState reads anything but the three known states as unknown, so a buggy
// agent can never make the controller believe a target is off.
func parseState(s string) PowerState {
	switch PowerState(s) {
	case StateOn, StateOff:
		return PowerState(s)
	default:
		return StateUnknown
	}
}

func descriptionToProto(d Description) *agentpb.DescribeResponse {
	resp := &agentpb.DescribeResponse{Name: d.Name, Version: d.Version}
	for _, a := range d.Actions {
		resp.Actions = append(resp.Actions, string(a))
	}
	for _, p := range d.Params {
		resp.Params = append(resp.Params, &agentpb.Param{
			Name:        p.Name,
			Type:        string(p.Type),
			Description: p.Description,
			Secret:      p.Secret,
			Required:    p.Required,
			Default:     p.Default,
		})
	}
	return resp
}

func descriptionFromProto(resp *agentpb.DescribeResponse) Description {
	d := Description{Name: resp.GetName(), Version: resp.GetVersion()}
	for _, a := range resp.GetActions() {
		d.Actions = append(d.Actions, Action(a))
	}
	for _, p := range resp.GetParams() {
		d.Params = append(d.Params, Param{
			Name:        p.GetName(),
			Type:        ParamType(p.GetType()),
			Description: p.GetDescription(),
			Secret:      p.GetSecret(),
			Required:    p.GetRequired(),
			Default:     p.GetDefault(),
		})
	}
	return d
}
