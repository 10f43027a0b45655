package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
)

// lock regenerates the Debian lock from this machine's apt (make debian-lock).
func lock(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images lock", flag.ContinueOnError)
	src := fs.String("src", ".", "root of the kubefence repository")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f := imagebuild.Fetcher{Dir: filepath.Join(*src, imagebuild.DebianCacheDir), Log: os.Stderr}
	l, err := imagebuild.GenerateLock(ctx, imagebuild.Apt(), f, os.Stderr)
	if err != nil {
		return err
	}
	// The image must build from what was locked: every library found, every package used.
	for _, a := range imagebuild.Arches {
		var debs []*imagebuild.Deb
		for _, p := range l.For(a.Name) {
			data, err := f.Fetch(ctx, p)
			if err != nil {
				return err
			}
			d, err := imagebuild.ReadDeb(p, data)
			if err != nil {
				return err
			}
			debs = append(debs, d)
		}
		if _, err := imagebuild.BaseTree(a, debs, time.Unix(0, 0)); err != nil {
			return fmt.Errorf("the %s image from the new lock: %w", a.Name, err)
		}
	}
	file := filepath.Join(*src, imagebuild.LockFile)
	if err := imagebuild.WriteLock(file, l); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s: %d packages\n", file, len(l.Packages))
	return nil
}
