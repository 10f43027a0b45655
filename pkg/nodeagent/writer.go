package nodeagent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// The agent's report: what it says (Current), when it writes it (report), and its last
// word when it stops while its node may live (reportDisarm).

// Current is the report as of now.
func (a *Agent) Current() Report {
	a.mu.Lock()
	r := Report{Format: ReportFormat, Version: buildinfo.Version(), BootID: a.cfg.BootID, Isolation: a.cfg.Timing.Isolation.String(), ReportInterval: a.cfg.Timing.ReportEvery.String(), Members: MembersOf(a.known.members),
		Holds: slices.Clone(a.known.holds)}
	feeder, peers := a.feeder, a.peers
	a.mu.Unlock()
	if peers != nil {
		r.Peer = peers.Addr()
	}
	if feeder == nil {
		r.Watchdog.Stopped = "no watchdog configured"
		return r
	}
	st := feeder.State()
	r.Watchdog = WatchdogReport{Kind: watchdog.KindOf(a.cfg.Watchdog), Armed: st.Armed, Counting: st.Counting, Stopped: st.Stopped, Error: st.FeedError}
	if st.Armed {
		r.Watchdog.Timeout = st.Timeout.String()
	}
	return r
}

// report writes the report when it changed, or when ReportEvery passed since the last
// write. A failed write is tried again on the next round.
func (a *Agent) report(ctx context.Context) {
	r := a.Current()
	now := a.cfg.Clock.Now()
	a.writer.mu.Lock()
	defer a.writer.mu.Unlock()
	if a.writer.final || (a.writer.last != nil && equalReports(*a.writer.last, r) && now.Sub(a.writer.lastAt) < a.cfg.Timing.ReportEvery) {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, a.cfg.Timing.ReadEvery)
	defer cancel()
	if err := a.write(wctx, r, now); err != nil {
		klog.ErrorS(err, "Writing the report failed", "lease", klog.KRef(a.cfg.Namespace, LeaseName(a.cfg.Node)))
		a.forgetLease(err)
		return
	}
	a.writer.last, a.writer.lastAt = &r, now
}

// finalReportTimeout bounds the last report of an agent that stops, well within a pod's
// default grace period of 30s.
const finalReportTimeout = 10 * time.Second

// reportDisarm is the last report of an agent that stops while its node may live: its
// watchdog disarmed. The feeder disarms only once it is written (watchdog.Feeder's
// Disarming); nothing is written after it, so that no report in flight says "armed"
// later.
func (a *Agent) reportDisarm() error {
	r := a.Current()
	r.Watchdog.Armed, r.Watchdog.Timeout = false, ""
	r.Watchdog.Stopped = "disarmed: the agent stopped while its node may live"
	a.writer.mu.Lock()
	defer a.writer.mu.Unlock()
	a.writer.final = true
	ctx, cancel := context.WithTimeout(context.Background(), finalReportTimeout)
	defer cancel()
	var err error
	for range 3 {
		if err = a.write(ctx, r, a.cfg.Clock.Now()); err == nil {
			klog.InfoS("Reported the watchdog disarmed: the agent stops", "node", a.cfg.Node)
			return nil
		}
		a.forgetLease(err)
		if !apierrors.IsConflict(err) {
			break
		}
	}
	return fmt.Errorf("report %s/%s: %w", a.cfg.Namespace, LeaseName(a.cfg.Node), err)
}

// forgetLease drops the Lease the agent last wrote after a write failed for it (changed
// or gone): the next write reads it again. After a timeout the next write tries the same
// one, whose conflict, if it changed meanwhile, says so; reading it again after every
// timeout doubled the requests of a hundred agents to an API server that was already
// timing them out.
func (a *Agent) forgetLease(err error) {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		a.writer.lease = nil
	}
}

// write writes r as the report, at now; the caller holds writing.
func (a *Agent) write(ctx context.Context, r Report, now time.Time) error {
	leases := a.cfg.Clients.Kube.CoordinationV1().Leases(a.cfg.Namespace)
	create := false
	base := a.writer.lease
	if base == nil {
		l, err := leases.Get(ctx, LeaseName(a.cfg.Node), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// Kept only once created: a create that timed out is read again next time.
			base, create = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(a.cfg.Node), Namespace: a.cfg.Namespace}}, true
		case err != nil:
			return err
		default:
			base, a.writer.lease = l, l
		}
	}
	l := base.DeepCopy()
	if err := r.Encode(l, a.cfg.Node); err != nil {
		return err
	}
	renewed(l, now, a.cfg.Timing.ReportEvery)
	var err error
	if create {
		l, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	a.writer.lease = l
	return nil
}

// equalReports says whether b need not be written after a. Why the watchdog is not fed,
// and its last error, count by their gist (the words before the first colon): "not armed
// yet: ... answers from 3 of 100 members" changes with every round of answers, and
// writing it each time, at a hundred agents starting with an API server that times them
// out, was a write per agent per read interval on top of the reads.
func equalReports(a, b Report) bool {
	wa, wb := a.Watchdog, b.Watchdog
	wa.Stopped, wb.Stopped, wa.Error, wb.Error = gist(wa.Stopped), gist(wb.Stopped), gist(wa.Error), gist(wb.Error)
	return a.BootID == b.BootID && a.Isolation == b.Isolation && a.ReportInterval == b.ReportInterval && a.Peer == b.Peer &&
		wa == wb && a.Members == b.Members && slices.Equal(a.Holds, b.Holds)
}

// gist is s up to its first colon.
func gist(s string) string {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return s[:i]
	}
	return s
}
