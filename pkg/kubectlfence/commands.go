package kubectlfence

import (
	"context"
	"fmt"
	"strings"
)

// command is one of `kubectl fence`'s commands: its usage, how many positional arguments
// it takes, and what it does.
type command struct {
	usage    string
	min, max int
	run      func(ctx context.Context, s *session, args []string) error
}

// Usage is `kubectl fence --help`.
const Usage = `kubectl fence: read and speak to a kubefence release, in your own name.

Commands:
  status                            the leader, the pause requests, the open incidents and
                                    the devices' last reads and identities (asked of the leader)
  history NODE                      the node's incidents, newest first
  timeline INCIDENT                 the steps the leader recorded for an incident
  explain NODE                      why NODE is or is not fenced, and what happens next (asked of the leader)
  check [NODE]                      every node's fence device read once, or NODE's (asked of the leader)
  pause --reason TEXT [--name E]    stop every new fence: a pause request E in your name
  resume [--name E | --all]         lift pause request E (or every one)
  confirm-off NODE --reason TEXT [--incident INCIDENT]
                                    say NODE's machine is off: its incident (default: its
                                    newest) may release it
  cancel INCIDENT --reason TEXT     end an incident that sent no fence
  force INCIDENT                    fence an incident past the budget
  fence NODE --reason TEXT          ask for NODE to be fenced, in your name

Every word (pause, confirm-off, cancel, fence) is written in the name the API server
gives you (a SelfSubjectReview, as kubectl auth whoami), which the chart's admission
policies check; the leader decides on each and records its answer in the incident.
explain, check and status's devices run fence-controller in the leader's controller
container, with its configuration and agents: they take kubectl exec's permission (get
and create pods/exec in the release namespace), which holds the controller's own powers;
grant it as such. Without it, status shows the rest and says so.

Flags:
  -n, --namespace NS   the release's namespace (default kubefence-system)
  --release NAME       the Helm release, when the namespace holds several (its full
                       name, when you may not read its Deployment)
  --lease NAME         the leader Lease, when config.leaderElection.name renamed it
  -o, --output FORMAT  table (default), json or yaml
  --kubeconfig FILE, --context NAME   as kubectl's
`

var commands = map[string]command{
	"status":      {usage: "status [-o table|json|yaml]", run: runStatus},
	"history":     {usage: "history NODE [-o table|json|yaml]", min: 1, max: 1, run: runHistory},
	"timeline":    {usage: "timeline INCIDENT [-o table|json|yaml]", min: 1, max: 1, run: runTimeline},
	"explain":     {usage: "explain NODE", min: 1, max: 1, run: askLeader("explain")},
	"check":       {usage: "check [NODE]", max: 1, run: askLeader("check")},
	"pause":       {usage: "pause --reason TEXT [--name ENTRY]", run: runPause},
	"resume":      {usage: "resume [--name ENTRY | --all]", run: runResume},
	"confirm-off": {usage: "confirm-off NODE --reason TEXT [--incident INCIDENT]", min: 1, max: 1, run: runConfirmOff},
	"cancel":      {usage: "cancel INCIDENT --reason TEXT", min: 1, max: 1, run: runCancel},
	"force":       {usage: "force INCIDENT", min: 1, max: 1, run: runForce},
	"fence":       {usage: "fence NODE --reason TEXT", min: 1, max: 1, run: runFence},
}

func runStatus(ctx context.Context, s *session, _ []string) error {
	r, err := s.release(ctx)
	if err != nil {
		return err
	}
	st, err := s.clients.ReadStatus(ctx, r, s.cli.Now())
	if err != nil {
		return err
	}
	// The devices' reads are the leader's, asked by exec: without them status still
	// answers, and says why they are missing.
	if st.Devices, err = s.clients.ReadDevices(ctx, s.exec, r, s.cli.Now()); err != nil {
		st.DevicesError = err.Error()
	}
	return s.printer().Status(st)
}

func runHistory(ctx context.Context, s *session, args []string) error {
	in, err := s.clients.History(ctx, args[0])
	if err != nil {
		return err
	}
	return s.printer().History(in)
}

func runTimeline(ctx context.Context, s *session, args []string) error {
	steps, err := s.clients.Timeline(ctx, args[0])
	if err != nil {
		return err
	}
	return s.printer().Timeline(steps)
}

// askLeader has the leader run `fence-controller sub`; check reads one node's device
// when named (its output filtered to that node's rows).
func askLeader(sub string) func(ctx context.Context, s *session, args []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		r, err := s.release(ctx)
		if err != nil {
			return err
		}
		var pass []string
		if sub == "explain" {
			pass = args
		}
		out := s.cli.Stdout
		if sub == "check" && len(args) == 1 {
			f := &nodeRows{node: args[0], out: out}
			defer f.flush()
			out = f
		}
		return s.clients.AskLeader(ctx, s.exec, r, s.cli.Now(), sub, pass, out, s.cli.Stderr)
	}
}

func runPause(ctx context.Context, s *session, _ []string) error {
	r, who, err := s.releaseAndAuthor(ctx)
	if err != nil {
		return err
	}
	if err := s.clients.Pause(ctx, r, who, s.entry, s.reason); err != nil {
		return err
	}
	fmt.Fprintf(s.cli.Stdout, "pause request %q set in %s/%s by %s: no new fence is sent until it is lifted\n", s.entry, r.Namespace, r.PauseConfigMap, who)
	return nil
}

func runResume(ctx context.Context, s *session, _ []string) error {
	r, err := s.release(ctx)
	if err != nil {
		return err
	}
	lifted, err := s.clients.Resume(ctx, r, []string{s.entry}, s.all)
	if err != nil {
		return err
	}
	left, err := s.clients.PauseEntries(ctx, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.cli.Stdout, "lifted %s; %d pause request(s) stand\n", dash(strings.Join(lifted, ", ")), len(left))
	return nil
}

func runConfirmOff(ctx context.Context, s *session, args []string) error {
	who, err := s.clients.WhoAmI(ctx)
	if err != nil {
		return err
	}
	name, err := s.clients.ConfirmOff(ctx, args[0], s.incident, who, s.reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.cli.Stdout, "confirm-off of %s set on incident %s by %s; the leader answers it: kubectl fence timeline %s\n", args[0], name, who, name)
	return nil
}

func runCancel(ctx context.Context, s *session, args []string) error {
	who, err := s.clients.WhoAmI(ctx)
	if err != nil {
		return err
	}
	if err := s.clients.Cancel(ctx, args[0], who, s.reason); err != nil {
		return err
	}
	fmt.Fprintf(s.cli.Stdout, "cancel set on incident %s by %s; the leader answers it: kubectl fence timeline %s\n", args[0], who, args[0])
	return nil
}

func runForce(ctx context.Context, s *session, args []string) error {
	if err := s.clients.Force(ctx, args[0]); err != nil {
		return err
	}
	fmt.Fprintf(s.cli.Stdout, "incident %s forced past the budget (a pause still holds it)\n", args[0])
	return nil
}

func runFence(ctx context.Context, s *session, args []string) error {
	who, err := s.clients.WhoAmI(ctx)
	if err != nil {
		return err
	}
	name, err := s.clients.Fence(ctx, args[0], who, s.reason)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.cli.Stdout, "incident %s requested by %s for node %s\n", name, who, args[0])
	return nil
}

// releaseAndAuthor is the session's release and the caller's user name.
func (s *session) releaseAndAuthor(ctx context.Context) (Release, string, error) {
	r, err := s.release(ctx)
	if err != nil {
		return Release{}, "", err
	}
	who, err := s.clients.WhoAmI(ctx)
	return r, who, err
}
