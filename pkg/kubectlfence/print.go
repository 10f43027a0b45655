package kubectlfence

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// Output formats: a table by default, or the whole value as JSON or YAML.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// Printer writes what the plugin read, in Format, with ages counted from Now.
type Printer struct {
	Format string
	Now    time.Time
	Out    io.Writer
}

// structured writes v as JSON or YAML; false for a table.
func (p Printer) structured(v any) (bool, error) {
	switch p.Format {
	case OutputJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintf(p.Out, "%s\n", b)
		return true, err
	case OutputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = p.Out.Write(b)
		return true, err
	case OutputTable, "":
		return false, nil
	}
	return true, fmt.Errorf("output %q: want table, json or yaml", p.Format)
}

// Status writes s.
func (p Printer) Status(s Status) error {
	if done, err := p.structured(s); done {
		return err
	}
	w := tabwriter.NewWriter(p.Out, 0, 4, 2, ' ', 0)
	r := s.Release
	fmt.Fprintf(w, "RELEASE:\t%s in %s (leader Lease %s, pause ConfigMap %s)\n", r.Fullname, r.Namespace, r.Lease, r.PauseConfigMap)
	fmt.Fprintf(w, "LEADER:\t%s\n", p.leader(s))
	if len(s.Pause) == 0 {
		fmt.Fprintf(w, "PAUSED:\tno\n")
	} else {
		fmt.Fprintf(w, "PAUSED:\tyes, %d request(s): no new fence is sent\n", len(s.Pause))
	}
	w.Flush()
	if len(s.Pause) > 0 {
		w = tabwriter.NewWriter(p.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "\nPAUSE ENTRY\tWHO: WHY")
		for _, e := range s.Pause {
			fmt.Fprintf(w, "%s\t%s\n", e.Name, oneLine(e.Value))
		}
		w.Flush()
	}
	fmt.Fprintln(p.Out)
	if len(s.Incidents) == 0 {
		fmt.Fprintln(p.Out, "No open incidents.")
	} else if err := p.incidents(s.Incidents, true); err != nil {
		return err
	}
	return p.devices(s)
}

// devices writes the leader's last reads of s's devices, or why they are missing.
func (p Printer) devices(s Status) error {
	if s.Devices == nil {
		_, err := fmt.Fprintf(p.Out, "\nDEVICES:  not shown: %s\n", s.DevicesError)
		return err
	}
	fmt.Fprintln(p.Out, "\nDEVICES:")
	return oncall.PrintDevices(p.Out, *s.Devices, p.Now)
}

// leader is a line about s's leader.
func (p Printer) leader(s Status) string {
	l := s.Leader
	if l == nil {
		return "none: " + s.LeaderError
	}
	out := l.Identity
	if l.Pod != "" {
		out = "pod " + l.Pod
	}
	if l.Node != "" {
		out += " on node " + l.Node
	}
	out += fmt.Sprintf(" (identity %s, epoch %d", l.Identity, l.Epoch)
	if l.RenewTime != nil {
		out += ", renewed " + p.age(*l.RenewTime) + " ago"
	}
	if l.Expired {
		out += ", EXPIRED: nobody leads"
	}
	return out + ")"
}

// History writes a node's incidents.
func (p Printer) History(in []Incident) error {
	if done, err := p.structured(in); done {
		return err
	}
	if len(in) == 0 {
		_, err := fmt.Fprintln(p.Out, "No incidents.")
		return err
	}
	return p.incidents(in, false)
}

// incidents writes a table of in; holds adds the rules that hold each.
func (p Printer) incidents(in []Incident, holds bool) error {
	w := tabwriter.NewWriter(p.Out, 0, 4, 2, ' ', 0)
	head := "INCIDENT\tNODE\tPHASE\tAGE\tREQUESTED BY\t"
	if holds {
		head += "HELD BY\t"
	}
	fmt.Fprintln(w, head+"MESSAGE")
	for _, i := range in {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t", i.Name, i.Node, i.Phase, p.age(i.Created), i.RequestedBy)
		if holds {
			var rs []string
			for _, h := range i.Holds {
				rs = append(rs, h.Reason)
			}
			fmt.Fprintf(w, "%s\t", dash(strings.Join(rs, ",")))
		}
		fmt.Fprintf(w, "%s\n", oneLine(i.Message))
	}
	return w.Flush()
}

// Timeline writes an incident's steps.
func (p Printer) Timeline(steps []v1alpha1.Step) error {
	if done, err := p.structured(steps); done {
		return err
	}
	w := tabwriter.NewWriter(p.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tSTEP\tMESSAGE")
	for _, s := range steps {
		fmt.Fprintf(w, "%s\t%s\t%s\n", s.Time.UTC().Format(time.RFC3339), s.Type, oneLine(s.Message))
	}
	return w.Flush()
}

func (p Printer) age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(p.Now.Sub(t))
}

func oneLine(s string) string { return dash(strings.Join(strings.Fields(s), " ")) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
