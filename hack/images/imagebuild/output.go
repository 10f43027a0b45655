package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Summary is what a build prints of an image.
type Summary struct {
	Digest v1.Hash
	// Compressed is what a pull downloads: the manifest, the config and the
	// compressed layers.
	Compressed int64
	// Uncompressed is the size of the layers' tar streams, about what the image takes
	// on a node's disk.
	Uncompressed int64
	Layers       int
}

// Summarize measures img.
func Summarize(img v1.Image) (Summary, error) {
	var s Summary
	var err error
	if s.Digest, err = img.Digest(); err != nil {
		return s, err
	}
	m, err := img.RawManifest()
	if err != nil {
		return s, err
	}
	c, err := img.RawConfigFile()
	if err != nil {
		return s, err
	}
	s.Compressed = int64(len(m) + len(c))
	layers, err := img.Layers()
	if err != nil {
		return s, err
	}
	s.Layers = len(layers)
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return s, err
		}
		s.Compressed += n
		rc, err := l.Uncompressed()
		if err != nil {
			return s, err
		}
		u, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return s, err
		}
		s.Uncompressed += u
	}
	return s, nil
}

// MB formats a size in bytes as megabytes (10^6) with the exact figure.
func MB(n int64) string {
	return fmt.Sprintf("%.1f MB (%d bytes)", float64(n)/1e6, n)
}

// WriteTarball writes img under every tag to file as a tarball that `docker load`,
// `podman load`, `ctr images import` and `kind load image-archive` read: the layout
// of docker save, a manifest.json naming the tags, with gzip-compressed layers.
func WriteTarball(file string, img v1.Image, tags []name.Tag) error {
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		refs[t] = img
	}
	return tarball.MultiRefWriteToFile(file, refs)
}

// Push uploads img to the registry of tags[0] under every tag, with the credentials of
// authn.DefaultKeychain (docker login's config file, or none).
func Push(ctx context.Context, img v1.Image, tags []name.Tag) error {
	if len(tags) == 0 {
		return errors.New("push: no tag")
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if err := remote.Write(tags[0], img, opts...); err != nil {
		return fmt.Errorf("push %s: %w", tags[0], err)
	}
	for _, t := range tags[1:] {
		if err := remote.Tag(t, img, opts...); err != nil {
			return fmt.Errorf("tag %s: %w", t, err)
		}
	}
	return nil
}

// ServeRegistry serves go-containerregistry's in-memory registry on l until ctx ends;
// it logs each request to logw (nil: none). What it holds is lost when it returns.
func ServeRegistry(ctx context.Context, l net.Listener, logw io.Writer) error {
	if logw == nil {
		logw = io.Discard
	}
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(logw, "registry: ", log.LstdFlags))),
		ReadHeaderTimeout: 30 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// Close, not Shutdown: what the registry holds is lost anyway, and a client's
		// idle or half-opened connection would hold Shutdown back for seconds.
		if err := srv.Close(); err != nil {
			return err
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
