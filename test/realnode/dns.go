package realnode

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// clusterDomain is the kubelets' clusterDomain: pods look Services up as
// NAME.NAMESPACE.svc.cluster.local.
const clusterDomain = "cluster.local"

// serviceDNS answers the pods' lookups of Services, the stand-in for the cluster DNS and
// kube-proxy that these nodes lack: NAME.NAMESPACE.svc.cluster.local resolves to the
// addresses of the Service's ready endpoints, as a headless Service's name does (no node
// routes ClusterIPs). Names outside the cluster domain are refused, never forwarded: the
// nodes' traffic stays on the test's network.
type serviceDNS struct {
	client  kubernetes.Interface
	servers []*dns.Server
}

// startDNS serves on bridgeIP:53 over UDP and TCP, the address every kubelet hands its
// pods as clusterDNS.
func (c *Cluster) startDNS() error {
	d := &serviceDNS{client: c.Client}
	mux := dns.NewServeMux()
	mux.HandleFunc(".", d.answer)
	addr := net.JoinHostPort(bridgeIP, "53")
	for _, network := range []string{"udp", "tcp"} {
		started := make(chan struct{})
		s := &dns.Server{Addr: addr, Net: network, Handler: mux, NotifyStartedFunc: func() { close(started) }}
		failed := make(chan error, 1)
		go func() { failed <- s.ListenAndServe() }()
		select {
		case <-started:
		case err := <-failed:
			d.stop()
			return fmt.Errorf("cluster DNS on %s/%s: %w", addr, network, err)
		}
		d.servers = append(d.servers, s)
	}
	c.daemons = append(c.daemons, d.stop)
	return nil
}

func (d *serviceDNS) stop() {
	for _, s := range d.servers {
		_ = s.Shutdown()
	}
}

func (d *serviceDNS) answer(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Rcode = d.fill(m, req)
	_ = w.WriteMsg(m)
}

// fill puts the answer to req's one question into m and returns its response code.
func (d *serviceDNS) fill(m, req *dns.Msg) int {
	if len(req.Question) != 1 {
		return dns.RcodeFormatError
	}
	q := req.Question[0]
	if !strings.HasSuffix(strings.ToLower(q.Name), "."+clusterDomain+".") {
		return dns.RcodeRefused
	}
	m.Authoritative = true
	ips, err := d.lookup(q.Name)
	switch {
	case err != nil:
		return dns.RcodeServerFailure
	case ips == nil:
		return dns.RcodeNameError
	}
	if q.Qtype == dns.TypeA {
		for _, ip := range ips {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: ip})
		}
	}
	return dns.RcodeSuccess
}

// lookup returns the ready endpoint addresses of the Service a name names (empty when it
// has none), nil when the name is no Service's.
func (d *serviceDNS) lookup(name string) ([]net.IP, error) {
	labels := strings.Split(strings.TrimSuffix(strings.ToLower(name), "."+clusterDomain+"."), ".")
	if len(labels) != 3 || labels[2] != "svc" {
		return nil, nil
	}
	svc, ns := labels[0], labels[1]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := d.client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	slices, err := d.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	ips := []net.IP{}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				if ip := net.ParseIP(a).To4(); ip != nil {
					ips = append(ips, ip)
				}
			}
		}
	}
	return ips, nil
}
