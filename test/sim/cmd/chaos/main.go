// Command chaos runs randomized scenarios on the simulated cluster: each seed picks a
// cluster, a fault, one more fault stirred into the fence and their timings, and the
// invariant checker judges the run. A failing seed replays exactly with -seed N -runs 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kubefence/kubefence/test/sim"
)

func main() {
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "first seed; run i uses seed+i")
	runs := flag.Int("runs", 1, "number of runs")
	keep := flag.Bool("keep", false, "keep the work directories of failed runs")
	verbose := flag.Bool("v", false, "print the simulation's progress messages")
	plant := flag.String("plant", "", "plant a bug in the controller's build (nofloor) to show the checker catches it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := run(ctx, *seed, *runs, *keep, *verbose, *plant)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if len(failed) > 0 {
		fmt.Printf("FAILED seeds: %v (replay one: make chaos SEED=<seed> RUNS=1)\n", failed)
		os.Exit(1)
	}
}

func run(ctx context.Context, seed uint64, runs int, keep, verbose bool, plant string) ([]uint64, error) {
	root, err := os.MkdirTemp("", "kubefence-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(filepath.Join(root, "bin"))
	bin := filepath.Join(root, "bin")
	build := sim.BuildScenarioBinaries
	if plant != "" {
		build = func(ctx context.Context, dir string) error { return sim.BuildPlantedBinaries(ctx, dir, plant) }
		fmt.Printf("planted bug %s in the controller: runs should fail\n", plant)
	}
	if err := build(ctx, bin); err != nil {
		return nil, err
	}
	logf := func(string, ...any) {}
	if verbose {
		logf = func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
	}
	var failed []uint64
	began := time.Now()
	for i := range runs {
		s := seed + uint64(i)
		sc := sim.GenerateChaos(s)
		y, err := sc.Marshal()
		if err != nil {
			return failed, err
		}
		fmt.Printf("=== seed %d (run %d of %d)\n%s", s, i+1, runs, y)
		dir := filepath.Join(root, fmt.Sprintf("seed-%d", s))
		rep, err := sim.RunScenario(ctx, sc, sim.RunOptions{Dir: dir, BinDir: bin, Logf: logf})
		if rep != nil {
			fmt.Print(rep.String())
		}
		if err != nil || !rep.OK() {
			failed = append(failed, s)
			if err != nil {
				fmt.Printf("seed %d: run error: %v\n", s, err)
			}
			if keep {
				fmt.Printf("seed %d: work files kept in %s\n", s, dir)
				continue
			}
		}
		os.RemoveAll(dir)
		if ctx.Err() != nil {
			return failed, ctx.Err()
		}
	}
	fmt.Printf("chaos: %d runs from seed %d, %d failed, %s\n", runs, seed, len(failed), time.Since(began).Round(time.Second))
	if len(failed) == 0 || !keep {
		os.RemoveAll(root)
	}
	return failed, nil
}
