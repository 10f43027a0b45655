package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/registry"
)

// pushChart pushes the packaged chart to repo/kubefence as Helm's OCI artifact, dated at
// the release (helm push would date it now), by digest, with the credentials of `docker
// login` when there are any; then it tags it VERSION, unless untagged: make release tags
// a signed chart only after its signature is pushed. It returns the manifest's digest.
//
// Helm's own client makes the artifact, into a registry inside this process, since it
// pushes only to a tag; the artifact is copied from there by digest.
func pushChart(pkg []byte, repo string, rel released, created time.Time, untagged bool) (string, error) {
	local := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer local.Close()
	client, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		return "", err
	}
	staged := fmt.Sprintf("%s/kubefence:%s", strings.TrimPrefix(local.URL, "http://"), rel.ChartVersion)
	res, err := client.Push(pkg, staged, registry.PushOptCreationTime(created.UTC().Format(time.RFC3339)))
	if err != nil {
		return "", fmt.Errorf("package the chart as an OCI artifact: %w", err)
	}
	var opts []name.Option
	if rel.Insecure {
		opts = append(opts, name.Insecure)
	}
	dst, err := name.NewRepository(repo+"/kubefence", opts...)
	if err != nil {
		return "", fmt.Errorf("the chart's repository %q: %w", repo, err)
	}
	src, err := name.NewRepository(strings.TrimSuffix(staged, ":"+rel.ChartVersion), name.Insecure)
	if err != nil {
		return "", err
	}
	desc, err := copyByDigest(src, dst, res.Manifest.Digest)
	if err != nil {
		return "", fmt.Errorf("push the chart to %s: %w", dst, err)
	}
	fmt.Printf("pushed the chart %s@%s\n", dst, res.Manifest.Digest)
	if untagged {
		return res.Manifest.Digest, nil
	}
	if err := remote.Tag(dst.Tag(rel.ChartVersion), desc, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("tag the chart %s: %w", dst.Tag(rel.ChartVersion), err)
	}
	return res.Manifest.Digest, nil
}

// copyByDigest copies the manifest digest of src, with its config and layers, to dst.
func copyByDigest(src, dst name.Repository, digest string) (*remote.Descriptor, error) {
	desc, err := remote.Get(src.Digest(digest))
	if err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, err
	}
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		l, err := remote.Layer(src.Digest(d.Digest.String()))
		if err != nil {
			return nil, err
		}
		if err := remote.WriteLayer(dst, l, auth); err != nil {
			return nil, err
		}
	}
	return desc, remote.Put(dst.Digest(digest), desc, auth)
}
