// Package configfile reads the controller's configuration file (FenceControllerConfiguration,
// config.kubefence.io/v1alpha1): one YAML document, decoded strictly (every field known
// and of its type, every list within its bound, each error naming its full path and
// quoting at most a short piece of a bad value), defaulted and validated by the API
// types (pkg/apis/fencing/v1alpha1). It reads bytes and writes nothing.
package configfile
