// Command kubeschemas makes the JSON Schemas that deploy/render's kubeconform test checks
// the rendered chart against (package kubeschemas), under the repository's .cache, once.
// deploy/render's kubeconform test makes them itself when they are missing; this makes
// them ahead, e.g. on a machine that reaches the module proxy for a later offline run.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/kubefence/kubefence/deploy/render/kubeschemas"
)

func main() {
	def := "../../.cache"
	if d := os.Getenv("KUBEFENCE_CACHE"); d != "" {
		def = d // where deploy/render's test looks, as for hack/controlplane.sh
	}
	cache := flag.String("cache", def, "the repository's cache directory ($KUBEFENCE_CACHE if set)")
	flag.Parse()
	l, err := kubeschemas.Ensure(*cache, log.Printf)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("kubeconform schemas: Kubernetes %s in %s, Prometheus Operator %s in %s\n",
		kubeschemas.KubernetesVersion, l.Kubernetes, kubeschemas.PrometheusOperatorVersion, l.PrometheusOperator)
}
