package configfile

import (
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// collectionBounds are the most items each list and map of the file may hold, by the
// Go type that holds it and its JSON name. The decoder refuses a longer one before it
// looks at its items, so that 50,000 of them give one error, not 50,000; Validate
// checks the same bounds on a Config built in code. TestEveryCollectionIsBounded keeps
// this table complete.
var collectionBounds = map[reflect.Type]map[string]int{
	reflect.TypeFor[v1alpha1.Config]():                 {"agents": v1alpha1.MaxAgents, "policies": v1alpha1.MaxPolicies},
	reflect.TypeFor[v1alpha1.Agent]():                  {"params": v1alpha1.MaxParams},
	reflect.TypeFor[v1alpha1.NetworkFence]():           {"parameters": v1alpha1.MaxParams, "addressTypes": v1alpha1.MaxAddressTypes},
	reflect.TypeFor[v1alpha1.Policy]():                 {"levels": v1alpha1.MaxLevels},
	reflect.TypeFor[v1alpha1.Level]():                  {"agents": v1alpha1.MaxLevelAgents},
	reflect.TypeFor[metav1.LabelSelector]():            {"matchLabels": v1alpha1.MaxSelectorTerms, "matchExpressions": v1alpha1.MaxSelectorTerms},
	reflect.TypeFor[metav1.LabelSelectorRequirement](): {"values": v1alpha1.MaxSelectorValues},
}
