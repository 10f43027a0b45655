// Command mhc-controller runs Cluster API's MachineHealthCheck controller, and nothing
// else of Cluster API, against one API server: the peer of kubefence's MachineHealthCheck
// e2e test (test/sim). It is wired as Cluster API's own manager wires it (a ClusterCache
// reaching each workload cluster through its Cluster's kubeconfig Secret, the default
// indexes) and built by hack/deps.sh in this module of its own, so that Cluster API's
// dependencies stay out of kubefence's go.mod. The workload cluster is the same API
// server, named by the Secret.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/api/core/v1beta2/index"
	"sigs.k8s.io/cluster-api/controllers"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/feature"
)

func main() {
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mhc-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	ctrl.SetLogger(klog.NewKlogr())
	// Machine pools are not installed here; their indexes would wait for a CRD forever.
	if err := feature.MutableGates.Set("MachinePool=false"); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := clusterv1.AddToScheme(scheme); err != nil {
		return err
	}
	// As Cluster API's manager: only the Secrets of clusters are cached, and the external
	// remediation objects are read through informers (unstructured).
	named, err := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Label: labels.NewSelector().Add(*named)}}},
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}, Unstructured: true}},
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("indexes: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: mgr.GetClient(),
		Cache:        clustercache.CacheOptions{Indexes: []clustercache.CacheOptionsIndex{clustercache.NodeProviderIDIndex}},
		Client: clustercache.ClientOptions{UserAgent: "kubefence-test-mhc",
			Cache: clustercache.ClientCacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}},
	}, controller.Options{MaxConcurrentReconciles: 1})
	if err != nil {
		return fmt.Errorf("cluster cache: %w", err)
	}
	// The default retries a failed connection every 30 s.
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(2 * time.Second)
	}
	if err := (&controllers.MachineHealthCheckReconciler{Client: mgr.GetClient(), ClusterCache: cc}).
		SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 1}); err != nil {
		return fmt.Errorf("MachineHealthCheck controller: %w", err)
	}
	return mgr.Start(ctx)
}
